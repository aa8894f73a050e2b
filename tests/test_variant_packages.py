"""Variants from other packages: the ``infer.variants`` entry-point group.

The example package examples/infer-bigram is pip-installed (no index, no build
isolation: nothing is downloaded) into a temporary target directory, then run
as a user would, through ``infer generate`` and ``infer bench`` in a subprocess
whose sys.path holds that directory.  The expected text is the greedy chain over
the bigram counts of the training text, computed here.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from infer.runtime import ENTRY_POINT_GROUP, UnsupportedModelError, variant_for
from under_test import IMPORT_ROOT, pythonpath

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "infer-bigram")
TEXT = "the cat sat on the mat. the dog sat on the log. " * 5


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A directory the example package is installed into (its own copy of the
    source: pip builds in the source tree, which must stay clean)."""
    tmp = tmp_path_factory.mktemp("bigram")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src)
    target = tmp / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--no-index", "--quiet", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert any(p.name.startswith("infer_bigram-") and p.name.endswith(".dist-info") for p in target.iterdir())
    return str(target)


def run(site, *args, code=None):
    env = dict(os.environ, PYTHONPATH=pythonpath(site))
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "infer", *args]
    return subprocess.run(cmd, cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def bigram_file(site, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "bigram.gguf")
    r = run(site, code=f"import infer_bigram; infer_bigram.write_bigram_gguf({path!r}, {TEXT!r})")
    assert r.returncode == 0, r.stderr
    return path


def greedy_after(prompt: str, n: int) -> str:
    data = list(TEXT.encode()) + [256]
    counts = np.ones((257, 257))
    np.add.at(counts, (data[:-1], data[1:]), 1.0)
    out, t = [], prompt.encode()[-1]
    for _ in range(n):
        t = int(np.argmax(counts[t]))
        if t == 256:
            break
        out.append(t)
    return bytes(out).decode()


def test_installed_variant_runs_from_infer_generate(site, bigram_file):
    r = run(site, "generate", "-m", bigram_file, "--temp", "0", "-n", "20", "the c")
    assert r.returncode == 0, r.stderr
    assert r.stdout == greedy_after("the c", 20) + "\n"  # piped output ends its line
    assert "finish: length" in r.stderr


def test_installed_variant_runs_from_infer_bench(site, bigram_file):
    r = run(site, "bench", "-m", bigram_file, "-p", "8", "-g", "4", "-r", "1", "--no-llama-cpp")
    assert r.returncode == 0, r.stderr
    assert "bigram" in r.stdout or "bigram" in r.stderr


def test_entry_point_is_listed_and_loaded_by_name(site):
    r = run(site, code=textwrap.dedent(f"""
        import infer
        from infer.runtime import variant_for
        assert "bigram" in infer.known_architectures(), infer.known_architectures()
        import infer_bigram
        assert variant_for("bigram") is infer_bigram.load_bigram
        print("{ENTRY_POINT_GROUP}", "ok")
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{ENTRY_POINT_GROUP} ok"


def test_without_the_package_the_architecture_is_refused(monkeypatch):
    # Other tests register the docs' bigram factory in this process (test_generate).
    from infer import runtime

    monkeypatch.delitem(runtime._VARIANTS, "bigram", raising=False)
    with pytest.raises(UnsupportedModelError, match="'bigram' is not supported") as e:
        variant_for("bigram")
    assert e.value.names == ["bigram"]


def test_a_broken_entry_point_is_reported_with_its_name(tmp_path):
    """An installed package whose entry point does not import: a typed error
    naming the entry point, not an ImportError from deep inside importlib."""
    dist = tmp_path / "broken_variant-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-variant\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbrokenarch = no_such_module:factory\n")
    r = run(str(tmp_path), code=textwrap.dedent("""
        from infer.runtime import UnsupportedModelError, variant_for
        try:
            variant_for("brokenarch")
        except UnsupportedModelError as e:
            print(e.names, e)
    """))
    assert r.returncode == 0, r.stderr
    assert "['brokenarch']" in r.stdout and "no_such_module:factory" in r.stdout
    assert "ModuleNotFoundError" in r.stdout


def test_built_in_variants_are_known_before_any_load_and_come_first(tmp_path):
    """In a fresh process, before infer.load has imported infer.variants: the built-in
    architectures are listed, and an installed entry point of the same name (here a
    broken one) does not take the place of a built-in variant."""
    dist = tmp_path / "shadow_variant-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow-variant\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nllama = no_such_module:factory\n")
    r = run(str(tmp_path), code=textwrap.dedent("""
        import infer
        from infer.runtime import variant_for
        print(sorted(infer.known_architectures()))
        print(variant_for("llama").__module__)
    """))
    assert r.returncode == 0, r.stderr
    listed, module = r.stdout.splitlines()
    for arch in ("gemma2", "gemma3", "granite", "llama", "mistral", "phi3", "qwen2", "qwen3", "smollm3"):
        assert repr(arch) in listed
    assert module == "infer.variants.llama"
