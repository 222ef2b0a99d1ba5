"""Every ``sattr`` command and every option is documented in docs/cli.md, and nothing else is.

The click command tree is walked: each command (``rules lint`` for a subcommand) must have its
``## sattr <command>`` section, each of its options (long and short names) must appear in that
section, and each option the section lists as ``- `--option ...`: ...`` must exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click

from attribution.cli import main

from .conftest import TESTS

DOCS = TESTS.parent / "docs" / "cli.md"
README = TESTS.parent / "README.md"
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")
BULLET = re.compile(r"^- ((?:`[^`]+`(?:, )?)+)", re.M)


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """(``"rules lint"``, command) for every command under ``group``, groups included."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from commands(command, prefix=f"{path} ")


def options(command: click.Command) -> set[str]:
    """Every option name of ``command`` (``-v``, ``--verbose``), ``--help`` left out."""
    names: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names - {"-h", "--help"}


def sections() -> dict[str, str]:
    """``## sattr <command>`` sections of docs/cli.md by command."""
    text = DOCS.read_text(encoding="utf-8")
    parts = re.split(r"^## sattr (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_option_is_documented() -> None:
    docs = sections()
    assert docs, f"{DOCS}: no '## sattr <command>' sections"
    missing: list[str] = []
    for path, command in commands(main):
        if isinstance(command, click.Group):
            if not any(name.startswith(f"{path} ") for name in docs):
                missing.append(f"command group '{path}' has no section")
            continue
        section = docs.get(path)
        if section is None:
            missing.append(f"command '{path}' has no '## sattr {path}' section")
            continue
        for name in sorted(options(command)):
            if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", section):
                missing.append(f"'sattr {path}': option {name} is not documented")
    assert not missing, "docs/cli.md:\n" + "\n".join(missing)


def test_documented_options_exist() -> None:
    known = dict(commands(main))
    wrong: list[str] = []
    for path, section in sections().items():
        command = known.get(path)
        if command is None:
            wrong.append(f"section 'sattr {path}' documents no command")
            continue
        for bullet in BULLET.findall(section):
            for name in OPTION.findall(bullet):
                if name not in options(command):
                    wrong.append(f"'sattr {path}' has no option {name}")
    assert not wrong, "docs/cli.md:\n" + "\n".join(wrong)


def test_top_level_options_and_link() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name in options(main):
        assert name in text, name
    assert "-h" in text and "--help" in text
    assert "docs/cli.md" in README.read_text(encoding="utf-8")
