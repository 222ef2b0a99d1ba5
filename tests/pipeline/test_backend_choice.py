"""Which Slurm backend the configuration gets (pyslurm is optional and must match Slurm)."""

from __future__ import annotations

import sys
import types

import pytest

from attribution.config import SlurmSettings
from attribution.errors import SlurmError
from attribution.slurm.cli import CliBackend, Completed
from attribution.slurm.factory import make_backend
from attribution.slurm.pyslurm_backend import pyslurm_usable


def test_cli_without_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import pyslurm raises ImportError
    assert make_backend(SlurmSettings(backend="auto")).name == "cli"
    assert make_backend(SlurmSettings(backend="cli")).name == "cli"
    with pytest.raises(SlurmError, match="import pyslurm failed"):
        make_backend(SlurmSettings(backend="pyslurm"))


def version_runner(text: str):  # type: ignore[no-untyped-def]
    def run(argv, timeout, env):  # type: ignore[no-untyped-def]
        return Completed(0, text, "")

    return run


@pytest.mark.parametrize(
    ("pyslurm_version", "slurm_says", "usable"),
    [
        ("22.5.3", "slurm-wlm 22.05.8\n", True),
        ("25.11.2", "slurm-wlm 22.05.8\n", False),
        ("25.11.2", "slurm 25.11.0\n", True),
    ],
)
def test_pyslurm_must_match(
    monkeypatch: pytest.MonkeyPatch, pyslurm_version: str, slurm_says: str, usable: bool
) -> None:
    fake = types.ModuleType("pyslurm")
    fake.__version__ = pyslurm_version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyslurm", fake)
    ok, why = pyslurm_usable(CliBackend(runner=version_runner(slurm_says)))
    assert ok is usable
    if not usable:
        assert "does not match" in why
