"""What a turn produces: the `Reply`, its `ToolCall`s and `ToolCallError`s, the
`TextPiece` and `ThinkingText` pieces a stream yields, and `parse_tool_call`, which reads a call
back from the JSON the model wrote."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

#: an OpenAI-shaped chat message, tool or tool call
Message = dict[str, Any]


@dataclass
class ToolCall:
    """One tool call the model made: ``name`` and ``arguments`` (a dict)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_openai(self) -> Message:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


@dataclass
class ToolCallError:
    """A tool call the model botched: the text it wrote and what is wrong with it."""

    raw: str
    message: str

    def __str__(self) -> str:
        return self.message


class TextPiece(str):
    """A piece of a streamed reply (`ChatSession.stream`).  With ``logprobs=k``,
    ``logprobs`` holds the OpenAI ``logprobs.content`` entries of the tokens generated
    since the previous piece (a token whose text is still held back, such as the start
    of a possible stop string, is reported with the piece that shows it, or with the
    `Reply`); otherwise None."""

    logprobs: Optional[list[dict[str, Any]]] = None


class ThinkingText(TextPiece):
    """A piece of a thinking block (`ChatSession.stream` with ``show_thinking=True``)."""


@dataclass
class Reply:
    """A finished assistant turn."""

    text: str
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    #: "stop" (end of turn or stop string), "length" (max_tokens or a full context),
    #: "tool_calls", or "interrupted"
    finish_reason: str = "stop"
    #: tokens of the whole rendered prompt, of those found in the KV cache, and generated
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    #: with ``logprobs=k``: OpenAI ``logprobs.content`` entries, one per generated token
    #: (the end-of-turn token excluded), else None
    logprobs: Optional[list[dict[str, Any]]] = None

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def message(self) -> Message:
        """The OpenAI-shaped assistant message this reply adds to history."""
        m: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            m["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return m

    def __str__(self) -> str:
        return self.text


#: Gemma 4's string quote in its call syntax (a token of its vocabulary)
GEMMA4_QUOTE = '<|"|>'


def _gemma4_value(text: str, i: int) -> tuple[Any, int]:
    """The value at text[i:] in Gemma 4's call syntax (its template's format_argument:
    strings between <|"|>, bare keys, true / false, numbers as they are) and where
    it ends; ValueError where it is malformed."""
    while i < len(text) and text[i].isspace():
        i += 1
    if text.startswith(GEMMA4_QUOTE, i):
        end = text.find(GEMMA4_QUOTE, i + len(GEMMA4_QUOTE))
        if end < 0:
            raise ValueError("an unclosed string")
        return text[i + len(GEMMA4_QUOTE):end], end + len(GEMMA4_QUOTE)
    if i < len(text) and text[i] in "{[":
        close = "}" if text[i] == "{" else "]"
        items: list[Any] = []
        pairs: dict[str, Any] = {}
        i += 1
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                raise ValueError(f"a missing {close!r}")
            if text[i] == close:
                return (pairs if close == "}" else items), i + 1
            if close == "}":
                if text.startswith(GEMMA4_QUOTE, i):
                    key, i = _gemma4_value(text, i)
                else:
                    colon = text.find(":", i)
                    if colon < 0:
                        raise ValueError("a key without ':'")
                    key, i = text[i:colon].strip(), colon
                while i < len(text) and text[i].isspace():
                    i += 1
                if not text.startswith(":", i):
                    raise ValueError(f"no ':' after the key {key!r}")
                pairs[str(key)], i = _gemma4_value(text, i + 1)
            else:
                value, i = _gemma4_value(text, i)
                items.append(value)
            while i < len(text) and text[i].isspace():
                i += 1
            if text.startswith(",", i):
                i += 1
            elif not text.startswith(close, i):
                raise ValueError(f"a missing ',' or {close!r} at character {i}")
    end = i
    while end < len(text) and text[end] not in ",}]":
        end += 1
    word = text[i:end].strip()
    if word in ("true", "false"):
        return word == "true", end
    if word in ("null", "none", "None"):
        return None, end
    for kind in (int, float):
        try:
            return kind(word), end
        except ValueError:
            pass
    raise ValueError(f"a value that is not a string, number or bool: {word!r}")


def gemma4_call_as_json(raw: str) -> str:
    """Gemma 4's ``call:NAME{key:value,...}`` as ``{"name": ..., "arguments": {...}}``
    (ValueError where it is not one)."""
    brace = raw.find("{")
    if not raw.startswith("call:") or brace < 0:
        raise ValueError("not call:NAME{...}")
    args, end = _gemma4_value(raw, brace)
    if raw[end:].strip():
        raise ValueError(f"text after the arguments: {raw[end:].strip()[:40]!r}")
    return json.dumps({"name": raw[len("call:"):brace].strip(), "arguments": args}, ensure_ascii=False)


def parse_tool_call(raw: str, call_id: str = "", tool_names: Optional[Iterable[str]] = None
                    ) -> Union[ToolCall, ToolCallError]:
    """Parse ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for
    ``arguments``; arguments given as a JSON string are decoded), or Gemma 4's
    ``call:NAME{key:value,...}``.  Never raises: a malformed call comes back as a
    `ToolCallError` saying what is wrong."""
    text = raw
    if raw.lstrip().startswith("call:"):
        try:
            text = gemma4_call_as_json(raw.strip())
        except ValueError as exc:
            return ToolCallError(raw, f"Gemma 4 tool call is malformed: {exc}")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCallError(raw, f"tool call is not valid JSON: {exc.msg} at character {exc.pos}")
    if isinstance(obj, dict) and "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # {"type": "function", "function": {...}}, the OpenAI shape
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCallError(raw, "tool call must be a JSON object with a string \"name\"")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCallError(raw, f"tool call arguments are not valid JSON: {exc.msg}")
    if not isinstance(args, dict):
        return ToolCallError(raw, f"tool call arguments must be a JSON object, got {type(args).__name__}")
    names = set(tool_names) if tool_names is not None else None
    if names is not None and obj["name"] not in names:
        return ToolCallError(raw, f"tool call names an unknown tool {obj['name']!r} "
                                  f"(known: {', '.join(sorted(names)) or 'none'})")
    return ToolCall(obj["name"], args, call_id)

