"""scripts/apt_mirror.sh: the Debian archive from the machine's apt sources (no host in the repo)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "apt_mirror.sh")

pytestmark = pytest.mark.skipif(shutil.which("sh") is None or shutil.which("awk") is None,
                                reason="needs sh and awk")


def mirror(tmp_path, files):
    (tmp_path / "sources.list.d").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run(["sh", SCRIPT], env={**os.environ, "APT_DIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.strip(), r.stderr


def test_one_line_sources_list(tmp_path):
    rc, out, _ = mirror(tmp_path, {"sources.list": (
        "# a comment\n"
        "deb [signed-by=/k.gpg] http://mirror.example/debian-security bookworm-security main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb http://mirror.example/debian/ bookworm main contrib\n")})
    assert (rc, out) == (0, "http://mirror.example/debian")


def test_deb822_sources(tmp_path):
    rc, out, _ = mirror(tmp_path, {
        "sources.list.d/vendor.sources": (
            "Types: deb\nURIs: https://vendor.example/node\nSuites: nodistro\nComponents: main\n"),
        "sources.list.d/debian.sources": (
            "Types: deb\n# http://snapshot.example/archive\nURIs: http://a.example/debian\n"
            "Suites: trixie-updates trixie\nComponents: main\nEnabled: no\n\n"
            "Types: deb deb-src\nURIs: http://b.example/debian\nSuites: trixie trixie-updates\n"
            "Components: main\n")})
    assert (rc, out) == (0, "http://b.example/debian")   # the disabled stanza is skipped


def test_disabled_files_are_not_read(tmp_path):
    rc, out, err = mirror(tmp_path, {
        "sources.list.d/debian.list.disabled": "deb http://c.example/debian bookworm main\n",
        "sources.list.d/cloud.list": "deb https://d.example/apt cloud-sdk-bookworm main\n"})
    assert rc == 1 and out == ""
    assert "no Debian archive" in err and "set MIRROR" in err
