"""Hostile chat templates (issue 15, item 7): each reproducer must fail with a
ChatTemplateError within a second or two and without reaching gigabytes, while
real templates render exactly as before (test_chat_templates.py)."""
import resource
import sys
import time

import jinja2
import pytest

from infer.chat import Chat, ChatTemplateError
from infer.chat.sandbox import LIMITS, TemplateLimitError

USER = [{"role": "user", "content": "hi"}]

HOSTILE = {
    "nested range loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string times two billion": "{{ 'x' * 2*10**9 }}",
    "lipsum of a million paragraphs": "{{ lipsum(n=10**6) }}",
    "tojson indent 10**8": "{{ messages | tojson(indent=10**8) }}",
    "percent format width": "{{ '%3000000000d' % 1 }}",
    "percent format star width": "{{ '%*d' % (3000000000, 1) }}",
    "str.format width": "{{ '{:>3000000000}'.format(1) }}",
    "format filter width": "{{ '%3000000000d' | format(1) }}",
    "doubling in a namespace (+)":
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "doubling in a namespace (~)":
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "list doubling in a namespace":
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "integer squaring in a namespace":
        "{% set ns = namespace(n=3) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "recursive macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "exponential macro":
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "recursive loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "concatenation chain":
        "{% set a = 'x' * 1000000 %}{% set b = a~a~a~a~a~a~a~a %}{% set c = b~b~b~b~b~b~b~b %}{{ c }}",
    "center filter": "{{ 'x' | center(10**9) }}",
    "str.center": "{{ 'x'.center(10**9) }}",
    "replace blow-up": "{% set s = 'x' * 1000000 %}{{ s | replace('x', s) }}",
    "join blow-up": "{% set s = 'x' * 1000000 %}{{ ([s] * 1000) | join }}",
    "str.join blow-up": "{% set s = 'x' * 1000000 %}{{ ''.join([s] * 1000) }}",
    "slice into 10**8 lists": "{{ [1] | slice(10**8) | list }}",
    "huge output": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "nested loops over a long string":
        "{% set s = 'x' * 1000000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "power tower": "{% set n = 10 %}{{ n ** n ** n ** n ** n }}",  # jinja2: left-associative
}


def _peak_rss_mib():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_template_fails_fast_and_small(source):
    peak_before = _peak_rss_mib()
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError):
        Chat(source).render_raw(USER)
    elapsed = time.monotonic() - t0
    # The time bound is LIMITS.seconds; the slack is for a loaded 2-core machine.
    assert elapsed < LIMITS.seconds + 3.0, f"{elapsed:.1f} s"
    assert _peak_rss_mib() - peak_before < 300


def test_step_and_time_limits_are_reported_as_limits():
    with pytest.raises(TemplateLimitError, match="steps|longer than"):
        Chat(HOSTILE["nested range loops"]).render_raw(USER)
    with pytest.raises(TemplateLimitError, match="recursed too deeply"):
        Chat(HOSTILE["recursive macro"]).render_raw(USER)


def test_memory_error_inside_a_render_is_converted():
    def allocate():
        raise MemoryError

    with pytest.raises(TemplateLimitError, match="out of memory"):
        Chat("{{ allocate() }}").render_raw(USER, allocate=allocate)


def test_deeply_nested_template_source_is_a_chat_template_error():
    source = "{% if true %}" * 3000 + "x" + "{% endif %}" * 3000
    with pytest.raises(ChatTemplateError):
        Chat(source).render_raw(USER)


# What the rewriting of loops and `~` must not change: the same text as jinja2.
BENIGN = [
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }}{{ m.role ~ ':' ~ m.content }}"
    "{% else %}none{% endfor %}",
    "{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for x in [[1, [2]], [3]] recursive %}[{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}]"
    "{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}"
    "{% endfor %}{{ ns.n }} {{ ns.s }} {{ '%05d|%-4s|' % (42, 'ab') }}{{ '{:>6}'.format('r') }}",
    "{{ ('ab' * 3) | center(10) }}|{{ 'a b c' | replace(' ', '--') }}|{{ [1, 2, 3] | join(', ') }}"
    "|{{ ', '.join(['x', 'y']) }}|{{ [1, 2, 3, 4] | batch(3) | list }}|{{ 2 ** 10 }}",
]


@pytest.mark.parametrize("source", BENIGN)
def test_bounded_render_matches_plain_jinja2(source):
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    want = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(source).render(
        messages=messages, add_generation_prompt=False)
    assert Chat(source).render_raw(messages, add_generation_prompt=False) == want
