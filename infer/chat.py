"""Chat: the model's own template, and a multi-turn session over a Context.

`Chat` renders OpenAI-shaped messages with the Jinja chat template stored in the
GGUF file (``tokenizer.chat_template``), in a sandbox, the way Hugging Face
``apply_chat_template`` does.  It also learns, by rendering probe conversations,
what the session's state machine needs: the text that opens an assistant turn,
the text that closes one, and the markers of thinking blocks and tool calls.

`ChatSession` drives any variant through `Context` alone.  Its invariant: after
each turn the context holds exactly the tokens of the rendered history, so the
next turn prefills only what is new (the longest common prefix with
``Context.tokens`` is kept).  Thinking is ephemeral: it lives in the KV cache only
during its turn, and history keeps the answer alone.
"""
from __future__ import annotations

import copy
import datetime
import functools
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .generate import _held_back
from .runtime import ContextOverflowError

#: an OpenAI-shaped chat message, tool or tool call
Message = dict[str, Any]

__all__ = [
    "Chat", "ChatSession", "ChatTemplateError", "Reply", "ThinkingText", "ToolCall", "ToolCallError",
]


class ChatTemplateError(ValueError):
    """The chat template cannot be compiled or rendered for these messages."""


# ---- the sandbox --------------------------------------------------------------------
class _GenerationTag(Extension):
    """Hugging Face's ``{% generation %}...{% endgeneration %}`` (marks assistant text for
    training masks); rendering only needs the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[Any]:
        next(parser.stream)
        body: list[Any] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return body


class _Sandbox(ImmutableSandboxedEnvironment):
    """Refuses, rather than silently blanks, any reach for Python internals
    (``x.__class__``), and any method that would mutate a value (``list.append``)."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(
            f"the chat template tried to access {type(obj).__name__}.{attribute}, "
            "which the sandbox does not allow")


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@functools.cache
def _environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                   extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


# ---- fallback templates (files without tokenizer.chat_template) ----------------------
FALLBACK_TEMPLATES = {
    "chatml": (
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "llama3": (
        "{% for message in messages %}"
        "{% if loop.first %}{{ bos_token }}{% endif %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
        "+ message['content'] | trim + '<|eot_id|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    # Gemma has no system role: the session folds a system prompt into the first user turn.
    "gemma": (
        "{{ bos_token }}"
        "{% for message in messages %}"
        "{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"),
}

# A vocabulary token that identifies each family's template.
_FAMILY_TOKENS = (("chatml", "<|im_start|>"), ("llama3", "<|start_header_id|>"), ("gemma", "<start_of_turn>"))

_THINK_MARKERS = ("<think>", "</think>")
_TOOL_MARKERS = ("<tool_call>", "</tool_call>")

# Probe contents: strings no template rewrites (no surrounding whitespace to trim).
_PROBE_SYSTEM = "probe-system-3e1f"
_PROBE_USER = "probe-user-3e1f"
_PROBE_ASSISTANT = "probe-assistant-3e1f"
_PROBE_TOOL = "probe-tool-3e1f"


def _token_id(vocab: Any, text: str) -> Optional[int]:
    """The id of the single token spelled ``text``, or None."""
    try:
        tid = vocab.token_id(text)
    except (KeyError, ValueError, LookupError):
        return None
    return None if tid is None or tid < 0 else int(tid)


class Chat:
    """A chat template and what a session needs to know about it.

    ``Chat(template, bos_token=..., eos_token=...)`` compiles nothing until the
    first render: a broken template does not stop a model from loading, it fails
    when used, with a `ChatTemplateError` that says why.
    """

    def __init__(self, template: Optional[str] = None, *, bos_token: str = "", eos_token: str = "",
                 family: Optional[str] = None, think_markers: Optional[tuple[str, str]] = None,
                 tool_call_markers: Optional[tuple[str, str]] = None,
                 tool_use_template: Optional[str] = None) -> None:
        if template is None:
            family = family or "chatml"
            if family not in FALLBACK_TEMPLATES:
                raise ValueError(f"family: expected one of {sorted(FALLBACK_TEMPLATES)}, got {family!r}")
            template = FALLBACK_TEMPLATES[family]
        if not isinstance(template, str):
            raise TypeError(f"template: expected a str, got {type(template).__name__}")
        self.source = template
        self.tool_use_source = tool_use_template
        self.family = family
        self.bos_token = bos_token
        self.eos_token = eos_token
        sources = template + (tool_use_template or "")
        if think_markers is None and all(m in sources for m in _THINK_MARKERS):
            think_markers = _THINK_MARKERS
        if tool_call_markers is None and all(m in sources for m in _TOOL_MARKERS):
            tool_call_markers = _TOOL_MARKERS
        self.think_markers = think_markers
        self.tool_call_markers = tool_call_markers
        self._compiled: dict[str, jinja2.Template] = {}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], tokenizer: Any) -> "Chat":
        """The chat of a GGUF file: its template (or a fallback chosen from the
        vocabulary), its BOS/EOS spelled as the tokenizer spells them, and the
        thinking/tool-call markers found in the template or the vocabulary."""
        vocab = tokenizer.vocab
        template = metadata.get("tokenizer.chat_template")
        tool_use = metadata.get("tokenizer.chat_template.tool_use")

        def spelling(tid: Any) -> str:
            if tid is None or int(tid) < 0:
                return ""
            return str(tokenizer.decode([int(tid)], skip_special=False))

        family = None
        if not template:
            template = None
            arch = str(metadata.get("general.architecture", ""))
            family = "gemma" if arch.startswith("gemma") else None
            for name, token in _FAMILY_TOKENS:
                if family is None and _token_id(vocab, token) is not None:
                    family = name
        markers = {}
        for key, pair in (("think_markers", _THINK_MARKERS), ("tool_call_markers", _TOOL_MARKERS)):
            if all(_token_id(vocab, m) is not None for m in pair):
                markers[key] = pair
        return cls(template, bos_token=spelling(getattr(vocab, "bos_token_id", None)),
                   eos_token=spelling(getattr(vocab, "eos_token_id", None)), family=family,
                   tool_use_template=tool_use or None, **markers)

    def __repr__(self) -> str:
        kind = f"fallback {self.family!r}" if self.source == FALLBACK_TEMPLATES.get(self.family or "") \
            else f"{len(self.source)}-character template"
        return f"Chat({kind}, think={self.think_markers}, tool_calls={self.tool_call_markers})"

    # ---- rendering ----------------------------------------------------------------
    def _template(self, source: str) -> jinja2.Template:
        if source not in self._compiled:
            try:
                self._compiled[source] = _environment().from_string(source)
            except jinja2.TemplateSyntaxError as exc:
                raise ChatTemplateError(
                    f"the chat template does not compile: {exc.message} (line {exc.lineno})") from None
        return self._compiled[source]

    def render_raw(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                   tools: Optional[Sequence[Message]] = None, **kwargs: Any) -> str:
        """Render ``messages`` exactly as given (no role folding), as HF would."""
        source = self.tool_use_source if tools and self.tool_use_source else self.source
        template = self._template(source)
        variables = dict(kwargs)
        variables.update(messages=list(messages), add_generation_prompt=bool(add_generation_prompt),
                         tools=list(tools) if tools else None,
                         bos_token=self.bos_token, eos_token=self.eos_token)
        try:
            return template.render(**variables)
        except SecurityError as exc:
            raise ChatTemplateError(f"the chat template was refused by the sandbox: {exc}") from None
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the chat template failed: {exc}") from None
        except (TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
            raise ChatTemplateError(
                f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from None

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True,
               tools: Optional[Sequence[Message]] = None, **kwargs: Any) -> str:
        """Render OpenAI-shaped ``messages`` with the model's template.

        Tokenizing the result with ``parse_special=True`` gives the prompt the
        model was trained on.  Messages the template cannot take as they are are
        adapted first: a system prompt it refuses joins the first user turn, tool
        results it has no role for become user turns, tool calls it does not
        render become the JSON text the model would have written, and tools it
        does not describe are described in the system prompt.
        """
        return self.render_raw(self.adapt(messages, tools), add_generation_prompt, tools, **kwargs)

    def adapt(self, messages: Sequence[Message], tools: Optional[Sequence[Message]] = None) -> list[Message]:
        """``messages`` reshaped into what this template accepts (see `render`)."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError(f"messages: expected a list of dicts, got {type(messages).__name__}")
        out = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise TypeError(f"messages[{i}]: expected a dict with a 'role' string, got {message!r}")
            out.append(self._normalize(message))
        if tools and not self.describes_tools:
            out = self._with_system(out, self.tool_instructions(tools))
        if any(m["role"] == "tool" for m in out) and not self.supports_tool_role:
            folded: list[Message] = []
            for m in out:
                if m["role"] != "tool":
                    folded.append(m)
                elif folded and folded[-1].get("_tool_results"):  # one user turn for a batch
                    folded[-1]["content"] += "\n" + self._tool_as_user(m)["content"]
                else:
                    folded.append(dict(self._tool_as_user(m), _tool_results=True))
            out = [{k: v for k, v in m.items() if k != "_tool_results"} for m in folded]
        if out and out[0]["role"] == "system" and not self.supports_system_role:
            system, rest = out[0], out[1:]
            if rest and rest[0]["role"] == "user":
                rest[0] = dict(rest[0], content=system["content"] + "\n\n" + rest[0]["content"])
            else:
                rest.insert(0, {"role": "user", "content": system["content"]})
            out = rest
        return out

    def _normalize(self, message: Message) -> Message:
        m = dict(message)
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        elif not isinstance(content, str):
            raise TypeError(f"message content: expected str, list of parts or None, got {type(content).__name__}")
        m["content"] = content
        calls = m.get("tool_calls")
        if calls:
            calls = [_template_tool_call(c) for c in calls]
            if self.renders_tool_calls:
                m["tool_calls"] = calls
            else:
                del m["tool_calls"]
                m["content"] = content + "".join(self.tool_call_text(c["function"]) for c in calls)
        return m

    def tool_call_text(self, function: Message) -> str:
        """How the model writes one call (the format `ChatSession` parses back)."""
        text = json.dumps({"name": function["name"], "arguments": function["arguments"]}, ensure_ascii=False)
        if self.tool_call_markers:
            return f"{self.tool_call_markers[0]}\n{text}\n{self.tool_call_markers[1]}"
        return text

    def tool_instructions(self, tools: Sequence[Message]) -> str:
        """A system-prompt paragraph describing ``tools`` for a template that does not."""
        lines = [json.dumps(_function_of(t), ensure_ascii=False) for t in tools]
        example = self.tool_call_text({"name": "<tool name>", "arguments": {"<argument>": "<value>"}})
        return ("You can call these tools:\n" + "\n".join(lines) +
                "\nTo call a tool, reply with only this, filled in:\n" + example)

    @staticmethod
    def _with_system(messages: list[Message], text: str) -> list[Message]:
        if messages and messages[0]["role"] == "system":
            return [dict(messages[0], content=messages[0]["content"] + "\n\n" + text)] + messages[1:]
        return [{"role": "system", "content": text}] + messages

    @staticmethod
    def _tool_as_user(message: Message) -> Message:
        name = message.get("name") or message.get("tool_call_id") or "tool"
        return {"role": "user", "content": f"Result of {name}: {message['content']}"}

    # ---- what probes tell -----------------------------------------------------------
    def _renders(self, messages: list[Message]) -> Optional[str]:
        try:
            return self.render_raw(messages, add_generation_prompt=False)
        except ChatTemplateError:
            return None

    @functools.cached_property
    def supports_system_role(self) -> bool:
        text = self._renders([{"role": "system", "content": _PROBE_SYSTEM},
                              {"role": "user", "content": _PROBE_USER}])
        return text is not None and _PROBE_SYSTEM in text

    @functools.cached_property
    def supports_tool_role(self) -> bool:
        call = {"id": "call_0", "type": "function", "function": {"name": "probe", "arguments": {}}}
        text = self._renders([
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "name": "probe", "content": _PROBE_TOOL}])
        return text is not None and _PROBE_TOOL in text

    @functools.cached_property
    def renders_tool_calls(self) -> bool:
        return "tool_calls" in self.source + (self.tool_use_source or "")

    @functools.cached_property
    def describes_tools(self) -> bool:
        return "tools" in (self.tool_use_source or self.source)

    @functools.cached_property
    def assistant_prefix(self) -> str:
        """What ``add_generation_prompt`` adds: the text that opens an assistant turn."""
        user = [{"role": "user", "content": _PROBE_USER}]
        without = self.render_raw(user, add_generation_prompt=False)
        with_prompt = self.render_raw(user, add_generation_prompt=True)
        if not with_prompt.startswith(without):
            raise ChatTemplateError("the chat template's generation prompt is not an addition "
                                    "to the conversation it follows")
        return with_prompt[len(without):]

    @functools.cached_property
    def end_of_turn(self) -> str:
        """The text the template writes after an assistant message's content."""
        text = self.render_raw([{"role": "user", "content": _PROBE_USER},
                                {"role": "assistant", "content": _PROBE_ASSISTANT}],
                               add_generation_prompt=False)
        at = text.rfind(_PROBE_ASSISTANT)
        if at < 0:
            raise ChatTemplateError("the chat template does not render assistant messages")
        return text[at + len(_PROBE_ASSISTANT):]


def _function_of(tool: Message) -> Message:
    return tool["function"] if tool.get("type") == "function" and "function" in tool else tool


def _template_tool_call(call: Any) -> Message:
    """An OpenAI tool call with its ``arguments`` as a dict (HF templates ``tojson`` them)."""
    if isinstance(call, ToolCall):
        call = call.to_openai()
    if not isinstance(call, dict):
        raise TypeError(f"tool_calls: expected dicts, got {type(call).__name__}")
    function = dict(call.get("function") or {k: call[k] for k in ("name", "arguments") if k in call})
    args = function.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the string: the template shows what the model wrote
    function["arguments"] = args
    return dict(call, type=call.get("type", "function"), function=function)


# ---- replies --------------------------------------------------------------------------
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


class ThinkingText(str):
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


def parse_tool_call(raw: str, call_id: str = "", tool_names: Optional[Iterable[str]] = None
                    ) -> Union[ToolCall, ToolCallError]:
    """Parse ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for
    ``arguments``; arguments given as a JSON string are decoded).  Never raises:
    a malformed call comes back as a `ToolCallError` saying what is wrong."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCallError(raw, f"tool call is not valid JSON: {exc.msg} at character {exc.pos}")
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


# ---- the reply state machine -------------------------------------------------------------
_CONTENT, _THINK, _TOOL, _JSON = "content", "think", "tool", "json"


class _ReplyParser:
    """Splits generated text into answer, thinking and tool calls as it streams.

    `feed` returns the pieces that are certain: a tail that could still grow into
    a stop string or a marker is withheld until it can't.
    """

    def __init__(self, stops: Sequence[str] = (), think: Optional[tuple[str, str]] = None,
                 tool: Optional[tuple[str, str]] = None, json_tools: bool = False,
                 in_thinking: bool = False) -> None:
        self.stops = [s for s in stops if s]
        self.think = think
        self.tool = tool
        # the states that need them exist only when their markers do
        self._think_close = think[1] if think else ""
        self._tool_close = tool[1] if tool else ""
        self.json_tools = json_tools
        self.state = _THINK if (in_thinking and think) else _CONTENT
        self.buf = ""
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.tool_texts: list[str] = []
        self.stopped = False
        self._drop_space = self.state == _THINK  # whitespace after a block is template padding
        self._started = False

    def _content_markers(self) -> list[str]:
        markers = list(self.stops)
        if self.think:
            markers.append(self.think[0])
        if self.tool:
            markers.append(self.tool[0])
        return markers

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.stopped:
            return out
        self.buf += text
        while self.buf:
            if self.state == _CONTENT:
                if self._drop_space:
                    self.buf = self.buf.lstrip()
                    if not self.buf:
                        break
                    self._drop_space = False
                if self.json_tools and not self._started and not self.tool:
                    head = self.buf.lstrip()
                    if not head:
                        break
                    if head.startswith("{"):
                        self.state = _JSON
                        continue
                hit = _earliest(self.buf, self._content_markers())
                if hit is None:
                    keep = _held_back(self.buf, self._content_markers())
                    self._emit(out, _CONTENT, self.buf[:len(self.buf) - keep])
                    self.buf = self.buf[len(self.buf) - keep:]
                    break
                at, marker = hit
                self._emit(out, _CONTENT, self.buf[:at])
                self.buf = self.buf[at + len(marker):]
                if self.think and marker == self.think[0]:
                    self.state = _THINK
                elif self.tool and marker == self.tool[0]:
                    self.state = _TOOL
                else:
                    self.stopped = True
                    self.buf = ""
                    break
            elif self.state == _THINK:
                close = self._think_close
                at = self.buf.find(close)
                if at < 0:
                    keep = _held_back(self.buf, [close])
                    self._emit(out, _THINK, self.buf[:len(self.buf) - keep])
                    self.buf = self.buf[len(self.buf) - keep:]
                    break
                self._emit(out, _THINK, self.buf[:at])
                self.buf = self.buf[at + len(close):]
                self.state, self._drop_space = _CONTENT, True
            elif self.state == _TOOL:
                at = self.buf.find(self._tool_close)
                if at < 0:
                    break
                self.tool_texts.append(self.buf[:at].strip())
                self.buf = self.buf[at + len(self._tool_close):]
                self.state, self._drop_space = _CONTENT, True
            else:  # _JSON: a whole reply that may be a tool call; decided at the end
                break
        return out

    def finish(self) -> list[tuple[str, str]]:
        """Flush what was withheld; an unclosed tool call is parsed as it stands."""
        out: list[tuple[str, str]] = []
        buf, self.buf = self.buf, ""
        if self.stopped or not buf:
            return out
        if self.state == _CONTENT:
            self._emit(out, _CONTENT, buf.lstrip() if self._drop_space else buf)
        elif self.state == _THINK:
            self._emit(out, _THINK, buf)
        elif self.state == _TOOL:
            self.tool_texts.append(buf.strip())
        else:
            text = buf.strip()
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                obj = None
                looks_like_call = '"name"' in text
            else:
                looks_like_call = isinstance(obj, dict) and "name" in obj
            if looks_like_call:
                self.tool_texts.append(text)
            else:
                self._emit(out, _CONTENT, buf)
        return out

    def _emit(self, out: list[tuple[str, str]], kind: str, text: str) -> None:
        if not text:
            return
        if kind == _CONTENT:
            self._started = True
            self.content.append(text)
        else:
            self.thinking.append(text)
        out.append((kind, text))


def _earliest(text: str, markers: Sequence[str]) -> Optional[tuple[int, str]]:
    best: Optional[tuple[int, str]] = None
    for m in markers:
        at = text.find(m)
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(m) > len(best[1]))):
            best = (at, m)
    return best


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


# ---- the session -----------------------------------------------------------------------
class ChatSession:
    """A multi-turn conversation over one Context.

    ``ChatSession(model, system=None, tools=None, **sampling)``: sampling keywords
    are the sampler's (``temperature=0`` is greedy).  Pass ``context=`` to drive
    an existing Context instead of creating one, and ``template_kwargs`` for extra
    template variables (``{"enable_thinking": False}``).  With ``trim_history=True`` a
    turn that would not fit (leaving a quarter of the context, or ``max_tokens``, for
    the reply) drops the oldest exchanges first; the system prompt stays.  Messages go
    in and come out in the OpenAI shape (``{"role": ..., "content": ...}``).
    """

    def __init__(self, model: Any, system: Optional[str] = None, tools: Optional[Sequence[Message]] = None,
                 *, max_tokens: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                 n_ctx: Optional[int] = None, context: Any = None, sampler: Any = None,
                 template_kwargs: Optional[dict[str, Any]] = None, trim_history: bool = False,
                 **sampling: Any) -> None:
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system: expected a str or None, got {type(system).__name__}")
        self.model = model
        self.tokenizer = model.tokenizer
        self.chat: Chat = model.chat if model.chat is not None else _fallback_chat(model)
        if context is None:
            context = model.create_context(n_ctx=n_ctx, sampler=sampler, **sampling)
        elif sampler is not None or sampling:
            raise ValueError("sampling keywords: give them to the context you pass, not here")
        self.context = context
        self.tools = _check_tools(tools)
        self.max_tokens = _check_max_tokens(max_tokens)
        self.stop = _check_stop(stop)
        self.system = system
        if template_kwargs is not None and not isinstance(template_kwargs, dict):
            raise TypeError(f"template_kwargs: expected a dict, got {type(template_kwargs).__name__}")
        #: extra template variables, e.g. {"enable_thinking": False}
        self.template_kwargs = dict(template_kwargs or {})
        #: drop the oldest exchanges when a turn would not fit (else ContextOverflowError)
        self.trim_history = bool(trim_history)
        self.last_reply: Optional[Reply] = None
        self._messages: list[Message] = []
        self._version = 0
        self._call_ids = itertools.count()
        self.reset()
        vocab = self.tokenizer.vocab
        # The BOS the tokenizer adds to a text, if the template does not write it.
        self._bos = [t for t in self.tokenizer.encode("", add_special=True)
                     if t == getattr(vocab, "bos_token_id", None)][:1]
        stop_ids = set(getattr(vocab, "end_of_turn_ids", ()) or ())
        eos = getattr(vocab, "eos_token_id", None)
        if eos is not None and eos >= 0:
            stop_ids.add(int(eos))
        try:
            end_of_turn = self.chat.end_of_turn
        except ChatTemplateError:
            # A template that cannot end on an assistant message: EOS tokens still
            # stop a reply, and each turn's prefix match keeps the cache right.
            end_of_turn = ""
        eot_text = end_of_turn.strip()
        eot_id = _token_id(vocab, eot_text) if eot_text else None
        if eot_id is not None:
            stop_ids.add(eot_id)
        self._stop_ids = frozenset(stop_ids)
        self._eot_text = eot_text
        # Room kept free so the end of turn fits after a reply cut by a full context.
        self._reserve = len(self._encode(end_of_turn)) + 1
        # Markers that are single tokens are spelled here, whatever the decoder shows.
        self._marker_ids: dict[int, str] = {}
        for pair in (self.chat.think_markers, self.chat.tool_call_markers):
            for m in pair or ():
                tid = _token_id(vocab, m)
                if tid is not None:
                    self._marker_ids[tid] = m

    # ---- history ---------------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        """The conversation so far (copies), system prompt first if there is one."""
        return copy.deepcopy(self._messages)

    @history.setter
    def history(self, messages: Sequence[Message]) -> None:
        """Replace the conversation (as a chat-completions client sends it each time);
        the KV cache keeps whatever prefix the new one shares with it."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError(f"history: expected a list of message dicts, got {type(messages).__name__}")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise TypeError(f"history[{i}]: expected a dict with a 'role' string, got {m!r}")
        self._messages = copy.deepcopy(list(messages))
        self.last_reply = None
        self._version += 1

    def reset(self) -> None:
        """Start over (keeping ``system`` and ``tools``).  The KV cache is kept: the
        next turn reuses whatever prefix it still shares, such as the system prompt."""
        self._messages = [{"role": "system", "content": self.system}] if self.system else []
        self.last_reply = None
        self._version += 1

    def add_tool_result(self, call_id_or_name: str, content: Any) -> None:
        """Answer a tool call of the last reply (by its id, or by the tool's name).
        ``content`` that is not a str is sent as JSON.  Then ``send()`` with no text
        lets the model continue."""
        calls: list[Message] = []
        for m in reversed(self._messages):
            if m["role"] == "assistant":
                calls = m.get("tool_calls") or []
                break
            if m["role"] == "user":
                break
        match = [c for c in calls if c["id"] == call_id_or_name] or \
                [c for c in calls if c["function"]["name"] == call_id_or_name]
        if not match:
            pending = ", ".join(f"{c['id']} ({c['function']['name']})" for c in calls) or "none"
            raise ValueError(f"call_id_or_name: no tool call {call_id_or_name!r} in the last reply "
                             f"(pending: {pending})")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        call = match[0]
        self._messages.append({"role": "tool", "tool_call_id": call["id"],
                               "name": call["function"]["name"], "content": content})
        self._version += 1

    # ---- turns ----------------------------------------------------------------------------
    def send(self, text: Optional[str] = None, **options: Any) -> Reply:
        """Add a user message (none: continue after tool results) and return the reply."""
        reply = None
        for item in self.stream(text, **options):
            if isinstance(item, Reply):
                reply = item
        assert reply is not None
        return reply

    def stream(self, text: Optional[str] = None, *, max_tokens: Optional[int] = None,
               stop: Union[str, Sequence[str], None] = None,
               show_thinking: bool = False) -> Iterator[Union[str, Reply]]:
        """Yield the reply as text pieces, then the `Reply`.

        With ``show_thinking=True`` thinking is yielded too, as `ThinkingText`
        pieces.  Closing the iterator early (or Ctrl-C) ends the turn cleanly: the
        partial reply is kept with ``finish_reason="interrupted"``.
        """
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text: expected a str or None, got {type(text).__name__}")
        if text is None and (not self._messages or self._messages[-1]["role"] not in ("user", "tool")):
            raise ValueError("text: required unless the last message is a tool result or a user turn")
        max_tokens = self.max_tokens if max_tokens is None else _check_max_tokens(max_tokens)
        stops = list(self.stop) + (_check_stop(stop) if stop is not None else [])
        messages = self._messages + ([{"role": "user", "content": text}] if text is not None else [])
        room = self._reserve + (min(max_tokens or self.context.n_ctx, self.context.n_ctx // 4)
                                if self.trim_history else 0)
        while True:
            prompt_text = self.chat.render(messages, True, self.tools, **self.template_kwargs)
            prompt = self._encode(prompt_text)
            if len(prompt) + room <= self.context.n_ctx:
                break
            if not (self.trim_history and _drop_oldest_exchange(messages)):
                raise ContextOverflowError(
                    f"the conversation ({len(prompt)} tokens) does not fit in the context of "
                    f"{self.context.n_ctx} tokens; reset() or start a session with a larger n_ctx")
        think = self.chat.think_markers
        # A generation prompt may itself open the thinking block (R1-style templates).
        in_thinking = think is not None and prompt_text.rstrip().endswith(think[0])
        return self._turn(messages, prompt, max_tokens, stops, bool(show_thinking), in_thinking,
                          self._version)

    def _turn(self, messages: list[Message], prompt: list[int], max_tokens: Optional[int],
              stops: list[str], show_thinking: bool, in_thinking: bool,
              version: int) -> Iterator[Union[str, Reply]]:
        if version != self._version:
            raise RuntimeError("the conversation changed after stream() was called; call it again")
        ctx = self.context
        previous = self._messages
        self._messages = messages
        self._version += 1
        try:
            cached = self._sync(prompt)
        except BaseException:
            self._messages = previous
            raise
        chat = self.chat
        parser = _ReplyParser(stops + ([self._eot_text] if self._eot_text else []),
                              think=chat.think_markers, tool=chat.tool_call_markers,
                              json_tools=bool(self.tools), in_thinking=in_thinking)
        decoder = self.tokenizer.stream_decoder()
        generated = 0
        finish = "length"
        recorded = False
        try:
            while max_tokens is None or generated < max_tokens:
                if ctx.n_past + self._reserve >= ctx.n_ctx:
                    break
                token = ctx.next()
                generated += 1
                if token in self._stop_ids:
                    finish = "stop"
                    break
                marker = self._marker_ids.get(token)
                piece = decoder.flush() + marker if marker is not None else decoder.feed(token)
                for item in self._shown(parser.feed(piece), show_thinking):
                    yield item
                if parser.stopped:
                    finish = "stop"
                    break
            for item in self._shown(parser.feed(decoder.flush()) + parser.finish(), show_thinking):
                yield item
            reply = self._record(parser, finish, len(prompt), cached, generated)
            recorded = True
            self._sync_history()
            yield reply
        except (GeneratorExit, KeyboardInterrupt) as exc:
            # Ctrl-C, or the consumer closed the stream: the partial reply is the turn.
            if not recorded:
                parser.feed(decoder.flush())
                parser.finish()
                self._record(parser, "interrupted", len(prompt), cached, generated)
                self._sync_history()
            if isinstance(exc, GeneratorExit):
                return
            raise
        except Exception:
            # The turn failed (the Context is as it was before the failing call): drop
            # it from history; the next turn's prefix match trims the cache.
            if not recorded:
                self._messages = previous
                self._version += 1
            raise

    @staticmethod
    def _shown(pieces: list[tuple[str, str]], show_thinking: bool) -> Iterator[str]:
        for kind, text in pieces:
            if kind == _CONTENT:
                yield text
            elif show_thinking:
                yield ThinkingText(text)

    def _record(self, parser: _ReplyParser, finish: str, n_prompt: int, cached: int,
                generated: int) -> Reply:
        """Make the turn's Reply and add it to history."""
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        names = [_function_of(t)["name"] for t in self.tools] if self.tools else None
        for raw in parser.tool_texts:
            parsed = parse_tool_call(raw, f"call_{next(self._call_ids)}", names)
            if isinstance(parsed, ToolCall):
                calls.append(parsed)
            else:
                errors.append(parsed)
        if calls and finish == "stop":
            finish = "tool_calls"
        reply = Reply("".join(parser.content), "".join(parser.thinking), calls, errors, finish,
                      n_prompt, cached, generated)
        self._messages.append(reply.message)
        self._version += 1
        self.last_reply = reply
        return reply

    def _sync_history(self) -> None:
        """Roll the KV cache to the rendered history: this drops the thinking and
        anything after a stop string, and closes a turn cut short with the end of turn."""
        try:
            self._sync(self._encode(self.chat.render(self._messages, False, self.tools, **self.template_kwargs)))
        except (ChatTemplateError, ContextOverflowError):
            pass  # the next turn's prefix match repairs the cache

    def _sync(self, tokens: list[int]) -> int:
        """Make the context hold ``tokens``: keep the common prefix, prefill the rest."""
        ctx = self.context
        if len(tokens) > ctx.n_ctx:
            raise ContextOverflowError(f"{len(tokens)} tokens exceed the context of {ctx.n_ctx}")
        keep = _common_prefix(ctx.tokens, tokens)
        ctx.truncate_to(keep)
        ctx.prefill(tokens[keep:])
        return keep

    def _encode(self, text: str) -> list[int]:
        ids = list(self.tokenizer.encode(text, add_special=False, parse_special=True))
        if self._bos and ids[:1] != self._bos:
            ids = self._bos + ids
        return ids


def _drop_oldest_exchange(messages: list[Message]) -> bool:
    """Remove the oldest user turn and what answered it (keeping a leading system
    prompt and the last user turn); False when there is nothing left to drop."""
    start = 1 if messages and messages[0]["role"] == "system" else 0
    for end in range(start + 1, len(messages)):
        if messages[end]["role"] == "user":
            del messages[start:end]
            return True
    return False


def _fallback_chat(model: Any) -> Chat:
    return Chat.from_metadata(getattr(model, "metadata", None) or {}, model.tokenizer)


def _check_tools(tools: Optional[Sequence[Message]]) -> Optional[list[Message]]:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise TypeError(f"tools: expected a list of tool dicts, got {type(tools).__name__}")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise TypeError(f"tools[{i}]: expected a dict, got {type(tool).__name__}")
        function = _function_of(tool)
        if not isinstance(function.get("name"), str):
            raise ValueError(f"tools[{i}]: needs a string 'name' (OpenAI shape: "
                             "{'type': 'function', 'function': {'name': ..., 'parameters': ...}})")
        out.append(tool if "function" in tool else {"type": "function", "function": tool})
    return out or None


def _check_max_tokens(max_tokens: Optional[int]) -> Optional[int]:
    if max_tokens is None:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise TypeError(f"max_tokens: expected an int or None, got {type(max_tokens).__name__}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens: must be >= 1, got {max_tokens}")
    return max_tokens


def _check_stop(stop: Union[str, Sequence[str], None]) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop: expected non-empty strings, got {s!r}")
    return stops
