"""The sandbox chat templates render in: Hugging Face's jinja2 settings and helpers
(``tojson``, ``raise_exception``, ``strftime_now``, the ``generation`` tag), with
no access to Python internals and no mutation of the values it is given."""
from __future__ import annotations

import datetime
import functools
import json
from typing import Any, Optional

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplateError", "SecurityError", "environment"]


class ChatTemplateError(ValueError):
    """The chat template cannot be compiled or rendered for these messages."""


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
def environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                   extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env

