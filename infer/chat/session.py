"""`ChatSession`: a multi-turn conversation over one Context.

Its invariant: after each turn the context holds exactly the tokens of the
rendered history, so the next turn prefills only what is new (the longest common
prefix with ``Context.tokens`` is kept).  Thinking is ephemeral: it lives in the
KV cache only during its turn, and history keeps the answer alone.
"""
from __future__ import annotations

import copy
import inspect
import json
import re
import uuid
import warnings
import weakref
from typing import Any, Generator, Iterator, Mapping, Optional, Sequence, Union

from ..generate import logprob_entry
from ..runtime import LONG_TEXT, ContextOverflowError, run_apart
from .replies import (Message, Reply, TextPiece, ThinkingText, ToolCall, ToolCallError, resolved_ref, schema_types,
                      parse_tool_call)
from .reply_parser import CONTENT, MISTRAL_ARGS, SPELLED_MARKERS, HarmonyParser, ReplyParser
from .sandbox import ChatTemplateError
from .template import HARMONY, HARMONY_TOKENS, MINISTRAL, QWEN3_CODER, Chat, check_roles, function_of, token_id

#: a session's reply limit unless told otherwise: a model that never writes its end
#: of turn (a base model, say) stops here rather than when a long context is full
DEFAULT_MAX_TOKENS = 1024

#: the arguments of a tool that gives no ``parameters``: OpenAI reads an omitted
#: ``parameters`` as an empty parameter list, so a forced call of it writes ``{}``
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def parameters_of(tool: Message) -> Any:
    """The JSON Schema of a tool's arguments, as a forced call is constrained to it."""
    params = tool.get("parameters")
    if params is None:
        return NO_PARAMETERS
    return params or {"type": "object"}


def _is_local(ref: Any) -> bool:
    """A JSON pointer into the same schema: "#" (the whole) or "#/..."."""
    return isinstance(ref, str) and (ref == "#" or ref.startswith("#/"))


def _has_local_ref(schema: Any) -> bool:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        return _is_local(ref) or any(_has_local_ref(v) for v in schema.values())
    return isinstance(schema, list) and any(_has_local_ref(v) for v in schema)


def _rebased(schema: Any, base: str) -> Any:
    """``schema`` with its local references ("#", "#/...") pointing below ``base``, the
    place it takes inside a larger schema."""
    if isinstance(schema, dict):
        return {key: base + value[1:] if key == "$ref" and _is_local(value) else _rebased(value, base)
                for key, value in schema.items()}
    if isinstance(schema, list):
        return [_rebased(value, base) for value in schema]
    return schema


def _with_definitions(schema: Any, params: Any) -> Any:
    """A parameter's schema with its tool's definitions beside it, so that its local
    references ("#/$defs/X") resolve when it is the grammar's whole schema (they failed:
    "Pointer '/$defs/X' does not exist")."""
    if not _has_local_ref(schema) or not isinstance(schema, dict):
        return schema
    return {**{key: params[key] for key in ("$defs", "definitions") if key in params}, **schema}


class ChatSession:
    """A multi-turn conversation over one Context.

    ``ChatSession(model, system=None, tools=None, **sampling)``: sampling keywords
    are the sampler's (``temperature=0`` is greedy).  Pass ``context=`` to drive
    an existing Context instead of creating one, and ``template_kwargs`` for extra
    template variables (``{"enable_thinking": False}``).  A reply stops after
    ``max_tokens`` (`DEFAULT_MAX_TOKENS`; None: only a full context stops it).

    A turn that would not fit (leaving a quarter of the context, or ``max_tokens``,
    for the reply) drops the oldest exchanges first, keeping the system prompt
    (``trim_history=True``, the default; False raises ContextOverflowError).  With
    ``n_keep`` the session shifts the context as llama.cpp does instead: the first
    ``n_keep`` tokens stay (-1: the system prompt), and half of the tokens after them
    are dropped, oldest first, whenever the prompt or a reply fills the context.
    Messages go in and come out in the OpenAI shape (``{"role": ..., "content": ...}``).
    """

    def __init__(self, model: Any, system: Optional[str] = None, tools: Optional[Sequence[Message]] = None,
                 *, max_tokens: Optional[int] = DEFAULT_MAX_TOKENS, stop: Union[str, Sequence[str], None] = None,
                 n_ctx: Optional[int] = None, context: Any = None, sampler: Any = None,
                 template_kwargs: Optional[dict[str, Any]] = None, trim_history: bool = True,
                 n_keep: Optional[int] = None, **sampling: Any) -> None:
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system: expected a str or None, got {type(system).__name__}")
        if n_keep is not None and (isinstance(n_keep, bool) or not isinstance(n_keep, int) or n_keep < -1):
            raise ValueError(f"n_keep: expected None, -1 (the system prompt) or a count >= 0, got {n_keep!r}")
        self.model = model
        self.tokenizer = model.tokenizer
        self.chat: Chat = chat_of(model)
        if context is None:
            context = model.create_context(n_ctx=n_ctx, sampler=sampler, **sampling)
        elif sampler is not None or sampling or n_ctx is not None:
            raise ValueError("n_ctx and sampling keywords: give them to the context you pass, not here")
        self.context = context
        self.tools = _check_tools(tools)
        self.max_tokens = _check_max_tokens(max_tokens)
        self.stop = _check_stop(stop)
        self.system = system
        if template_kwargs is not None and not isinstance(template_kwargs, dict):
            raise TypeError(f"template_kwargs: expected a dict, got {type(template_kwargs).__name__}")
        #: extra template variables, e.g. {"enable_thinking": False}
        self.template_kwargs = dict(template_kwargs or {})
        #: make room when a turn would not fit (else ContextOverflowError)
        self.trim_history = bool(trim_history)
        #: None: make room by dropping whole exchanges; else shift the context, keeping
        #: this many tokens (-1: the system prompt)
        self.n_keep = n_keep
        # Tokens of the rendered conversation after the kept ones that a context
        # shift dropped; kept from turn to turn so that the cache prefix still matches.
        self._n_discarded = 0
        self.last_reply: Optional[Reply] = None
        # The generator of the last stream(), weakly (a strong reference would make a
        # cycle that delays closing a dropped stream to the garbage collector): a new turn
        # or a change of history first ends it if it was left suspended.
        self._streaming: "Optional[weakref.ref[Generator[Union[str, Reply], None, None]]]" = None
        self._messages: list[Message] = []
        self._version = 0
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
        eot_id = token_id(vocab, eot_text) if eot_text else None
        if eot_id is not None:
            stop_ids.add(eot_id)
        if self.chat.call_format == HARMONY:
            # gpt-oss ends a reply with <|return|> or <|call|>; <|end|> only ends one of its
            # messages, and more follow (llama.cpp drops it from the end-of-generation set)
            stop_ids.update(t for t in (token_id(vocab, m) for m in ("<|return|>", "<|call|>")) if t is not None)
            stop_ids.discard(token_id(vocab, "<|end|>"))
        self._stop_ids = frozenset(stop_ids)
        self._eot_text = eot_text
        # Room kept free so the end of turn fits after a reply cut by a full context.
        self._reserve = len(self._encode(end_of_turn)) + 1
        # Markers that are single tokens are spelled here, whatever the decoder shows.
        self._marker_ids: dict[int, str] = {}
        format_tokens = {HARMONY: HARMONY_TOKENS, MINISTRAL: (MISTRAL_ARGS,)}.get(self.chat.call_format or "")
        for pair in (self.chat.think_markers, self.chat.tool_call_markers, format_tokens, SPELLED_MARKERS):
            for m in pair or ():
                tid = token_id(vocab, m)
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
        check_roles(messages, "history")
        self._end_suspended_turn()
        self._messages = copy.deepcopy(list(messages))
        self.last_reply = None
        self._n_discarded = 0
        self._version += 1

    def reset(self) -> None:
        """Start over (keeping ``system`` and ``tools``).  The KV cache is kept: the
        next turn reuses whatever prefix it still shares, such as the system prompt."""
        self._end_suspended_turn()
        self._messages = [{"role": "system", "content": self.system}] if self.system else []
        self.last_reply = None
        self._n_discarded = 0
        self._version += 1

    def add_tool_result(self, call_id_or_name: str, content: Any) -> None:
        """Answer a tool call of the last reply (by its id, or by the tool's name).
        ``content`` that is not a str is sent as JSON.  Then ``send()`` with no text
        lets the model continue."""
        self._end_suspended_turn()
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
               show_thinking: bool = False, response_format: Optional[Message] = None,
               tool_choice: Any = None, logprobs: Optional[int] = None) -> Iterator[Union[str, Reply]]:
        """Yield the reply as text pieces, then the `Reply`.

        With ``show_thinking=True`` thinking is yielded too, as `ThinkingText`
        pieces.  Closing the iterator early (or Ctrl-C) ends the turn cleanly: the
        partial reply is kept with ``finish_reason="interrupted"``.

        ``response_format`` (OpenAI's: ``{"type": "json_object"}`` or ``{"type":
        "json_schema", "json_schema": {"schema": ...}}``) constrains the reply;
        ``tool_choice="required"`` or ``{"type": "function", "function": {"name": N}}``
        forces a tool call whose arguments are valid against the tool's parameters
        (`infer.structured`).  ``logprobs=k`` puts each token's log-probability and
        its k best alternatives in ``Reply.logprobs``, and each piece is then a `TextPiece`
        whose ``.logprobs`` holds those of the tokens generated since the piece before.
        """
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
            raise ValueError(f"logprobs: expected an int >= 0 or None, got {logprobs!r}")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text: expected a str or None, got {type(text).__name__}")
        self._end_suspended_turn()
        continued = self._continued_text() if text is None else None
        if text is None and continued is None and (not self._messages or
                                                   self._messages[-1]["role"] not in ("user", "tool")):
            raise ValueError("text: required unless the last message is a tool result, a user turn "
                             "or an assistant message to continue")
        max_tokens = self.max_tokens if max_tokens is None else _check_max_tokens(max_tokens)
        stops = list(self.stop) + (_check_stop(stop) if stop is not None else [])
        # An assistant message last is a reply to continue (llama-server's prefill): the
        # prompt is the conversation before it, its generation prompt, then its text.
        base = self._messages[:-1] if continued is not None else self._messages
        messages = base + ([{"role": "user", "content": text}] if text is not None else [])
        room = self._reserve + (min(max_tokens or self.context.n_ctx, self.context.n_ctx // 4)
                                if self.trim_history else 0)
        while True:
            prompt_text = self.chat.render(messages, True, self.tools, **self.template_kwargs)
            if continued is not None:
                prompt_text += self._answer_opening(prompt_text) + continued
            prompt = self._encode(prompt_text)
            if self.trim_history and self.n_keep is not None:
                prompt = self._shifted(prompt, messages, room)
                break
            if len(prompt) + room <= self.context.n_ctx:
                break
            if not (self.trim_history and _drop_oldest_exchange(messages)):
                # Say so when the prompt alone fits: the room kept for the reply is what is missing.
                reply_room = f" with {room} tokens of room for the reply" if len(prompt) <= self.context.n_ctx else ""
                raise ContextOverflowError(
                    f"the conversation ({len(prompt)} tokens) does not fit in the context of "
                    f"{self.context.n_ctx} tokens{reply_room}; reset() or start a session with a larger n_ctx")
        think = self.chat.think_markers
        # A generation prompt may itself open the thinking block (R1-style templates).
        in_thinking = think is not None and prompt_text.rstrip().endswith(think[0])
        # ... or close it (thinking off: Qwen3's enable_thinking=false writes an empty block)
        thinks = think is not None and self.chat.call_format != HARMONY and not prompt_text.rstrip().endswith(think[1])
        constraint = self._constraint(response_format, tool_choice, think if thinks else None, in_thinking)
        turn = self._turn(messages, prompt, max_tokens, stops, bool(show_thinking), in_thinking,
                          self._version, logprobs, continued or "")
        if constraint is not None:
            turn = self._constrained(turn, constraint)
        self._streaming = weakref.ref(turn)
        return turn

    def _constrained(self, turn: Generator[Union[str, Reply], None, None],
                     constraint: Any) -> Generator[Union[str, Reply], None, None]:
        """Run a turn with ``constraint`` on the context's sampler, for the whole turn: a
        server's scheduler reads it there between tokens (it decodes ahead only for a
        sampler without a grammar)."""
        sampler = self.context.sampler
        previous = getattr(sampler, "grammar", None)
        sampler.grammar = constraint
        try:
            yield from turn
        finally:
            sampler.grammar = previous

    def _end_suspended_turn(self) -> None:
        """End a turn whose stream was left suspended (a ``break`` with the iterator still
        referenced) as closing it would: its partial reply is kept as "interrupted".
        Otherwise it would end whenever it is garbage-collected, appending that reply to
        whatever the history has become by then and rolling the cache back to it."""
        turn = self._streaming() if self._streaming is not None else None
        self._streaming = None
        if turn is not None and inspect.getgeneratorstate(turn) == inspect.GEN_SUSPENDED:
            turn.close()

    def _answer_opening(self, prompt_text: str) -> str:
        """What comes between a generation prompt and the answer text a turn continues, as
        llama.cpp writes it: the close of a thinking block the prompt opened (Qwen3.5's,
        DeepSeek-R1's), or gpt-oss's final-channel header; else nothing."""
        if self.chat.call_format == HARMONY:
            return "<|channel|>final<|message|>"
        think = self.chat.think_markers
        if think and prompt_text.rstrip().endswith(think[0]):
            return "\n" + think[1] + "\n\n"  # "<think>\n" + no thought + "\n</think>\n\n"
        return ""

    def _continued_text(self) -> Optional[str]:
        """The text of a last assistant message that a turn continues, or None."""
        last = self._messages[-1] if self._messages else None
        if last is None or last["role"] != "assistant":
            return None
        content = last.get("content")
        if last.get("tool_calls") or not isinstance(content, str) or not content:
            raise ValueError("the last message is an assistant message that cannot be continued: "
                             "only a non-empty text reply without tool calls can be")
        return content

    def _constraint(self, response_format: Optional[Message], tool_choice: Any,
                    think: Optional[tuple[str, str]] = None, in_thinking: bool = False) -> Any:
        """The grammar of a turn's response_format / tool_choice (GrammarError here,
        before any token, when it is invalid).  A model that thinks (``think``: its
        markers) may think first, as llama.cpp's grammars built from its chat parsers let
        it: the grammar starts with an optional thinking block, or when the generation
        prompt has opened one (``in_thinking``), with the rest of it and its closing
        marker (a grammar that started with the call had the model write the call inside
        the block, where it came back as reasoning)."""
        if tool_choice in (None, "auto", "none") and response_format is None:
            return None
        from ..structured import Constraint, Grammar, grammar_from_response_format, lark_json

        grammar = None
        thought = self._thought_grammar(think, in_thinking)
        if tool_choice not in (None, "auto", "none"):
            grammar = self._tool_call_grammar(tool_choice, thought)
        elif response_format is not None:
            grammar = grammar_from_response_format(response_format)
            if grammar is not None and self.chat.call_format == HARMONY and isinstance(grammar.source, Mapping):
                # gpt-oss answers on its final channel (llama.cpp's response-format rule)
                grammar = Grammar.lark(f'start: {self._literal("<|channel|>")} "final" {self._literal("<|message|>")} '
                                       f"answer\nanswer: {lark_json(grammar.source)}")
            elif grammar is not None and thought and isinstance(grammar.source, Mapping):
                grammar = Grammar.lark(f"start: {thought[0]}answer\nanswer: {lark_json(grammar.source)}\n{thought[1]}")
        if grammar is None:
            return None
        if not hasattr(self.context.sampler, "grammar"):
            # Setting the attribute on it would be ignored: a reply that only looks constrained.
            raise TypeError(f"response_format / tool_choice: the context's sampler "
                            f"{type(self.context.sampler).__name__} has no grammar hook (use infer.Sampler)")
        return Constraint(grammar, self.tokenizer, n_vocab=self.model.engine.vocab_size)

    def _thought_grammar(self, think: Optional[tuple[str, str]], in_thinking: bool) -> Optional[tuple[str, str]]:
        """(what goes first in ``start:``, the rules it uses) for the thinking a constrained
        reply may begin with: its markers' tokens when they are special tokens, any text
        between them (llama.cpp's ``optional(start + reasoning(until(end)) + end)``), white
        space after; only the rest and the end when the prompt opened the block; None
        when the model does not think here."""
        if think is None:
            return None
        open_, close = think
        close_id = token_id(self.tokenizer.vocab, close)
        if close_id is not None:  # any text, then the closing token (no text can be it)
            body = f"thought_text {self._literal(close)}"
            rules = "thought_text: /(?s:.*)/"
        else:  # the text up to the first closing marker, which it includes
            body = "THOUGHT_TO_END"
            end = re.escape(close).replace("/", "\\/")
            rules = f"THOUGHT_TO_END: /(?s:.*){end}/ & ~/(?s:.*){end}(?s:.+)/"
        rules += "\nTHOUGHT_SPACE: /[ \\t\\r\\n]*/"
        if in_thinking:
            return f"{body} THOUGHT_SPACE ", rules
        return f"({self._literal(open_)} {body} THOUGHT_SPACE)? ", rules

    def _literal(self, marker: str) -> str:
        """``marker`` in a Lark grammar: its special token when it is one."""
        tid = token_id(self.tokenizer.vocab, marker)
        return f"<[{tid}]>" if tid is not None else json.dumps(marker)

    def _tool_call_grammar(self, tool_choice: Any, thought: Optional[tuple[str, str]] = None) -> Any:
        """A grammar for one call of the session's tools (or of the one named),
        between the template's tool-call markers when it has them, after the thinking
        ``thought`` allows (`_thought_grammar`)."""
        from ..structured import Grammar, lark_json

        if not self.tools:
            raise ValueError("tool_choice: the session has no tools")
        tools = [function_of(t) for t in self.tools]
        if tool_choice != "required":
            name = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
            if not isinstance(name, str):
                raise ValueError(f"tool_choice: expected 'auto', 'none', 'required' or "
                                 f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
            tools = [t for t in tools if t["name"] == name]
            if not tools:
                raise ValueError(f"tool_choice: no tool named {name!r}")
        think, think_rules = thought if thought else ("", "")
        if self.chat.call_format in (QWEN3_CODER, HARMONY, MINISTRAL):
            return Grammar.lark(f"start: {think}{self._format_call_grammar(tools)}\n{think_rules}")
        # A tool's local references ("#/$defs/X", as pydantic writes them) point into its
        # own parameters: moved under the call's schema, those go to $defs/toolI, and the
        # references with them (they failed: "Pointer '/$defs/X' does not exist").
        definitions: dict[str, Any] = {}
        arguments = []
        for i, t in enumerate(tools):
            params = parameters_of(t)
            if _has_local_ref(params):
                definitions[f"tool{i}"] = _rebased(params, f"#/$defs/tool{i}")
                params = {"$ref": f"#/$defs/tool{i}"}
            arguments.append(params)
        calls = [{"type": "object", "properties": {
            "name": {"const": t["name"]},
            "arguments": args},
            "required": ["name", "arguments"], "additionalProperties": False} for t, args in zip(tools, arguments)]
        schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
        if definitions:
            schema = {**schema, "$defs": definitions}
        markers = self.chat.tool_call_markers
        if markers is None:
            if not think:
                return Grammar.json_schema(schema)
            return Grammar.lark(f"start: {think}call\ncall: {lark_json(schema)}\n{think_rules}")
        return Grammar.lark(f'start: {think}{self._literal(markers[0])} "\\n" call "\\n" '
                            f"{self._literal(markers[1])}\ncall: {lark_json(schema)}\n{think_rules}")

    def _format_call_grammar(self, tools: list[Message]) -> str:
        """The Lark rules after ``start:`` of one call of ``tools`` written as the template's
        call format has the model write it (llama.cpp's grammars for these formats):
        Qwen3-Coder's XML, a value per parameter, raw text where the parameter may be a
        string, else JSON of its schema; gpt-oss's commentary message to ``functions.NAME``;
        Ministral's ``[TOOL_CALLS]NAME[ARGS]{...}``."""
        from ..structured import lark_json

        rules = []
        for i, tool in enumerate(tools):
            params = parameters_of(tool)
            name = json.dumps(tool["name"])
            if self.chat.call_format == HARMONY:
                rules.append(f"tool{i}: {name} \" \" {self._literal('<|constrain|>')} \"json\" "
                             f"{self._literal('<|message|>')} {lark_json(params)}")
            elif self.chat.call_format == MINISTRAL:
                rules.append(f"tool{i}: {name} {self._literal('[ARGS]')} {lark_json(params)}")
            else:
                properties = params.get("properties") or {}
                required = [k for k in params.get("required") or () if k in properties]
                optional = [k for k in properties if k not in required]
                for j, key in enumerate(list(properties)):
                    schema = properties[key]
                    types = schema_types(resolved_ref(schema, params))
                    value = ("XML_STRING" if not types or "string" in types else
                             f'{lark_json(_with_definitions(schema, params))} "\\n</parameter>\\n"')
                    rules.append(f"tool{i}_p{j}: {json.dumps('<parameter=' + key + '>' + chr(10))} {value}")
                index = {k: j for j, k in enumerate(properties)}
                args = " ".join(f"tool{i}_p{index[k]}" for k in required)
                if optional:
                    args += " (" + " | ".join(f"tool{i}_p{index[k]}" for k in optional) + ")*"
                rules.append(f"tool{i}: {json.dumps('<function=' + tool['name'] + '>' + chr(10))} {args} "
                             '"</function>\\n"')
        call = " | ".join(f"tool{i}" for i in range(len(tools)))
        if self.chat.call_format == HARMONY:
            head = f'{self._literal("<|channel|>")} "commentary to=functions." ({call})'
        elif self.chat.call_format == MINISTRAL:
            head = f'{self._literal("[TOOL_CALLS]")} ({call})'
        else:
            head = f'{self._literal("<tool_call>")} "\\n" ({call}) {self._literal("</tool_call>")}'
            # a raw value ends at "\n</parameter>\n", which the lexeme includes (a lexeme
            # ending before it would be read greedily into it); no "</parameter>" inside
            rules.append(r'XML_STRING: /(?s:.*)\n<\/parameter>\n/ & ~/(?s:.*)<\/parameter>(?s:..+)/')
        return head + "\n" + "\n".join(rules)

    def _turn(self, messages: list[Message], prompt: list[int], max_tokens: Optional[int],
              stops: list[str], show_thinking: bool, in_thinking: bool,
              version: int, logprobs: Optional[int] = None,
              continued: str = "") -> Generator[Union[str, Reply], None, None]:
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
        stop_texts = stops + ([self._eot_text] if self._eot_text else [])
        parser: Union[ReplyParser, HarmonyParser] = HarmonyParser(stop_texts) if chat.call_format == HARMONY else \
            ReplyParser(stop_texts, think=chat.think_markers, tool=chat.tool_call_markers,
                        json_tools=bool(self.tools), in_thinking=in_thinking,
                        tool_ends_thinking=chat.call_format == QWEN3_CODER,
                        bare_calls=[f"<function={function_of(t)['name']}>" for t in self.tools or ()
                                    if chat.call_format == QWEN3_CODER and "<think>" not in chat.source])
        # no control tokens in a reply, as llama.cpp renders one; the format's markers are
        # spelled from their ids above (llama-server's preserved tokens)
        try:
            decoder = self.tokenizer.stream_decoder(skip_special=True)
        except TypeError:  # a variant's own tokenizer, without skip_special: its decoder as it is
            decoder = self.tokenizer.stream_decoder()
        generated = 0
        finish = "length"
        recorded = False
        records: Optional[list[dict[str, Any]]] = [] if logprobs is not None else None
        reported = 0  # records already handed out with a piece
        try:
            while max_tokens is None or generated < max_tokens:
                if ctx.n_past + self._reserve >= ctx.n_ctx and not self._shift_during_reply(messages):
                    break
                if records is None:
                    token = ctx.next()
                else:
                    token, lp = ctx.next_with_logprobs(logprobs or 0)
                generated += 1
                if token in self._stop_ids:
                    finish = "stop"
                    break
                if records is not None:
                    records.append(logprob_entry(self.tokenizer, lp))
                marker = self._marker_ids.get(token)
                piece = decoder.flush() + marker if marker is not None else decoder.feed(token)
                for item in self._shown(parser.feed(piece), show_thinking, records, reported):
                    reported = len(records or ())
                    yield item
                if parser.stopped:
                    finish = "stop"
                    break
            # An incomplete character cut off by max_tokens is dropped, never stored as U+FFFD.
            tail = decoder.flush().rstrip("\ufffd")
            for item in self._shown(parser.feed(tail) + parser.finish(), show_thinking, records, reported):
                reported = len(records or ())
                yield item
            reply = self._record(parser, finish, len(prompt), cached, generated, continued)
            reply.logprobs = records
            reply.stop_string = parser.stop_text if parser.stop_text in stops else None
            recorded = True
            self._sync_history()
            yield reply
        except (GeneratorExit, KeyboardInterrupt) as exc:
            # Ctrl-C, or the consumer closed the stream: the partial reply is the turn.
            if not recorded:
                parser.feed(decoder.flush().rstrip("\ufffd"))
                parser.finish()
                self._record(parser, "interrupted", len(prompt), cached, generated, continued)
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
    def _shown(pieces: list[tuple[str, str]], show_thinking: bool,
               records: Optional[list[dict[str, Any]]] = None, reported: int = 0) -> Iterator[str]:
        """The pieces to show (plain str content unless logprobs are kept); the first
        carries the logprob records after ``reported``."""
        for kind, text in pieces:
            if kind == CONTENT:
                if records is None:
                    yield text
                    continue
                item = TextPiece(text)
            elif show_thinking:
                item = ThinkingText(text)
            else:
                continue
            if records is not None:
                item.logprobs = records[reported:]
                reported = len(records)
            yield item

    def _record(self, parser: Union[ReplyParser, HarmonyParser], finish: str, n_prompt: int, cached: int,
                generated: int, continued: str = "") -> Reply:
        """Make the turn's Reply and add it to history (after ``continued``, the text of
        the assistant message it continues: the Reply holds only what it added)."""
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        names = [function_of(t)["name"] for t in self.tools] if self.tools else None
        parameters = {function_of(t)["name"]: function_of(t).get("parameters") or {} for t in self.tools or ()}
        for raw in parser.tool_texts:
            # unique beyond this session: a client sends each request's history as a new one
            parsed = parse_tool_call(raw, f"call_{uuid.uuid4().hex[:24]}", names, parameters)
            if isinstance(parsed, ToolCall):
                calls.append(parsed)
            else:
                errors.append(parsed)
        if calls and finish == "stop":
            finish = "tool_calls"
        reply = Reply("".join(parser.content), "".join(parser.thinking), calls, errors, finish,
                      n_prompt, cached, generated)
        message = reply.message
        message["content"] = continued + message["content"]
        if calls and reply.thinking and self.chat.renders_tool_call_reasoning:
            # the template keeps a tool-calling turn's thinking until the answer: so does history
            message["reasoning_content"] = reply.thinking
        self._messages.append(message)
        self._version += 1
        self.last_reply = reply
        return reply

    def _sync_history(self) -> None:
        """Roll the KV cache to the rendered history: this drops the thinking and
        anything after a stop string, and closes a turn cut short with the end of turn."""
        try:
            tokens = self._encode(self.chat.render(self._messages, False, self.tools, **self.template_kwargs))
            if self.trim_history and self.n_keep is not None:
                tokens = self._shifted(tokens, self._messages, 0)
            self._sync(tokens)
        except (ChatTemplateError, ContextOverflowError):
            pass  # the next turn's prefix match repairs the cache

    # ---- context shift (n_keep) --------------------------------------------------------
    def _kept(self, tokens: list[int], messages: list[Message]) -> int:
        """How many leading tokens a context shift keeps."""
        if self.n_keep is None:
            return 0
        if self.n_keep >= 0:
            return min(self.n_keep, len(tokens))
        # -1: the system prompt, i.e. what the conversation shares with one that has
        # only the system prompt and a different first user turn
        head = [m for m in messages[:1] if m["role"] == "system"] + [{"role": "user", "content": "\x00"}]
        try:
            probe = self._encode(self.chat.render(head, False, self.tools, **self.template_kwargs))
        except ChatTemplateError:
            return 0
        return _common_prefix(probe, tokens)

    def _shifted(self, tokens: list[int], messages: list[Message], room: int) -> list[int]:
        """``tokens`` with the dropped span cut out, dropping more (half of what
        follows the kept tokens, as llama.cpp does) if they still do not fit."""
        n_ctx = self.context.n_ctx
        keep = self._kept(tokens, messages)
        budget = n_ctx - room
        if keep >= budget:
            raise ContextOverflowError(
                f"n_keep: the {keep} kept tokens leave no room in the context of {n_ctx} tokens")
        discard = min(self._n_discarded, max(len(tokens) - keep - 1, 0))
        if len(tokens) - discard > budget:
            discard = max(len(tokens) - budget, (len(tokens) - keep) // 2)
        self._n_discarded = discard
        return tokens[:keep] + tokens[keep + discard:]

    def _shift_during_reply(self, messages: list[Message]) -> bool:
        """A full context in the middle of a reply: drop half of the tokens after the
        kept ones and go on (n_keep), or end the reply (False)."""
        if not self.trim_history or self.n_keep is None:
            return False
        ctx = self.context
        tokens = list(ctx.tokens)
        keep = self._kept(tokens, messages)
        discard = (len(tokens) - keep) // 2
        if discard < 1:
            return False
        # The tokens stay the same text, only fewer of them are in the cache: a grammar
        # following the reply must not roll back (truncate_to would uncommit them all).
        sampler = ctx.sampler
        grammar = getattr(sampler, "grammar", None)
        if grammar is not None:
            sampler.grammar = None
        try:
            ctx.truncate_to(keep)
            ctx.prefill(tokens[keep + discard:])
        finally:
            if grammar is not None:
                sampler.grammar = grammar
        self._n_discarded += discard
        return True

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
        def encode() -> list[int]:
            return list(self.tokenizer.encode(text, add_special=False, parse_special=True))

        # a long text takes long (infer's BPE: about 1 s a million characters): run apart
        ids = encode() if len(text) < LONG_TEXT else run_apart(self.context, encode)
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


def chat_of(model: Any) -> Chat:
    """The model's chat: its own template or, with a `BaseModelWarning` (once), a
    built-in one chosen from its vocabulary."""
    chat = model.chat if model.chat is not None else \
        Chat.from_metadata(getattr(model, "metadata", None) or {}, model.tokenizer)
    warn_if_builtin_template(model, chat)
    return chat


class BaseModelWarning(UserWarning):
    """The model has no chat template of its own; a built-in one is used."""


_warned: "weakref.WeakSet[Any]" = weakref.WeakSet()


def warn_if_builtin_template(model: Any, chat: Chat) -> None:
    """Warn, once per model, that a model without its own chat template looks like a
    base model (one trained to continue text, not to hold a conversation)."""
    if chat.builtin_template is None:
        return
    try:
        if model in _warned:
            return
        _warned.add(model)
    except TypeError:  # not weakly referenceable: warn every time
        pass
    warnings.warn(f"this model has no chat template of its own, so it looks like a base model that may "
                  f"not follow a conversation; using the built-in {chat.builtin_template!r} template "
                  f"instead", BaseModelWarning, stacklevel=4)


def _check_tools(tools: Optional[Sequence[Message]]) -> Optional[list[Message]]:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise TypeError(f"tools: expected a list of tool dicts, got {type(tools).__name__}")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise TypeError(f"tools[{i}]: expected a dict, got {type(tool).__name__}")
        function = function_of(tool)
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


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n

