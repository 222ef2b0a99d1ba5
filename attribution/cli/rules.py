"""``sattr rules lint``, ``test`` and ``lock``: check rules the way CI does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from attribution.cli.common import fail, load_rules


@click.group()
def rules() -> None:
    """Check rules: lint (structure and references) and test (inline examples)."""


def _site_ids(ruleset: Any, directory: str | None) -> set[str] | None:
    if directory is None:
        return None
    root = str(Path(directory).resolve())
    return {
        rid
        for rid, src in ruleset.sources.items()
        if str(Path(src.path).resolve()).startswith(root)
    }


@rules.command("lint")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--no-shipped", is_flag=True, help="Lint DIRECTORY alone, without the shipped rules.")
def rules_lint(directory: str | None, no_shipped: bool) -> None:
    """Load and lint the shipped rules, plus DIRECTORY (a site's own) when given."""
    from attribution.rules.lint import lint

    ruleset = load_rules([directory] if directory else [], shipped=not no_shipped)
    ids = _site_ids(ruleset, directory)
    issues = [
        i
        for i in lint(ruleset)
        if ids is None or any(ruleset.sources[r].path == i.location.path for r in ids)
    ]
    for issue in issues:
        click.echo(str(issue))
    errors = sum(1 for i in issues if i.error)
    total = len(ruleset.all_rules())
    scope = (
        f"{total} rule(s)"
        if ids is None
        else f"{directory}: {len(ids)} rule(s) linted, loaded with {total} in all"
    )
    click.echo(
        f"{scope}, {len(ruleset.tables)} table(s): "
        f"{errors} error(s), {len(issues) - errors} warning(s)"
    )
    if errors:
        sys.exit(1)


@rules.command("test")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--no-shipped", is_flag=True, help="Test DIRECTORY alone, without the shipped rules.")
@click.option("-v", "--verbose", is_flag=True, help="List every example, not only failures.")
def rules_test(directory: str | None, no_shipped: bool, verbose: bool) -> None:
    """Run the inline examples of every rule (or of DIRECTORY's rules)."""
    from attribution.rules.examples import iter_examples, run_example

    ruleset = load_rules([directory] if directory else [], shipped=not no_shipped)
    ids = _site_ids(ruleset, directory)
    failed = passed = xfail = xpass = 0
    for case in iter_examples(ruleset):
        if ids is not None and case.rule_id not in ids:
            continue
        result = run_example(ruleset, case)
        if case.group == "todo":
            if result.passed:
                xpass += 1
                click.echo(f"XPASS {case.test_id}: now passes; promote it from todo to match")
            else:
                xfail += 1
            continue
        if result.passed:
            passed += 1
            if verbose:
                click.echo(f"ok    {case.test_id}")
        else:
            failed += 1
            source = ruleset.sources.get(case.rule_id)
            where = source.path if source else case.rule_id
            click.echo(f"FAIL  {case.test_id} ({where}): {result.detail}")
    click.echo(
        f"{passed} passed, {failed} failed, {xfail} known gaps (todo), {xpass} todo now passing"
    )
    if failed or xpass:
        sys.exit(1)


__all__ = ["rules"]


@rules.command("lock")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option(
    "--check", is_flag=True, help="Change nothing; exit 1 when the lock is not up to date."
)
def rules_lock(directory: str | None, check: bool) -> None:
    """Record new rule versions in DIRECTORY/VERSIONS.lock (default: the shipped rules).

    A rule whose body changed without a new version, a version that went back and a new
    rule marked stable are errors (docs/rules.md, "Versions and maturity"); new versions are
    added, old lines are never rewritten.
    """
    from attribution.errors import RuleErrors
    from attribution.paths import rules_dir
    from attribution.rules.versions import lock_path, lock_status, write_lock

    root = Path(directory) if directory else rules_dir()
    if not root.is_dir():
        fail(f"{root}: not a rules directory")
    try:
        status = lock_status(root)
    except RuleErrors as exc:
        fail(str(exc))
    for problem in status.problems:
        click.echo(f"{problem.where}: error: {problem.message}")
    if status.problems:
        sys.exit(1)
    shown = lock_path(root)
    if not status.added:
        click.echo(f"{shown}: up to date")
        return
    if check:
        for ref in status.added:
            click.echo(f"{shown}: not locked yet: {ref}")
        click.echo("run `sattr rules lock` and commit the file")
        sys.exit(1)
    try:
        write_lock(root, status.lock)
    except RuleErrors as exc:
        fail(str(exc))
    for ref in status.added:
        click.echo(f"locked {ref}")
    click.echo(f"{shown}: {len(status.added)} version(s) added")
