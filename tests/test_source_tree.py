"""`import infer` from a checkout whose extension is not built: a message saying what to do.

After `pip install .`, running from the checkout imports its unbuilt infer/ folder
instead of the installed package (the current folder comes first on sys.path)."""
import importlib.machinery
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _unbuilt_tree(tmp_path):
    tree = tmp_path / "checkout"
    shutil.copytree(os.path.join(ROOT, "infer"), tree / "infer",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "__pycache__"))
    return tree


def _import_in(cwd, extra_path=None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_path:
        env["PYTHONPATH"] = str(extra_path)
    return subprocess.run([sys.executable, "-c", "import infer"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_unbuilt_source_tree_says_what_to_do(tmp_path):
    r = _import_in(_unbuilt_tree(tmp_path))
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: infer: ") and "compiled kernels" in last
    assert "pip install -e ." in last and "run from another folder" in last
    assert "cannot import name" not in r.stderr


def test_shadowed_installed_copy_is_named(tmp_path):
    installed = tmp_path / "site" / "infer"
    installed.mkdir(parents=True)
    (installed / ("kernels" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    r = _import_in(_unbuilt_tree(tmp_path), extra_path=tmp_path / "site")
    assert f"An installed copy is at {installed}" in r.stderr
    assert "shadows it" in r.stderr
