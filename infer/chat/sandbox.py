"""The sandbox chat templates render in: Hugging Face's jinja2 settings and helpers
(``tojson``, ``raise_exception``, ``strftime_now``, the ``generation`` tag), with
no access to Python internals, no mutation of the values it is given, and a
bounded render.

A template is code from a downloaded file, so a render is bounded three ways
(`LIMITS`): in steps (every loop iteration, call, attribute lookup and operator
counts one), in time, and in size (no string, list or output may outgrow
``max_chars``/``max_items``; an operation that would is refused before it runs).
Loops and ``~`` concatenation, which jinja2 does not route through the sandbox,
are rewritten at compile time into calls that it does.
"""
from __future__ import annotations

import datetime
import functools
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, generate_lorem_ipsum
from jinja2.visitor import NodeTransformer

__all__ = ["LIMITS", "ChatTemplateError", "RenderLimits", "SecurityError", "TemplateLimitError",
           "environment", "render"]


class ChatTemplateError(ValueError):
    """The chat template cannot be compiled or rendered for these messages."""


class TemplateLimitError(ChatTemplateError):
    """The chat template ran past a render limit (steps, time or size)."""


@dataclass(frozen=True)
class RenderLimits:
    """What one render may cost.  A real template renders a long conversation in
    milliseconds and a few thousand steps; these leave orders of magnitude of room."""

    seconds: float = 2.0
    steps: int = 2_000_000
    #: the longest string (and the longest output) a render may make
    max_chars: int = 4_000_000
    #: the longest list, tuple or dict
    max_items: int = 1_000_000
    #: the largest integer, in bits
    max_int_bits: int = 4096


LIMITS = RenderLimits()


class _Budget:
    """The steps and time left to the render running in this thread."""

    __slots__ = ("steps", "deadline", "limits")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.steps = 0
        self.deadline = time.monotonic() + limits.seconds

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.steps:
            raise TemplateLimitError(f"the chat template ran more than {self.limits.steps} steps")
        if not self.steps & 255 and time.monotonic() > self.deadline:
            raise TemplateLimitError(f"the chat template ran longer than {self.limits.seconds} s")


_current = threading.local()


def _budget() -> _Budget:
    budget: Optional[_Budget] = getattr(_current, "budget", None)
    if budget is None:  # a render outside `render()` (environment() used directly)
        budget = _current.budget = _Budget(LIMITS)
    return budget


def _refuse(what: str) -> TemplateLimitError:
    return TemplateLimitError(f"the chat template would make {what}, past the render limits")


def _check_size(value: Any) -> Any:
    """``value``, if it is within the size limits."""
    # type(), not isinstance(): isinstance would ask a jinja2 Namespace or Undefined
    # for its __class__ through their Python-level __getattribute__ (slow).
    kind = type(value)
    if issubclass(kind, (str, bytes)):
        limits = _budget().limits
        if len(value) > limits.max_chars:
            raise _refuse(f"a string of {len(value)} characters")
    elif issubclass(kind, (list, tuple, dict)):
        limits = _budget().limits
        if len(value) > limits.max_items:
            raise _refuse(f"a {kind.__name__} of {len(value)} items")
    elif kind is int and value.bit_length() > _budget().limits.max_int_bits:
        raise _refuse(f"an integer of {value.bit_length()} bits")
    return value


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _sequence_cap(value: Any) -> int:
    limits = _budget().limits
    return limits.max_chars if isinstance(value, (str, bytes)) else limits.max_items


# the operators whose result can be much larger than their operands
_GROWING = frozenset({"*", "+", "**", "%"})

# A %-format or str.format field wider or more precise than this is refused
# before it pads a string to gigabytes ('%3000000000d' % 1); so is a '*' width.
_WIDE_FIELD = re.compile(r"\d{7,}|%[-#0 +]*\*|%[-#0 +]*\d*\.\*")


def _check_format(fmt: Any) -> None:
    if isinstance(fmt, str) and _WIDE_FIELD.search(fmt):
        raise _refuse("a formatted field of a million characters or more")


def _precheck_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be past the limits, before it runs."""
    if operator not in _GROWING:
        return
    limits = _budget().limits
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int):
                if _length(seq) * max(n, 0) > _sequence_cap(seq):
                    raise _refuse(f"a sequence of {_length(seq) * n} items")
        if isinstance(left, int) and isinstance(right, int) and \
                left.bit_length() + right.bit_length() > limits.max_int_bits:
            raise _refuse("an integer of more than {limits.max_int_bits} bits")
    elif operator == "+":
        if isinstance(left, (str, bytes, list, tuple)) and type(left) is type(right):
            if _length(left) + _length(right) > _sequence_cap(left):
                raise _refuse(f"a sequence of {_length(left) + _length(right)} items")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0 and \
                left.bit_length() * right > limits.max_int_bits:
            raise _refuse(f"an integer of about {left.bit_length() * right} bits")
    elif operator == "%":
        _check_format(left)


def _precheck_join(separator: Any, items: Any) -> None:
    if isinstance(items, (list, tuple)):
        total = sum(len(x) if isinstance(x, str) else 8 for x in items)
        total += len(separator) * len(items) if isinstance(separator, str) else 0
        if total > _budget().limits.max_chars:
            raise _refuse(f"a string of about {total} characters")


def _precheck_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        n = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        if len(text) + n * (len(new) - len(old)) > _budget().limits.max_chars:
            raise _refuse("a replaced string of more than the character limit")


def _precheck_args(args: Iterable[Any]) -> None:
    """Widths, counts and repeats given to filters and str methods."""
    limit = _budget().limits.max_chars
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > limit:
            raise _refuse(f"a width or count of {a}")


# Filters whose numeric arguments set the size of what they make.
_SIZED_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate", "batch", "slice"})


def _bounded_filter(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _budget().step()
        # pass_context/pass_environment filters get those first: skip to the value
        values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment,
                                                       jinja2.nodes.EvalContext))]
        if name in _SIZED_FILTERS:
            _precheck_args(list(values[1:]) + list(kwargs.values()))
            if name == "slice" and len(values) > 1 and isinstance(values[1], int) and \
                    values[1] > _budget().limits.max_items:
                raise _refuse(f"{values[1]} slices")
        elif name == "join" and values:
            _precheck_join(values[1] if len(values) > 1 else kwargs.get("d", ""), list(values[0])
                           if isinstance(values[0], (list, tuple)) else values[0])
        elif name == "replace" and len(values) >= 3:
            _precheck_replace(*values[:4])
        elif name == "format" and values:
            _check_format(values[0])
        return _check_size(function(*args, **kwargs))

    return bounded


class _BoundedNamespace(Namespace):
    """``namespace()``, whose attributes obey the size limits (string doubling in a
    namespace is how a loop accumulates without bound)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (Namespace's own signature)
        for value in list(args[1:]) + list(kwargs.values()):
            _check_size(value)
        Namespace.__init__(*args, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        Namespace.__setitem__(self, name, _check_size(value))


def _bounded_iter(iterable: Any) -> Iterator[Any]:
    """Every loop iteration costs a step (jinja2 runs ``for`` outside the sandbox)."""
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


def _bounded_concat(pieces: list[Any]) -> str:
    """The ``~`` operator, size-checked before it joins."""
    strings = [str(p) for p in pieces]
    total = sum(len(s) for s in strings)
    if total > _budget().limits.max_chars:
        raise _refuse(f"a string of {total} characters")
    return "".join(strings)


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    if not all(isinstance(v, int) for v in (n, min, max)) or n > 100 or max > 1000:
        raise _refuse(f"lorem ipsum of {n} paragraphs")
    return str(generate_lorem_ipsum(n=n, html=html, min=min, max=max))


_ITER, _CONCAT = "__infer_bounded_iter", "__infer_bounded_concat"


class _RouteThroughSandbox(NodeTransformer):
    """Loops and ``~`` become calls, which the sandbox's `call` counts and checks."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.Name(_ITER, "load"), [node.iter], [], None, None,
                               lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(nodes.Name(_CONCAT, "load"), [nodes.List(node.nodes, lineno=node.lineno)],
                          [], None, None, lineno=node.lineno)


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

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(
            f"the chat template tried to access {type(obj).__name__}.{attribute}, "
            "which the sandbox does not allow")

    def _parse(self, source: str, name: Optional[str], filename: Optional[str]) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        routed: nodes.Template = _RouteThroughSandbox().visit(tree)
        return routed

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _budget().step()
        target = getattr(__obj, "__wrapped__", __obj)  # str.format comes wrapped by the sandbox
        owner = getattr(target, "__self__", None)
        if isinstance(owner, (str, list, tuple, dict)):
            method = getattr(target, "__name__", "")
            _precheck_args(list(args) + list(kwargs.values()))
            if method in ("format", "format_map"):
                _check_format(owner)
            elif method == "join" and args:
                _precheck_join(owner, list(args[0]) if isinstance(args[0], (list, tuple)) else args[0])
            elif method == "replace" and len(args) >= 2:
                _precheck_replace(owner, *args[:3])
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().step()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _budget().step()
        _precheck_binop(operator, left, right)
        return _check_size(super().call_binop(context, operator, left, right))


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; templates expect plain JSON.
    if isinstance(indent, int) and indent > 100 or isinstance(indent, str) and len(indent) > 100:
        raise _refuse(f"JSON indented by {indent if isinstance(indent, int) else len(indent)}")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@functools.cache
def environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                   extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    for name, function in list(env.filters.items()):
        env.filters[name] = _bounded_filter(name, function)
    env.globals.update({"raise_exception": _raise_exception, "strftime_now": _strftime_now,
                        "namespace": _BoundedNamespace, "lipsum": _lipsum,
                        _ITER: _bounded_iter, _CONCAT: _bounded_concat})
    return env


def render(template: jinja2.Template, variables: Mapping[str, Any],
           limits: RenderLimits = LIMITS) -> str:
    """Render ``template`` within ``limits``; any failure is a `ChatTemplateError`."""
    previous = getattr(_current, "budget", None)
    _current.budget = budget = _Budget(limits)
    try:
        pieces = []
        size = 0
        for piece in template.generate(**variables):
            size += len(piece)
            if size > limits.max_chars:
                raise _refuse(f"an output of more than {limits.max_chars} characters")
            pieces.append(piece)
        return "".join(pieces)
    except ChatTemplateError:
        raise
    except SecurityError as exc:
        raise ChatTemplateError(f"the chat template was refused by the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed: {exc}") from None
    except MemoryError:
        raise TemplateLimitError("the chat template ran out of memory") from None
    except RecursionError:
        raise TemplateLimitError("the chat template recursed too deeply") from None
    except (TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
        raise ChatTemplateError(
            f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from None
    finally:
        _current.budget = previous
        del budget

