#!/usr/bin/env python3
"""The fuzz suite's properties (tests/fuzz/properties.py) for many examples, with a fixed seed.

Usage: uv run python bench/fuzz.py [--seed 1] [--examples 1000] [--only NAME ...] [--all]

Runs each target (``reader``, ``encodings``, ``diagnosis``, ``blame``, ``records``; see
docs/fuzzing.md) for ``--examples`` examples drawn from ``--seed`` and prints its examples per
second. A target stops at its first failure, which hypothesis shrinks and prints with the
seed that reproduces it; with ``--all`` it goes on instead and prints, for each distinct
failure (exception type and place, or the property's complaint), the smallest example seen.
Exits 1 when any target failed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import given, seed  # noqa: E402

from attribution.rules.compiled import RuleSet  # noqa: E402
from attribution.rules.loader import load_ruleset  # noqa: E402
from tests.fuzz.properties import TARGETS, BundleCase, Target, fuzz_settings  # noqa: E402


@dataclass
class Failures:
    """Distinct failures of one target (``--all``): signature -> (repr size, example, text)."""

    seen: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    examples: dict[str, Any] = field(default_factory=dict)
    count: int = 0

    def add(self, example: Any, exc: BaseException) -> None:
        self.count += 1
        if isinstance(exc, AssertionError):
            text = str(exc).splitlines()[0] if str(exc) else "assertion failed"
            # the complaint without the values that vary (node names, quoted text)
            key = re.sub(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\d+", "_", text)[:160]
        else:
            frames = traceback.extract_tb(exc.__traceback__)
            text = f"{type(exc).__name__}: {str(exc)[:500]}\n" + "".join(
                traceback.format_list(frames[-4:])
            )
            key = f"{type(exc).__name__} at {Path(frames[-1].filename).name}:{frames[-1].lineno}"
        shown = repr(example)
        if key not in self.seen or len(shown) < self.seen[key][0]:
            self.seen[key] = (len(shown), shown, text)
            self.examples[key] = example

    def save(self, directory: Path, target: str) -> None:
        """Each smallest example as a bundle (or a file) under ``directory``."""
        for i, key in enumerate(sorted(self.examples), 1):
            example = self.examples[key]
            where = directory / f"{target}-{i}"
            if isinstance(example, BundleCase):
                example.write(where)
            else:
                where.mkdir(parents=True, exist_ok=True)
                (where / "kern.log").write_bytes(example.data)
            (where / "FAILURE.txt").write_text(key + "\n" + self.seen[key][2] + "\n")
            print(f"  saved {where}")


def run_target(
    target: Target,
    ruleset: RuleSet,
    examples: int,
    at: int,
    keep_going: bool,
    show: int,
    save: Path | None = None,
) -> bool:
    """Run one target; print its rate and failures; True when it held."""
    done = 0
    failures = Failures()

    def check(example: Any) -> None:
        nonlocal done
        done += 1
        if not keep_going:
            target.check(example, ruleset)
            return
        try:
            target.check(example, ruleset)
        except Exception as exc:
            failures.add(example, exc)

    test = fuzz_settings(examples, derandomize=False)(seed(at)(given(target.strategy)(check)))
    began = time.monotonic()
    failed: BaseException | None = None
    try:
        test()
    except Exception as exc:  # the first failure, shrunk; hypothesis printed the example
        failed = exc
    took = time.monotonic() - began
    print(f"{target.name}: {done} examples in {took:.1f} s ({done / max(took, 1e-9):.0f}/s)")
    if failed is not None:
        print(f"  FAILED: {type(failed).__name__}: {str(failed)[:2000]}")
        return False
    for key, (_, shown, text) in sorted(failures.seen.items()):
        print(f"  FAILED ({key}):\n    {text}\n    smallest example: {shown[:show]}")
    if failures.count:
        print(f"  {failures.count} failing examples, {len(failures.seen)} distinct")
        if save is not None:
            failures.save(save, target.name)
    return not failures.count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--examples", type=int, default=1000, help="per target")
    names = [t.name for t in TARGETS]
    parser.add_argument("--only", nargs="+", choices=names, help="these targets only")
    parser.add_argument(
        "--all", action="store_true", help="go on after a failure; print each distinct one"
    )
    parser.add_argument(
        "--show", type=int, default=3000, help="characters of each example printed (--all)"
    )
    parser.add_argument(
        "--save", type=Path, help="with --all: write each distinct failure's example here"
    )
    args = parser.parse_args()
    ruleset = load_ruleset()
    ok = True
    for target in TARGETS:
        if args.only and target.name not in args.only:
            continue
        ok &= run_target(target, ruleset, args.examples, args.seed, args.all, args.show, args.save)
    print("all properties held" if ok else "some properties failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
