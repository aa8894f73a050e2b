"""What a turn produces: the `Reply`, its `ToolCall`s and `ToolCallError`s, the
`TextPiece` and `ThinkingText` pieces a stream yields, and `parse_tool_call`, which reads a call
back from the JSON the model wrote."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

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
    #: the stop string (of the turn's ``stop``) that ended the reply, else None
    stop_string: Optional[str] = None

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


#: Qwen3-Coder's XML call (also Qwen3.5's and Nemotron 3 Nano's): ``<function=NAME>`` then, per
#: argument, ``<parameter=ARG>\nVALUE\n</parameter>`` with VALUE raw text, then ``</function>``
XML_FUNCTION = "<function="
_XML_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>\n?(.*?)</function>\s*$", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>\s*", re.S)


def schema_types(schema: Any) -> set[str]:
    """The JSON types a parameter's schema declares (its ``type``, or its ``anyOf`` /
    ``oneOf`` branches'; ``enum`` and ``const`` values count by their own types)."""
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else {k for k in kind if isinstance(k, str)} \
        if isinstance(kind, list) else set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or ():
            types |= schema_types(branch)
    for value in list(schema.get("enum") or ()) + ([schema["const"]] if "const" in schema else []):
        types.add("string" if isinstance(value, str) else "boolean" if isinstance(value, bool) else
                  "null" if value is None else "number" if isinstance(value, (int, float)) else "object")
    return types


def resolved_ref(schema: Any, root: Any) -> Any:
    """``schema`` with its local ``$ref`` ("#/$defs/X", as pydantic writes them) followed
    through ``root``, the tool's parameters, as llama.cpp resolves them before reading a
    parameter's types; ``schema`` itself where there is none or it leads nowhere."""
    for _ in range(32):  # a chain of references, not a loop
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target = root
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or key not in target:
                return schema
            target = target[key]
        schema = target
    return schema


def _typed_value(text: str, schema: Any) -> Any:
    """A raw parameter value as the JSON type its schema declares, as llama.cpp's
    Qwen3-Coder parser reads it: a string-only parameter stays text; any other is parsed
    as JSON when it is valid JSON of a declared type (else kept as the text)."""
    types = schema_types(schema)
    if types == {"string"}:
        return text
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text
    kind = ("null" if value is None else "boolean" if isinstance(value, bool) else
            "integer" if isinstance(value, int) else "number" if isinstance(value, float) else
            "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object")
    if not types or kind in types or (kind == "integer" and "number" in types):
        return value
    return text


def xml_call_as_json(raw: str, parameters: Optional[Mapping[str, Any]] = None) -> str:
    """Qwen3-Coder's ``<function=NAME><parameter=ARG>VALUE</parameter>...</function>`` as
    ``{"name": ..., "arguments": {...}}``, each value typed by ``parameters`` (the tools'
    parameter schemas by tool name); ValueError where it is malformed."""
    match = _XML_FUNCTION.match(raw)
    if match is None:
        raise ValueError("not <function=NAME>...</function>")
    name, body = match.group(1).strip(), match.group(2)
    tool_params = (parameters or {}).get(name) or {}
    properties = tool_params.get("properties") or {}
    arguments: dict[str, Any] = {}
    at = 0
    for param in _XML_PARAMETER.finditer(body):
        if body[at:param.start()].strip():
            raise ValueError(f"text between parameters: {body[at:param.start()].strip()[:40]!r}")
        key = param.group(1).strip()
        arguments[key] = _typed_value(param.group(2), resolved_ref(properties.get(key), tool_params))
        at = param.end()
    if body[at:].strip():
        raise ValueError(f"an unclosed or malformed parameter: {body[at:].strip()[:40]!r}")
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def parse_tool_call(raw: str, call_id: str = "", tool_names: Optional[Iterable[str]] = None,
                    parameters: Optional[Mapping[str, Any]] = None) -> Union[ToolCall, ToolCallError]:
    """Parse ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for
    ``arguments``; arguments given as a JSON string are decoded), Gemma 4's
    ``call:NAME{key:value,...}``, or Qwen3-Coder's ``<function=NAME>...`` (its raw values
    typed by ``parameters``, the tools' parameter schemas by name).  Never raises: a
    malformed call comes back as a `ToolCallError` saying what is wrong."""
    text = raw
    if raw.lstrip().startswith("call:"):
        try:
            text = gemma4_call_as_json(raw.strip())
        except ValueError as exc:
            return ToolCallError(raw, f"Gemma 4 tool call is malformed: {exc}")
    elif raw.lstrip().startswith(XML_FUNCTION):
        try:
            text = xml_call_as_json(raw, parameters)
        except ValueError as exc:
            return ToolCallError(raw, f"XML tool call is malformed: {exc}")
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

