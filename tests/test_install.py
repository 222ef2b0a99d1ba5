"""INSTALL's path installs exactly the locked dependency versions (issue 12).

``contrib/requirements.lock.txt`` is ``uv.lock`` exported for pip, with hashes. It must match
the lock (a change of ``uv.lock`` without re-exporting fails here), and installing it with
``pip --require-hashes`` and then the project with ``--no-deps`` must give a working ``sattr``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from packaging.markers import Marker

ROOT = Path(__file__).resolve().parent.parent
LOCKED = ROOT / "contrib" / "requirements.lock.txt"
EXPORT = [
    "uv", "export", "--frozen", "--no-dev", "--no-emit-project",
    "--format", "requirements.txt", "--no-header",
]  # fmt: skip


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed")
def test_the_pip_requirements_are_the_lock_exported() -> None:
    exported = subprocess.run(EXPORT, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert LOCKED.read_text() == exported, (
        "contrib/requirements.lock.txt is not uv.lock: run "
        f"`{' '.join(EXPORT)} -o contrib/requirements.lock.txt`"
    )
    assert "--hash=sha256:" in exported


def test_install_md_installs_the_locked_versions() -> None:
    text = (ROOT / "INSTALL.md").read_text()
    assert "--require-hashes -r contrib/requirements.lock.txt" in text
    assert "pip install --no-deps ." in text
    assert "bin/pip install .  " not in text  # the unpinned path is gone


@pytest.mark.slow
def test_the_install_md_path_gives_a_working_sattr(tmp_path: Path) -> None:
    """What INSTALL.md step 2 runs, in a fresh venv (needs a package index)."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    deps = subprocess.run(
        [*pip, "install", "--require-hashes", "-r", str(LOCKED)], capture_output=True, text=True
    )
    if deps.returncode != 0 and "No matching distribution" in deps.stderr + deps.stdout:
        pytest.skip(f"no package index reachable: {deps.stderr.strip().splitlines()[-1:]}")
    assert deps.returncode == 0, deps.stderr
    project = subprocess.run(
        [*pip, "install", "--no-deps", str(ROOT)], capture_output=True, text=True
    )
    assert project.returncode == 0, project.stderr
    version = subprocess.run(
        [str(env / "bin" / "sattr"), "--version"], capture_output=True, text=True, check=True
    )
    assert "sattr, version" in version.stdout
    frozen = subprocess.run([*pip, "freeze", "--all"], capture_output=True, text=True, check=True)
    installed = dict(
        (_name(n), v) for n, _, v in (ln.partition("==") for ln in frozen.stdout.splitlines())
    )
    for line in LOCKED.read_text().splitlines():
        if line.startswith((" ", "#")) or "==" not in line:
            continue
        spec, _, marker = line.rstrip(" \\").partition(";")
        name, _, version = spec.strip().partition("==")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue  # not for this platform or Python
        assert installed.get(_name(name)) == version, f"{name}: locked {version}"


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
