"""Issue 18's promise for every reproducer kept in ``tests/hostile/``: ``sattr diagnose`` exits 0
with a verdict or 1 with one line naming the problem, within 60 s, and (``--slow``) in under
256 MiB of memory. The class-specific checks live in ``test_hostile_blame.py``,
``test_hostile_sources.py`` and ``test_hostile_records.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.cli import main

HOSTILE = Path(__file__).parent / "hostile"
BUNDLES = sorted(p.name for p in HOSTILE.iterdir() if (p / "job.json").exists())
LIMIT_S = 60
LIMIT_MIB = 256


def test_every_kind_of_reproducer_is_kept() -> None:
    kinds = {name.split("-", 1)[0] for name in BUNDLES}
    assert {"blame", "source", "record"} <= kinds, kinds


@pytest.mark.parametrize("name", BUNDLES)
def test_a_reproducer_ends_in_a_verdict_or_one_line(name: str) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(main, ["diagnose", "--json", str(HOSTILE / name)])
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT_S, elapsed
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    if result.exit_code == 0:
        verdict = json.loads(result.stdout)
        assert verdict["terminal_state"] and verdict["sub_domain"]
    else:
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output


# Peak RSS of the child's own address space: ``VmHWM`` starts anew at exec, while
# ``ru_maxrss`` (getrusage, wait4) starts from the forking parent's peak, pytest's here
_PEAK = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write("peak_kib=" + line.split()[1] + "\\n")
atexit.register(_peak)
from attribution.cli import main
main(sys.argv[1:], prog_name="sattr")
"""


def peak_kib(args: list[str]) -> tuple[int, int, str]:
    """Run ``sattr args`` in a process of its own: (exit code, peak RSS in KiB, stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stderr.splitlines()
    peak = next(int(x.split("=")[1]) for x in reversed(lines) if x.startswith("peak_kib="))
    return done.returncode, peak, "\n".join(x for x in lines if not x.startswith("peak_kib="))


@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLES)
def test_a_reproducer_stays_within_memory(name: str) -> None:
    started = time.monotonic()
    code, peak, err = peak_kib(["diagnose", "--json", str(HOSTILE / name)])
    elapsed = time.monotonic() - started
    assert code in (0, 1), err
    assert elapsed < LIMIT_S, elapsed
    assert peak / 1024 < LIMIT_MIB, peak
