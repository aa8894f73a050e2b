"""The package keeps to what its wheels claim: CPython 3.9-3.13.

The claims live in three places of pyproject.toml (requires-python, the version
classifiers, the cibuildwheel build list) and must agree.  CI runs one Python, so
the code is also checked statically for anything newer than 3.9: `vermin` for
syntax and standard-library use, and an AST scan for `X | Y` unions in
annotations that Python evaluates at run time (vermin only reports those with
its `union-types` feature, which also flags every `os.O_RDWR | os.O_CREAT`).
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import infer

ROOT = Path(__file__).resolve().parent.parent
OLDEST = "3.9"
# Everything that runs on the user's or CI's Python: the package, its tests, the
# scripts and benchmarks, and the build script.
SOURCES = ["infer", "tests", "bench", "scripts", "docs", "setup.py"]


def python_files() -> list[Path]:
    found = []
    for name in SOURCES:
        path = ROOT / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
    return found


def pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (3.11+, imported only there)
    else:
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml before Python 3.11 needs tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def test_requires_python_classifiers_and_wheel_builds_agree() -> None:
    project = pyproject()
    classifiers = sorted((m.group(1) for c in project["project"]["classifiers"]
                          if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))),
                         key=version_key)
    wheels = sorted((f"3.{m}" for m in re.findall(r"\bcp3(\d+)-\*", project["tool"]["cibuildwheel"]["build"])),
                    key=version_key)
    assert classifiers == wheels, "the version classifiers must list exactly the Pythons wheels are built for"
    assert classifiers[0] == OLDEST
    assert project["project"]["requires-python"] == f">={OLDEST}"
    # consecutive minor versions: no gap in what is claimed
    minors = [version_key(v)[1] for v in classifiers]
    assert minors == list(range(minors[0], minors[-1] + 1))


def test_version_is_the_installed_metadata() -> None:
    try:
        installed = importlib.metadata.version("infer-llm")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("infer is not installed here (imported from the source tree)")
    assert installed == infer.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", infer.__version__)


def runtime_union_annotations(path: Path, root: Path = ROOT) -> list[str]:
    """`X | Y` in annotations Python 3.9 evaluates: function signatures, and
    module- and class-level variables, in a module without
    `from __future__ import annotations` (local variable annotations and quoted
    ones are never evaluated)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
           and any(alias.name == "annotations" for alias in node.names) for node in tree.body):
        return []
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            annotations += [arg.annotation for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                            if arg is not None and arg.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        if isinstance(node, (ast.Module, ast.ClassDef)):
            annotations += [stmt.annotation for stmt in node.body if isinstance(stmt, ast.AnnAssign)]
    return [f"{path.relative_to(root)}:{sub.lineno}: {ast.unparse(annotation)}"
            for annotation in annotations for sub in ast.walk(annotation)
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.BitOr)]


def test_no_union_syntax_in_runtime_annotations() -> None:
    found = [hit for path in python_files() for hit in runtime_union_annotations(path)]
    assert not found, "X | Y in an annotation is a TypeError on Python 3.9:\n" + "\n".join(found)


def test_union_scan_catches_and_spares(tmp_path: Path) -> None:
    """The scan above on code with and without the problem."""
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import Optional\n"
                   "class C:\n    x: int | None = None\n"
                   "def f(a: 'int | None', b: int | str = 1) -> Optional[int]:\n"
                   "    local: int | None = None\n    return local\n")
    lazy = tmp_path / "lazy.py"
    lazy.write_text("from __future__ import annotations\ndef f(b: int | str) -> None: ...\n")
    flags = tmp_path / "flags.py"
    flags.write_text("import os\nMODE: int = os.O_RDWR | os.O_CREAT\n")
    assert runtime_union_annotations(bad, tmp_path) == ["bad.py:3: int | None", "bad.py:4: int | str"]
    assert runtime_union_annotations(lazy, tmp_path) == [] and runtime_union_annotations(flags, tmp_path) == []


def run_vermin(*paths: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("vermin")
    # --eval-annotations: annotations are code on 3.9; typing_extensions backports.
    options = [f"-t={OLDEST}-", "--violations", "--no-tips", "--eval-annotations", "--backport", "typing_extensions"]
    return subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", *options, *paths],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_vermin_finds_nothing_newer_than_the_oldest_python() -> None:
    proc = run_vermin(*(name for name in SOURCES if (ROOT / name).exists()))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vermin_flags_newer_code(tmp_path: Path) -> None:
    new = tmp_path / "new.py"
    new.write_text("for a, b in zip([1], [2], strict=True):\n    pass\n")
    proc = run_vermin(str(new))
    assert proc.returncode != 0 and "zip(strict)" in proc.stdout, proc.stdout + proc.stderr
