"""The reply state machine: splits generated text into answer, thinking and tool
calls as it streams, withholding any tail that could still become a stop string
or a marker."""
from __future__ import annotations

import ast
import json
import re
from typing import Any, Optional, Sequence

from ..generate import _held_back

CONTENT, THINK, TOOL, JSON, BARE, BARE_END = "content", "think", "tool", "json", "bare", "bare_end"
#: where a call opened by "<function=NAME>" alone ends
BARE_CALL_END = "</function>"


# Llama 3.1 may open a tool call with this token (then JSON, or a built-in tool's call).
PYTHON_TAG = "<|python_tag|>"
# Phi-4-mini writes its calls as functools[{"name": ..., "arguments": ...}, ...].
FUNCTOOLS = "functools["
# Mistral Nemo (and Ministral) write [TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}, ...].
MISTRAL_TOOL_CALLS = "[TOOL_CALLS]"
# Granite 3.x writes <|tool_call|>[{"name": ..., "arguments": ...}, ...] (its system prompt says so).
GRANITE_TOOL_CALL = "<|tool_call|>"
# DeepSeek-R1 writes <｜tool▁calls▁begin｜>, then per call <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
# "\n```json\n" ARGUMENTS "\n```" <｜tool▁call▁end｜>, then <｜tool▁calls▁end｜> (its template's own layout).
DEEPSEEK_TOOL_CALLS = "<｜tool▁calls▁begin｜>"
_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>\s*(?:function)?\s*<｜tool▁sep｜>\s*([^\n]*?)\s*\n"
                            r"```(?:json)?\s*\n?(.*?)\s*```\s*(?:<｜tool▁call▁end｜>|$)", re.S)
# LFM2 / LFM2.5 write <|tool_call_start|>[name(arg=value, ...), ...]<|tool_call_end|>: a Python-style
# list of calls whose values may also be JSON's true / false / null (llama.cpp common/parsers/lfm2.cpp).
LFM2_TOOL_MARKERS = ("<|tool_call_start|>", "<|tool_call_end|>")
#: Nemotron Nano 2's: a JSON list of calls between them (llama.cpp's "Nemotron V2" chat format)
NEMOTRON_TOOL_MARKERS = ("<TOOLCALL>", "</TOOLCALL>")
#: the texts that open a reply made of tool calls, and what each leaves of itself before the JSON
CALL_PREFIXES = ((PYTHON_TAG, ""), (MISTRAL_TOOL_CALLS, ""), (GRANITE_TOOL_CALL, ""), (FUNCTOOLS, "["),
                 (DEEPSEEK_TOOL_CALLS, DEEPSEEK_TOOL_CALLS))
# The prefixes that are special tokens may also follow some text ("Let me check.[TOOL_CALLS][...]",
# which llama.cpp's Mistral and Llama 3 parsers read as content, then calls).
MIDWAY_PREFIXES = (PYTHON_TAG, MISTRAL_TOOL_CALLS, GRANITE_TOOL_CALL, DEEPSEEK_TOOL_CALLS)


def _deepseek_calls(text: str) -> list[str]:
    """DeepSeek-R1's calls as ``{"name": ..., "arguments": "<its text>"}`` JSON (the arguments
    left as written, for `parse_tool_call` to decode or report); the whole text when none parses."""
    calls = [json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
             for name, args in _DEEPSEEK_CALL.findall(text)]
    return calls or [text]


_PY_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _python_value(node: ast.AST) -> Any:
    """A call argument's value: Python or JSON literals, lists, dicts (ValueError else)."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _PY_LITERALS:
        return _PY_LITERALS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _python_value(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_python_value(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {str(_python_value(k)): _python_value(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
    raise ValueError(f"not a literal: {ast.dump(node)[:60]}")


def python_tool_calls(text: str) -> list[str]:
    """LFM2's ``[name(arg=value, ...), ...]`` as ``{"name": ..., "arguments": {...}}`` JSON, one
    per call; the whole text (reported as a malformed call) when it is not such a list."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        calls = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
        out = []
        for call in calls:
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
                raise ValueError("not a call by keyword arguments")
            arguments = {kw.arg: _python_value(kw.value) for kw in call.keywords if kw.arg is not None}
            if len(arguments) != len(call.keywords):
                raise ValueError("**arguments")
            out.append(json.dumps({"name": call.func.id, "arguments": arguments}, ensure_ascii=False))
        return out or [text]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [text]


def python_call_text(name: str, arguments: dict[str, Any]) -> str:
    """One call as LFM2 writes it: ``name(arg=value, ...)``, values in JSON (which it reads)."""
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{name}({args})"


# Ministral 3 / Magistral (and Mistral Small 3.2, with [CALL_ID]) write each call as
# [TOOL_CALLS]NAME[ARGS]{...}: llama.cpp's ministral_3 parser.
MISTRAL_ARGS = "[ARGS]"
#: the marker texts the parsers read in a reply that some vocabularies make control
#: tokens: a reply spells them whatever their type (llama-server's preserved tokens), while
#: it shows other control tokens as nothing, as llama.cpp renders a reply
SPELLED_MARKERS = (PYTHON_TAG, MISTRAL_TOOL_CALLS, MISTRAL_ARGS, GRANITE_TOOL_CALL, DEEPSEEK_TOOL_CALLS,
                   "<\uff5ctool\u2581calls\u2581end\uff5c>", "<\uff5ctool\u2581call\u2581begin\uff5c>",
                   "<\uff5ctool\u2581call\u2581end\uff5c>", "<\uff5ctool\u2581sep\uff5c>") \
    + LFM2_TOOL_MARKERS + NEMOTRON_TOOL_MARKERS
_MISTRAL_NAMED_CALL = re.compile(r"\s*([^\s\[\]{}]+)\s*(?:\[CALL_ID\]\s*([^\[]*?)\s*)?\[ARGS\](.*)", re.S)


def _mistral_named_calls(text: str) -> Optional[list[str]]:
    """``NAME[ARGS]{...}[TOOL_CALLS]NAME[ARGS]{...}`` (the text after the first
    [TOOL_CALLS]) as ``{"name": ..., "arguments": "<its text>"}`` JSON; None when it is
    not in that form."""
    calls = []
    for part in text.split(MISTRAL_TOOL_CALLS):
        match = _MISTRAL_NAMED_CALL.fullmatch(part)
        if match is None:
            return None
        calls.append(json.dumps({"name": match.group(1), "arguments": match.group(3).strip()}, ensure_ascii=False))
    return calls


def json_tool_calls(reply: str) -> Optional[list[str]]:
    """The tool calls of a reply that is only JSON, as Llama 3.x writes them
    (``{"name": ..., "parameters": ...}``, possibly after ``<|python_tag|>``, or
    a list of such objects), Phi-4-mini does (``functools[...]``), Mistral does
    (``[TOOL_CALLS][...]``), Granite does (``<|tool_call|>[...]``) or DeepSeek-R1 does
    (``<｜tool▁calls▁begin｜>...``); None when the reply is not a call."""
    text = reply.strip()
    if text.startswith(DEEPSEEK_TOOL_CALLS):
        return _deepseek_calls(text)
    if text.startswith(MISTRAL_TOOL_CALLS) and MISTRAL_ARGS in text:
        named = _mistral_named_calls(text[len(MISTRAL_TOOL_CALLS):])
        if named is not None:
            return named
    marked = False
    for prefix, kept in CALL_PREFIXES:
        if text.startswith(prefix):
            text, marked = (kept + text[len(prefix):]).strip(), True
            break
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        # a malformed call is still a call, to be reported as a ToolCallError
        return [text] if marked or (text.startswith("{") and '"name"' in text) else None
    if isinstance(obj, dict) and "name" in obj:
        return [text]
    if isinstance(obj, list) and obj and all(isinstance(o, dict) and "name" in o for o in obj):
        return [json.dumps(o, ensure_ascii=False) for o in obj]
    return None


class ReplyParser:
    """Splits generated text into answer, thinking and tool calls as it streams.

    `feed` returns the pieces that are certain: a tail that could still grow into
    a stop string or a marker is withheld until it can't.
    """

    def __init__(self, stops: Sequence[str] = (), think: Optional[tuple[str, str]] = None,
                 tool: Optional[tuple[str, str]] = None, json_tools: bool = False,
                 in_thinking: bool = False, tool_ends_thinking: bool = False,
                 bare_calls: Sequence[str] = ()) -> None:
        self.stops = [s for s in stops if s]
        # Qwen3-Coder sometimes leaves out <tool_call>: "<function=NAME>" of a tool it was
        # given opens a call too, which ends at </function> (llama.cpp's rule)
        self.bare_calls = [b for b in bare_calls if b] if tool else []
        # Qwen3.5 may open a call without closing its thinking (llama.cpp ends it there too)
        self.tool_ends_thinking = bool(tool_ends_thinking and tool and think)
        self.think = think
        self.tool = tool
        # the states that need them exist only when their markers do
        self._think_close = think[1] if think else ""
        self._tool_close = tool[1] if tool else ""
        self.json_tools = json_tools
        self.state = THINK if (in_thinking and think) else CONTENT
        self.buf = ""
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.tool_texts: list[str] = []
        self.stopped = False
        #: the stop text that ended the reply (one of ``stops``), else None
        self.stop_text: Optional[str] = None
        self._drop_space = self.state == THINK  # whitespace after a block is template padding
        self._started = False

    def _content_markers(self) -> list[str]:
        markers = list(self.stops)
        if self.think:
            markers.append(self.think[0])
        if self.tool:
            markers.append(self.tool[0])
            markers.extend(self.bare_calls)
        elif self.json_tools:
            markers.extend(MIDWAY_PREFIXES)
        return markers

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.stopped:
            return out
        self.buf += text
        while self.buf:
            if self.state == CONTENT:
                if self._drop_space:
                    self.buf = self.buf.lstrip()
                    if not self.buf:
                        break
                    self._drop_space = False
                if self.json_tools and not self._started and not self.tool:
                    head = self.buf.lstrip()
                    if not head:
                        break
                    prefixes = tuple(prefix for prefix, _ in CALL_PREFIXES)
                    if head.startswith(("{", "[") + prefixes):
                        self.state = JSON
                        continue
                    if any(prefix.startswith(head) for prefix in prefixes):
                        break  # could still become one of them
                hit = _earliest(self.buf, self._content_markers())
                if hit is None:
                    keep = _held_back(self.buf, self._content_markers())
                    self._emit(out, CONTENT, self.buf[:len(self.buf) - keep])
                    self.buf = self.buf[len(self.buf) - keep:]
                    break
                at, marker = hit
                self._emit(out, CONTENT, self.buf[:at])
                self.buf = self.buf[at + len(marker):]
                if self.think and marker == self.think[0]:
                    self.state = THINK
                elif self.tool and marker == self.tool[0]:
                    self.state = TOOL
                elif marker in self.bare_calls:
                    self.buf = marker + self.buf
                    self.state = BARE
                elif self.json_tools and not self.tool and marker in MIDWAY_PREFIXES:
                    self.buf = marker + self.buf  # the calls, read whole at the end
                    self.state = JSON
                else:
                    self.stopped, self.stop_text = True, marker
                    self.buf = ""
                    break
            elif self.state == THINK:
                close = self._think_close
                at = self.buf.find(close)
                if self.tool_ends_thinking and self.tool:
                    opened = self.buf.find(self.tool[0])
                    if opened >= 0 and (at < 0 or opened < at):
                        self._emit_thought(out, self.buf[:opened].rstrip("\n"))
                        self.buf = self.buf[opened:]
                        self.state = CONTENT
                        continue
                if at < 0:
                    ends = [close] + ([self.tool[0]] if self.tool_ends_thinking and self.tool else [])
                    sure = len(self.buf) - _held_back(self.buf, ends)
                    # newlines may be the block's last ("...\n</think>"): held until more thought follows
                    sure = len(self.buf[:sure].rstrip("\n"))
                    self._emit_thought(out, self.buf[:sure])
                    self.buf = self.buf[sure:]
                    break
                self._emit_thought(out, self.buf[:at].rstrip("\n"))
                self.buf = self.buf[at + len(close):]
                self.state, self._drop_space = CONTENT, True
            elif self.state == BARE:
                at = self.buf.find(BARE_CALL_END)
                if at < 0:
                    break
                self._add_tool_text(self.buf[:at + len(BARE_CALL_END)].strip())
                self.buf = self.buf[at + len(BARE_CALL_END):]
                self.state = BARE_END
            elif self.state == BARE_END:  # a </tool_call> may close the call still
                head = self.buf.lstrip()
                if self._tool_close.startswith(head):
                    break
                if head.startswith(self._tool_close):
                    self.buf = head[len(self._tool_close):]
                self.state, self._drop_space = CONTENT, True
            elif self.state == TOOL:
                at = self.buf.find(self._tool_close)
                if at < 0:
                    break
                self._add_tool_text(self.buf[:at].strip())
                self.buf = self.buf[at + len(self._tool_close):]
                self.state, self._drop_space = CONTENT, True
            else:  # JSON: a whole reply that may be a tool call; decided at the end
                if not _could_be_calls(self.buf):
                    self.state, self._started = CONTENT, True  # streamed as the text it is
                    continue
                break
        return out

    def finish(self) -> list[tuple[str, str]]:
        """Flush what was withheld; an unclosed tool call is parsed as it stands."""
        out: list[tuple[str, str]] = []
        buf, self.buf = self.buf, ""
        if self.stopped or not buf:
            return out
        if self.state == CONTENT:
            self._emit(out, CONTENT, buf.lstrip() if self._drop_space else buf)
        elif self.state == THINK:
            self._emit_thought(out, buf.rstrip("\n"))
        elif self.state in (TOOL, BARE):
            self._add_tool_text(buf.strip())
        elif self.state == BARE_END and not self._tool_close.startswith(buf.strip()):
            self._emit(out, CONTENT, buf.lstrip())
        else:
            calls = json_tool_calls(buf)
            if calls is None:
                self._emit(out, CONTENT, buf)
            else:
                self.tool_texts.extend(calls)
        return out

    def _add_tool_text(self, text: str) -> None:
        if self.tool == LFM2_TOOL_MARKERS:   # a Python-style list of calls
            self.tool_texts.extend(python_tool_calls(text))
        elif self.tool == NEMOTRON_TOOL_MARKERS:   # a JSON list (a malformed one: one bad call)
            self.tool_texts.extend(json_tool_calls(text) or [text])
        else:
            self.tool_texts.append(text)

    def _emit_thought(self, out: list[tuple[str, str]], text: str) -> None:
        # Templates lay a thinking block out as "<think>\n...\n</think>": the newlines at
        # its ends are the block's, not the thought's (the caller strips the last ones).
        self._emit(out, THINK, text if self.thinking else text.lstrip("\n"))

    def _emit(self, out: list[tuple[str, str]], kind: str, text: str) -> None:
        if not text:
            return
        if kind == CONTENT:
            self._started = True
            self.content.append(text)
        else:
            self.thinking.append(text)
        out.append((kind, text))


def _could_be_calls(text: str) -> bool:
    """False once ``text`` is JSON that cannot be calls (an object's first key, a list's
    first item, must open as a call's does): "[1, 2] are..." streams without waiting."""
    text = text.lstrip()
    prefixes = tuple(prefix for prefix, _ in CALL_PREFIXES)
    if text.startswith(prefixes) or any(prefix.startswith(text) for prefix in prefixes):
        return True
    rest = text[1:].lstrip()
    return not rest or rest[0] == ('"' if text.startswith("{") else "{")


def _earliest(text: str, markers: Sequence[str]) -> Optional[tuple[int, str]]:
    best: Optional[tuple[int, str]] = None
    for m in markers:
        at = text.find(m)
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(m) > len(best[1]))):
            best = (at, m)
    return best



# ---- gpt-oss's harmony format ------------------------------------------------------------
# A reply is a run of messages, each "<|start|>assistant" (the first one's is the generation
# prompt), a header naming its channel and maybe a recipient, "<|message|>", the body, and
# "<|end|>" (more follows), "<|return|>" (the answer ended) or "<|call|>" (a tool call ended):
#   <|channel|>analysis<|message|>...<|end|>                  reasoning
#   <|channel|>final<|message|>...<|return|>                  the answer
#   <|channel|>commentary<|message|>...<|end|>                a preamble: answer text too
#   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
# and the recipient may stand in the role header instead ("<|start|>assistant to=functions.NAME
# <|channel|>commentary json<|message|>", as the template renders calls back).
HARMONY_MESSAGE, HARMONY_END = "<|message|>", "<|end|>"
HARMONY_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_HARMONY_HEADER_STARTS = ("<|channel|>", "<|start|>", " to=", "to=")
_HARMONY_HEADER = re.compile(r"(?:<\|start\|>assistant)?\s*(?:to=(\S+?)\s*)?<\|channel\|>(\w+)"
                             r"(?:\s+to=([^\s<]+))?\s*(?:<\|constrain\|>)?\s*[\w-]*\s*$")
#: longer than any header a model writes: past this, the text is not a header
_HARMONY_HEADER_MAX = 200
HEADER, BODY, RAW = "header", "body", "raw"


class HarmonyParser:
    """`ReplyParser`'s counterpart for gpt-oss: reads the channels of a harmony reply as
    they stream (analysis: thinking; final and commentary: answer; a message to
    ``functions.NAME``: a tool call, kept as ``{"name": ..., "arguments": "<body>"}``).
    Text that does not follow the format is answer text as it stands, never an error."""

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self.stops = [s for s in stops if s]
        self.state = HEADER
        self.kind = CONTENT  # the current body's: CONTENT, THINK or TOOL
        self.recipient = ""
        self.buf = ""
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.tool_texts: list[str] = []
        self.stopped = False
        #: the stop text that ended the reply (one of ``stops``), else None
        self.stop_text: Optional[str] = None

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.stopped:
            return out
        self.buf += text
        while self.buf and not self.stopped:
            if self.state == RAW:
                self._body(out, raw=True)
                break
            if self.state == HEADER:
                at = self.buf.find(HARMONY_MESSAGE)
                if at < 0:
                    head = self.buf.lstrip("\n")
                    if len(head) > _HARMONY_HEADER_MAX or not (
                            head.startswith(_HARMONY_HEADER_STARTS) or
                            any(s.startswith(head) for s in _HARMONY_HEADER_STARTS)):
                        self.state = RAW  # not the format: the text is the answer
                        continue
                    break
                match = _HARMONY_HEADER.match(self.buf[:at].strip())
                if match is None:
                    self.state = RAW
                    continue
                recipient = match.group(1) or match.group(3) or ""
                channel = match.group(2)
                self.buf = self.buf[at + len(HARMONY_MESSAGE):]
                self.state, self.recipient = BODY, recipient
                self.kind = TOOL if recipient else THINK if channel == "analysis" else CONTENT
                continue
            if not self._body(out):
                break
        return out

    def _body(self, out: list[tuple[str, str]], raw: bool = False) -> bool:
        """Move what is certain of the current body out; True when it ended."""
        ends = list(self.stops) if raw else list(HARMONY_ENDS) + (self.stops if self.kind == CONTENT else [])
        hit = _earliest(self.buf, ends)
        if hit is None:
            if self.kind == TOOL and not raw:
                return False  # read whole at its end
            sure = len(self.buf) - _held_back(self.buf, ends)
            self._emit(out, CONTENT if raw else self.kind, self.buf[:sure])
            self.buf = self.buf[sure:]
            return False
        at, marker = hit
        body, self.buf = self.buf[:at], self.buf[at + len(marker):]
        if not raw and self.kind == TOOL:
            self._add_call(body)
        else:
            self._emit(out, CONTENT if raw else self.kind, body)
        if raw or marker != HARMONY_END:
            self.stopped, self.buf = True, ""
            self.stop_text = marker if marker in self.stops else None
        else:
            self.state = HEADER
        return True

    def finish(self) -> list[tuple[str, str]]:
        """Flush what was withheld: a body cut off ends there (a call as it stands, to be
        reported if it is incomplete); a header cut off is dropped."""
        out: list[tuple[str, str]] = []
        buf, self.buf = self.buf, ""
        if self.stopped or not buf:
            return out
        if self.state == RAW:
            self._emit(out, CONTENT, buf)
        elif self.state == BODY:
            if self.kind == TOOL:
                self._add_call(buf)
            else:
                self._emit(out, self.kind, buf)
        return out

    def _add_call(self, body: str) -> None:
        name = self.recipient[len("functions."):] if self.recipient.startswith("functions.") else self.recipient
        self.tool_texts.append(json.dumps({"name": name, "arguments": body.strip()}, ensure_ascii=False))

    def _emit(self, out: list[tuple[str, str]], kind: str, text: str) -> None:
        if not text:
            return
        (self.content if kind == CONTENT else self.thinking).append(text)
        out.append((kind, text))
