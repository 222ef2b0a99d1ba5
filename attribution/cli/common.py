"""What every ``sattr`` command shares: errors, output, the common options and option types.

Exit codes: 0 when the command did its job; 1 for unusable input or a failed check, with one
``sattr: error: ...`` line on stderr; 2 for usage errors, a bad option value included (click's
``Error: Invalid value for '--OPTION': ...``), never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from attribution.errors import AttributionError, RuleErrors
from attribution.timeutil import parse_when

if TYPE_CHECKING:
    from rich.console import Console

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
PIPE_WIDTH = 120

MAX_LIST_NODES = 10_000


def console(stderr: bool = False, *, markup: bool = True) -> Console:
    """The rich console for human views: piped into a file or less it is wide enough for a
    verdict table (``PIPE_WIDTH``), unless ``COLUMNS`` says otherwise. ``markup=False`` for
    views whose cells are text from files and verdicts (never read as rich markup)."""
    from rich.console import Console  # not for --json: rich takes a while to import

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    # emoji=False: a PCI bus id such as 0000:ab:00.0 holds ":ab:", an emoji code to rich
    return Console(
        stderr=stderr, highlight=False, soft_wrap=False, width=width, markup=markup, emoji=False
    )


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``sattr: error: <message>`` (one line, control characters shown as ``?``) and
    exit."""
    text = " ".join(str(message).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    click.echo(f"sattr: error: {text}", err=True)
    sys.exit(code)


def note(message: str) -> None:
    click.echo(f"sattr: note: {message}", err=True)


def emit_json(data: Any) -> None:
    """``data`` as indented JSON on stdout, written in pieces: the verdict of a job of
    200,000 nodes is hundreds of MB of JSON, never held as one string."""
    pieces: list[str] = []
    size = 0
    for piece in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(data):
        pieces.append(piece)
        size += len(piece)
        if size >= 1 << 16:
            click.echo("".join(pieces), nl=False)
            pieces, size = [], 0
    click.echo("".join(pieces))


class DefaultGroup(click.Group):
    """A group where ``sattr 1234`` means ``sattr show 1234``."""

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def load_rules(extra: Sequence[str], *, shipped: bool = True) -> Any:
    """The shipped ruleset plus ``extra`` site directories, through the user's cache of compiled
    rulesets (``attribution.rules.cache``); rule errors end the command."""
    import gc

    from attribution.rules.cache import load_cached

    try:
        ruleset = load_cached([Path(d) for d in extra], include_shipped=shipped)
    except RuleErrors as exc:
        for err in exc.errors:
            click.echo(f"sattr: rule error: {err}", err=True)
        fail(f"{len(exc.errors)} rule error(s); fix them or run 'sattr rules lint'")
    # what the command has made so far (modules, the ruleset: some 50,000 objects) lives as long
    # as it does: leave it out of later collections, one of which would cost about 30 ms
    gc.freeze()
    return ruleset


def load_config(path: str | None) -> Any:
    """The site configuration (``--config``); an invalid one ends the command."""
    from attribution.config import load_config as load

    try:
        return load(path)
    except AttributionError as exc:
        fail(str(exc))


def store_path(db: str | None, config: Any) -> Path:
    """``--db`` when given, else the configuration's ``store``."""
    return Path(db) if db else Path(config.store)


# --------------------------------------------------------------------- option types


def finite(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float | None:
    """A callback refusing NaN, which every range check lets through."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("not a number")
    return value


@dataclass(frozen=True, slots=True)
class When:
    """A ``--since``/``--until`` value: the ``text`` given and the UTC time it means."""

    text: str
    at: datetime

    @property
    def everything(self) -> bool:
        return self.text.strip().lower() == "all"


def when_option(*, allow_all: bool = True) -> Any:
    """The callback of a ``--since``/``--until`` option: a ``When`` (``parse_when``), None when
    the option is not given; a bad value is a usage error naming the option."""

    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> When | None:
        if value is None:
            return None
        try:
            if not allow_all and value.strip().lower() == "all":
                raise ValueError(value)
            return When(value, parse_when(value))
        except ValueError:
            kinds = "a duration (12h, 7d), a date (2026-11-30) or 'all'"
            if not allow_all:
                kinds = "a duration (12h, 7d) or a date (2026-11-30)"
            raise click.BadParameter(f"{value!r} is not {kinds}") from None

    return convert


def node_list(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, ...] | None:
    """The callback of ``--node``: a Slurm host list (``gpu[01-08],login1``) expanded to node
    names; a malformed or empty list is a usage error naming the option."""
    if value is None:
        return None
    from attribution.hostlist import HostlistError, expand

    try:
        nodes = expand(value)
    except HostlistError as exc:
        raise click.BadParameter(str(exc)) from None
    if not nodes:
        raise click.BadParameter(f"{value!r} names no node")
    if len(nodes) > MAX_LIST_NODES:
        raise click.BadParameter(f"{value!r} names more than {MAX_LIST_NODES:,} nodes")
    return nodes


# --------------------------------------------------------------------- shared options

since_option = click.option(
    "--since",
    metavar="WHEN",
    callback=when_option(),
    default="7d",
    show_default=True,
    help="Jobs that ended since (7d, 2026-11-30, all).",
)
until_option = click.option(
    "--until",
    metavar="WHEN",
    callback=when_option(allow_all=False),
    default=None,
    help="Jobs that ended before (1d, 2026-12-01).",
)

rules_option = click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Add a site rules directory (repeatable); its rules override shipped ones by id.",
)
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True),
    envvar="ATTRIBUTION_CONFIG",
    default=None,
    help="Configuration file (default: /etc/attribution/config.yaml).",
)
db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False),
    envvar="ATTRIBUTION_DB",
    default=None,
    help="Verdict store (default: 'store' in the configuration).",
)


__all__ = [
    "CONTEXT",
    "DefaultGroup",
    "When",
    "config_option",
    "console",
    "db_option",
    "emit_json",
    "fail",
    "finite",
    "load_config",
    "load_rules",
    "node_list",
    "note",
    "rules_option",
    "store_path",
    "when_option",
]
