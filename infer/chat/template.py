"""`Chat`: a chat template and what a session needs to know about it.

It renders OpenAI-shaped messages with the Jinja template stored in the GGUF file
(``tokenizer.chat_template``), in the sandbox, the way Hugging Face
``apply_chat_template`` does, adapting messages the template cannot take.  It
learns, by rendering probe conversations, what the session's state machine needs:
the text that opens an assistant turn, the text that closes one, and the markers
of thinking blocks and tool calls.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, Callable, Mapping, Optional, Sequence

import jinja2

from .replies import Message, ToolCall
from .reply_parser import FUNCTOOLS, GRANITE_TOOL_CALL, LFM2_TOOL_MARKERS, NEMOTRON_TOOL_MARKERS, python_call_text
from .sandbox import ChatTemplateError, environment, render

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
    # Gemma 4: its own turn markers and a system role; the official template opens the
    # model's turn with an empty thought channel when thinking is off (its default).
    "gemma4": (
        "{{ bos_token }}"
        "{% for message in messages %}"
        "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{ '<|turn>' + role + '\n' + message['content'] | trim + '<turn|>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|turn>model\n<|channel>thought\n<channel|>' }}{% endif %}"),
}

#: a vocabulary token that identifies each family's template.
_FAMILY_TOKENS = (("chatml", "<|im_start|>"), ("llama3", "<|start_header_id|>"), ("gemma", "<start_of_turn>"),
                  ("gemma4", "<|turn>"))



def fallback_family(metadata: Mapping[str, Any], has_token: Callable[[str], bool]) -> str:
    """The built-in template (a `FALLBACK_TEMPLATES` key) a file without a chat
    template of its own gets: Gemma 4's for ``gemma4``, Gemma's for the other Gemma
    architectures, else the first family
    whose marker token the vocabulary holds, else ChatML."""
    arch = str(metadata.get("general.architecture", ""))
    if arch == "gemma4":
        return "gemma4"
    if arch.startswith("gemma"):
        return "gemma"
    return next((name for name, token in _FAMILY_TOKENS if has_token(token)), "chatml")


THINK_MARKERS = ("<think>", "</think>")
TOOL_MARKERS = ("<tool_call>", "</tool_call>")
#: Gemma 4's: a thought channel, and calls written call:NAME{...} (replies.parse_tool_call)
GEMMA4_THINK_MARKERS = ("<|channel>thought", "<channel|>")
GEMMA4_TOOL_MARKERS = ("<|tool_call>", "<tool_call|>")
# LFM2's templates list the tools between these (LFM2.5's after this text alone); its calls come
# between LFM2_TOOL_MARKERS (llama.cpp common/parsers/lfm2.cpp detects the family so too)
LFM2_TOOL_LIST = ("<|tool_list_start|>", "List of tools: [")

#: Ministral 3 / Magistral: reasoning between these (their templates' thinking blocks)
MISTRAL_THINK_MARKERS = ("[THINK]", "[/THINK]")
#: gpt-oss's harmony tokens: the stream decoder may show them as it likes; the parser needs
#: their spelling (reply_parser.HarmonyParser)
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>")
#: the call formats a template may call for (`Chat.call_format`), besides JSON
QWEN3_CODER, HARMONY, MINISTRAL = "qwen3_coder", "harmony", "ministral"


def call_format_of(source: str) -> Optional[str]:
    """The call format a template's text shows, detected as llama.cpp's common/chat.cpp
    does: gpt-oss's ``<|channel|>`` (harmony), Ministral 3's ``[TOOL_CALLS]NAME[ARGS]``
    (with ``[SYSTEM_PROMPT]``), Qwen3-Coder's ``<function=`` / ``<parameter=`` XML inside
    ``<tool_call>`` (Qwen3.5, Qwen3-Coder, Nemotron 3 Nano); else None."""
    if "<|channel|>" in source:
        return HARMONY
    if all(m in source for m in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")):
        return MINISTRAL
    if all(m in source for m in ("<tool_call>", "<function=", "<parameter=")) and \
            "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source:
        return QWEN3_CODER
    return None


# Probe contents: strings no template rewrites (no surrounding whitespace to trim).
_PROBE_SYSTEM = "probe-system-3e1f"
_PROBE_USER = "probe-user-3e1f"
_PROBE_ASSISTANT = "probe-assistant-3e1f"
_PROBE_TOOL = "probe-tool-3e1f"
# A tool call id every template takes: Mistral's want exactly 9 letters or digits.
_PROBE_CALL_ID = "call03e1f"


def token_id(vocab: Any, text: str) -> Optional[int]:
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
        if think_markers is None and all(m in sources for m in THINK_MARKERS):
            think_markers = THINK_MARKERS
        if think_markers is None and all(m in sources for m in GEMMA4_THINK_MARKERS):
            think_markers = GEMMA4_THINK_MARKERS
        if tool_call_markers is None and all(m in sources for m in TOOL_MARKERS):
            tool_call_markers = TOOL_MARKERS
        if tool_call_markers is None and all(m in sources for m in GEMMA4_TOOL_MARKERS):
            tool_call_markers = GEMMA4_TOOL_MARKERS
        if tool_call_markers is None and any(m in sources for m in LFM2_TOOL_LIST):
            tool_call_markers = LFM2_TOOL_MARKERS
        if tool_call_markers is None and all(m in sources for m in NEMOTRON_TOOL_MARKERS):
            tool_call_markers = NEMOTRON_TOOL_MARKERS
        #: the format of the model's calls: None (JSON), `QWEN3_CODER`, `HARMONY` or `MINISTRAL`
        self.call_format = call_format_of(sources)
        if think_markers is None and all(m in sources for m in MISTRAL_THINK_MARKERS):
            think_markers = MISTRAL_THINK_MARKERS
        if self.call_format == HARMONY:  # channels, not markers (reply_parser.HarmonyParser)
            think_markers = tool_call_markers = None
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
            family = fallback_family(metadata, lambda token: token_id(vocab, token) is not None)
        markers = {}
        for key, pair in (("think_markers", THINK_MARKERS), ("tool_call_markers", TOOL_MARKERS),
                          ("tool_call_markers", LFM2_TOOL_MARKERS)):
            if key not in markers and all(token_id(vocab, m) is not None for m in pair):
                markers[key] = pair
        return cls(template, bos_token=spelling(getattr(vocab, "bos_token_id", None)),
                   eos_token=spelling(getattr(vocab, "eos_token_id", None)), family=family,
                   tool_use_template=tool_use or None, **markers)

    @property
    def builtin_template(self) -> Optional[str]:
        """The name of the built-in template in use (`FALLBACK_TEMPLATES`), or None
        when the template is the model's own."""
        return self.family if self.source == FALLBACK_TEMPLATES.get(self.family or "") else None

    def __repr__(self) -> str:
        kind = f"fallback {self.family!r}" if self.source == FALLBACK_TEMPLATES.get(self.family or "") \
            else f"{len(self.source)}-character template"
        return f"Chat({kind}, think={self.think_markers}, tool_calls={self.tool_call_markers})"

    # ---- rendering ----------------------------------------------------------------
    def _template(self, source: str) -> jinja2.Template:
        if source not in self._compiled:
            try:
                self._compiled[source] = environment().from_string(source)
            except jinja2.TemplateSyntaxError as exc:
                raise ChatTemplateError(
                    f"the chat template does not compile: {exc.message} (line {exc.lineno})") from None
            except (RecursionError, MemoryError):
                raise ChatTemplateError("the chat template is too deeply nested to compile") from None
        return self._compiled[source]

    def render_raw(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                   tools: Optional[Sequence[Message]] = None, **kwargs: Any) -> str:
        """Render ``messages`` exactly as given (no role folding), as HF would."""
        source = self.tool_use_source if tools and self.tool_use_source else self.source
        template = self._template(source)
        variables = dict(kwargs)
        # these are TEMPLATE_VARIABLES: they replace any of kwargs
        variables.update(messages=list(messages), add_generation_prompt=bool(add_generation_prompt),
                         tools=list(tools) if tools else None,
                         bos_token=self.bos_token, eos_token=self.eos_token)
        return render(template, variables)

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
        text = self.render_raw(self.adapt(messages, tools), add_generation_prompt, tools, **kwargs)
        if self.call_format == HARMONY and not add_generation_prompt:
            # gpt-oss's template ends a conversation on an answer with <|return|>, a token for
            # training; at inference the answer ended in <|end|> (llama.cpp does the same), so
            # the next turn's prompt starts with the same tokens
            at = text.rfind("<|return|>")
            if at >= 0:
                text = text[:at] + "<|end|>" + text[at + len("<|return|>"):]
        return text

    def adapt(self, messages: Sequence[Message], tools: Optional[Sequence[Message]] = None) -> list[Message]:
        """``messages`` reshaped into what this template accepts (see `render`)."""
        check_roles(messages, "messages")
        out = [self._normalize(message) for message in messages]
        # (probed only for conversations with calls: a slow template costs nothing more otherwise)
        if any(m.get("tool_calls") for m in out):
            if self.needs_short_tool_call_ids:
                out = [_with_short_ids(m) for m in out]
            if not self.renders_parallel_tool_calls:
                out = _one_call_per_message(out)
        if tools and self.tools_placement == "system_message":
            out = self._with_system_tools(out, tools)
        elif tools and self.tools_placement == "instructions":
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
        if self.call_format == HARMONY and isinstance(m.get("reasoning_content"), str):
            # gpt-oss's template reads reasoning from "thinking", and refuses both it and
            # content beside a tool call (llama.cpp's adjustment too)
            m["thinking"] = m.pop("reasoning_content")
            if m.get("tool_calls"):
                m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, (list, tuple)):
                raise TypeError(f"tool_calls: expected a list of calls, got {type(calls).__name__}")
            if self.renders_tool_calls:
                content_none, string_arguments = self.tool_call_shape
                m["tool_calls"] = [_template_tool_call(c, string_arguments) for c in calls]
                if content_none and not content:
                    m["content"] = None
            else:
                calls = [_template_tool_call(c) for c in calls]
                del m["tool_calls"]
                m["content"] = content + self.tool_calls_text([c["function"] for c in calls])
        return m

    @functools.cached_property
    def call_prefix(self) -> Optional[str]:
        """The text that opens a JSON list of calls in the template's family's format:
        Granite's, whose system prompt says "respond only with <|tool_call|> followed by a
        JSON list of tools used", and Phi-4-mini's (known by its tools on the system
        message), which writes ``functools[...]``."""
        if self.tool_call_markers:
            return None
        if GRANITE_TOOL_CALL in self.source + (self.tool_use_source or ""):
            return GRANITE_TOOL_CALL
        return FUNCTOOLS[:-1] if self.tools_placement == "system_message" else None

    def tool_calls_text(self, functions: Sequence[Message]) -> str:
        """How the model writes the calls of one reply, for a template that does not render
        ``tool_calls`` itself: as the family writes them, else each between the tool-call
        markers, else one JSON object or a list of them (Llama 3's way, read back alike)."""
        calls = [{"name": f["name"], "arguments": f["arguments"]} for f in functions]
        if self.tool_call_markers == LFM2_TOOL_MARKERS:   # one Python-style list for all
            return self._lfm2_calls_text(functions)
        if self.tool_call_markers == NEMOTRON_TOOL_MARKERS:   # one JSON list for all
            return f"{NEMOTRON_TOOL_MARKERS[0]}{json.dumps(calls, ensure_ascii=False)}{NEMOTRON_TOOL_MARKERS[1]}"
        if self.call_prefix:
            return self.call_prefix + json.dumps(calls, ensure_ascii=False)
        if self.tool_call_markers or len(calls) == 1:
            return "".join(self.tool_call_text(f) for f in functions)
        return json.dumps(calls, ensure_ascii=False)

    def tool_call_text(self, function: Message) -> str:
        """How the model writes one call (the format `ChatSession` parses back)."""
        if self.tool_call_markers in (LFM2_TOOL_MARKERS, NEMOTRON_TOOL_MARKERS):
            return self.tool_calls_text([function])
        text = json.dumps({"name": function["name"], "arguments": function["arguments"]}, ensure_ascii=False)
        if self.tool_call_markers:
            return f"{self.tool_call_markers[0]}\n{text}\n{self.tool_call_markers[1]}"
        return text

    @staticmethod
    def _lfm2_calls_text(functions: Sequence[Message]) -> str:
        def arguments(f: Message) -> Any:
            args = f["arguments"]
            try:
                return json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                return args

        calls = []
        for f in functions:
            args = arguments(f)
            calls.append(python_call_text(f["name"], args) if isinstance(args, dict) else
                         f"{f['name']}({args})")
        return f"{LFM2_TOOL_MARKERS[0]}[{', '.join(calls)}]{LFM2_TOOL_MARKERS[1]}"

    def tool_instructions(self, tools: Sequence[Message]) -> str:
        """A system-prompt paragraph describing ``tools`` for a template that does not."""
        lines = [json.dumps(function_of(t), ensure_ascii=False) for t in tools]
        example = self.tool_call_text({"name": "<tool name>", "arguments": {"<argument>": "<value>"}})
        return ("You can call these tools:\n" + "\n".join(lines) +
                "\nTo call a tool, reply with only this, filled in:\n" + example)

    @staticmethod
    def _with_system(messages: list[Message], text: str) -> list[Message]:
        if messages and messages[0]["role"] == "system":
            return [dict(messages[0], content=messages[0]["content"] + "\n\n" + text)] + messages[1:]
        return [{"role": "system", "content": text}] + messages

    @staticmethod
    def _with_system_tools(messages: list[Message], tools: Sequence[Message]) -> list[Message]:
        # Phi-4-mini's way: the system message carries the functions as a JSON string.
        listing = json.dumps([function_of(t) for t in tools], ensure_ascii=False)
        if messages and messages[0]["role"] == "system":
            return [dict(messages[0], tools=listing)] + messages[1:]
        return [{"role": "system", "content": "", "tools": listing}] + messages

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
        call = {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": "probe", "arguments": {}}}
        text = self._renders([
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": "probe", "content": _PROBE_TOOL}])
        return text is not None and _PROBE_TOOL in text

    @functools.cached_property
    def tool_call_shape(self) -> tuple[bool, bool]:
        """How the template wants an assistant message with tool calls, as llama.cpp's
        minja finds out: ``(content_none, string_arguments)``.  Most take ``arguments`` as
        an object (they ``tojson`` it) and any content; DeepSeek-R1's renders the calls only
        when ``content`` is None and joins ``arguments`` to strings with ``+``."""
        arguments = {"probe_arg": _PROBE_ASSISTANT}
        for shape in ((False, False), (True, False), (False, True), (True, True)):
            content_none, string_arguments = shape
            call = {"id": _PROBE_CALL_ID, "type": "function", "function": {
                "name": "probe_fn", "arguments": _json_text(arguments) if string_arguments else arguments}}
            text = self._renders([{"role": "user", "content": _PROBE_USER},
                                  {"role": "assistant", "content": None if content_none else "",
                                   "tool_calls": [call]}])
            if text is not None and "probe_fn" in text and json.dumps(arguments) in text:
                return shape
        return False, False

    @functools.cached_property
    def renders_parallel_tool_calls(self) -> bool:
        """False when the template renders a message with one tool call but refuses one
        with two (Llama 3.1's and 3.2's raise "only supports single tool-calls at once")."""
        content_none, string_arguments = self.tool_call_shape

        def renders(n: int) -> bool:
            calls = [{"id": f"call{i}3e1f", "type": "function",
                      "function": {"name": f"probe{i}", "arguments": "{}" if string_arguments else {}}}
                     for i in range(n)]
            text = self._renders([{"role": "user", "content": _PROBE_USER},
                                  {"role": "assistant", "content": None if content_none else "", "tool_calls": calls}])
            # gpt-oss's renders the first call only, without complaint
            return text is not None and f"probe{n - 1}" in text
        return not self.renders_tool_calls or renders(2) or not renders(1)

    @functools.cached_property
    def renders_tool_call_reasoning(self) -> bool:
        """Whether the template shows the reasoning of an assistant message with tool calls
        that follows the last user message (``reasoning_content``): Qwen3's, Qwen3.5's and
        gpt-oss's keep the thinking of a tool-calling turn until the answer, so the
        session keeps it in that message rather than dropping it as it does elsewhere."""
        call = {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": "probe", "arguments": {}}}
        text = self._renders([{"role": "user", "content": _PROBE_USER},
                              self._normalize({"role": "assistant", "content": "", "reasoning_content": _PROBE_SYSTEM,
                                               "tool_calls": [call]})])
        return text is not None and _PROBE_SYSTEM in text

    @functools.cached_property
    def needs_short_tool_call_ids(self) -> bool:
        """Whether the template takes only 9-character alphanumeric tool call ids (Mistral's
        rule: its templates raise on any other), so that OpenAI-style ids are rewritten."""
        def renders(call_id: str) -> bool:
            call = {"id": call_id, "type": "function", "function": {"name": "probe", "arguments": {}}}
            return self._renders([{"role": "user", "content": _PROBE_USER},
                                  {"role": "assistant", "content": "", "tool_calls": [call]}]) is not None
        return not renders("call_" + "0" * 24) and renders(_PROBE_CALL_ID)

    @functools.cached_property
    def renders_tool_calls(self) -> bool:
        return "tool_calls" in self.source + (self.tool_use_source or "")

    @functools.cached_property
    def tools_placement(self) -> str:
        """Where tools go: ``"template"`` (it renders the ``tools`` variable),
        ``"system_message"`` (it renders a ``tools`` JSON string on the system
        message, as Phi-4-mini's does) or ``"instructions"`` (neither: they are
        described in the system prompt)."""
        probe = {"type": "function", "function": {"name": _PROBE_TOOL, "description": "",
                                                  "parameters": {"type": "object", "properties": {}}}}
        user = {"role": "user", "content": _PROBE_USER}
        try:
            text: Optional[str] = self.render_raw([user], add_generation_prompt=False, tools=[probe])
        except ChatTemplateError:
            text = None
        if text is not None and _PROBE_TOOL in text:
            return "template"
        text = self._renders(self._with_system_tools([user], [probe]))
        if text is not None and _PROBE_TOOL in text:
            return "system_message"
        return "instructions"

    @property
    def describes_tools(self) -> bool:
        return self.tools_placement != "instructions"

    @functools.cached_property
    def assistant_prefix(self) -> str:
        """What ``add_generation_prompt`` adds: the text that opens an assistant turn."""
        user = [{"role": "user", "content": _PROBE_USER}]
        without = self.render_raw(user, add_generation_prompt=False)
        with_prompt = self.render_raw(user, add_generation_prompt=True)
        # Phi-3's templates end a conversation that has no prompt with EOS, which the
        # prompt replaces.
        if self.eos_token and not with_prompt.startswith(without) and without.endswith(self.eos_token):
            without = without[:-len(self.eos_token)]
        if not with_prompt.startswith(without):
            raise ChatTemplateError("the chat template's generation prompt is not an addition "
                                    "to the conversation it follows")
        return with_prompt[len(without):]

    @functools.cached_property
    def end_of_turn(self) -> str:
        """The text the template writes after an assistant message's content (not
        counting the EOS with which Phi-3's templates end a whole conversation)."""
        text = self.render_raw([{"role": "user", "content": _PROBE_USER},
                                {"role": "assistant", "content": _PROBE_ASSISTANT}],
                               add_generation_prompt=False)
        at = text.rfind(_PROBE_ASSISTANT)
        if at < 0:
            raise ChatTemplateError("the chat template does not render assistant messages")
        tail = text[at + len(_PROBE_ASSISTANT):]
        eos = self.eos_token
        if eos and tail.endswith(eos) and tail[:-len(eos)].strip():
            tail = tail[:-len(eos)]
        return tail


#: the variables every render sets: extra template variables cannot replace them
TEMPLATE_VARIABLES = ("messages", "add_generation_prompt", "tools", "bos_token", "eos_token")

#: the roles of OpenAI-shaped chat messages
ROLES = ("system", "user", "assistant", "tool")


def check_roles(messages: Any, name: str) -> None:
    """TypeError unless ``messages`` is a list of dicts with a 'role'; ValueError
    for a role other than `ROLES`."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"{name}: expected a list of message dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TypeError(f"{name}[{i}]: expected a dict with a 'role' string, got {message!r}")
        if message["role"] not in ROLES:
            raise ValueError(f"{name}[{i}]: role {message['role']!r} is not one of {', '.join(ROLES)}")


def function_of(tool: Message) -> Message:
    return tool["function"] if tool.get("type") == "function" and "function" in tool else tool


_SHORT_ID = re.compile(r"[A-Za-z0-9]{9}")
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def short_tool_call_id(call_id: str) -> str:
    """``call_id`` as 9 letters and digits: itself if it is already, else a digest of it,
    so that a call and the tool result that names it still match, turn after turn."""
    if _SHORT_ID.fullmatch(call_id):
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    return "".join(_ALNUM[(n // 62 ** i) % 62] for i in range(9))


def _with_short_ids(message: Message) -> Message:
    if isinstance(message.get("tool_call_id"), str):
        message = dict(message, tool_call_id=short_tool_call_id(message["tool_call_id"]))
    if message.get("tool_calls"):
        message = dict(message, tool_calls=[dict(c, id=short_tool_call_id(c["id"])) if isinstance(c.get("id"), str)
                                            else c for c in message["tool_calls"]])
    return message


def _json_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _one_call_per_message(messages: list[Message]) -> list[Message]:
    """Each assistant message with several tool calls split into one message per call,
    each followed by its results (matched by ``tool_call_id``, else in order): the
    conversation a one-call-at-a-time model such as Llama 3.1 would have had."""
    out: list[Message] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or len(calls) < 2:
            out.append(message)
            continue
        results = []
        while i < len(messages) and messages[i]["role"] == "tool":
            results.append(messages[i])
            i += 1
        ids = [call.get("id") for call in calls]
        by_call: list[list[Message]] = [[r for r in results if call_id is not None and r.get("tool_call_id") == call_id]
                                        for call_id in ids]
        unmatched = [r for r in results if not any(r is m for mine in by_call for m in mine)]
        for mine in by_call:
            if not mine and unmatched:
                mine.append(unmatched.pop(0))
        for n, (call, mine) in enumerate(zip(calls, by_call)):
            later = None if message["content"] is None else ""
            first = dict(message, content=message["content"] if n == 0 else later, tool_calls=[call])
            if n:  # the reasoning was written once, before the first call
                first = {k: v for k, v in first.items() if k not in ("reasoning_content", "thinking")}
            out.append(first)
            out.extend(mine)
        out.extend(unmatched)
    return out


def _template_tool_call(call: Any, string_arguments: bool = False) -> Message:
    """An OpenAI tool call with its ``arguments`` as a dict (HF templates ``tojson`` them),
    or as JSON text for a template that takes them so (given text is kept as it is)."""
    if isinstance(call, ToolCall):
        call = call.to_openai()
    if not isinstance(call, dict):
        raise TypeError(f"tool_calls: expected dicts, got {type(call).__name__}")
    function = call.get("function") or {k: call[k] for k in ("name", "arguments") if k in call}
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TypeError(f"tool_calls: expected {{'function': {{'name': ..., 'arguments': ...}}}}, got {call!r}")
    function = dict(function)
    args = function.get("arguments", {})
    if string_arguments:
        args = _json_text(args)
    elif isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the string: the template shows what the model wrote
    function["arguments"] = args
    return dict(call, type=call.get("type", "function"), function=function)

