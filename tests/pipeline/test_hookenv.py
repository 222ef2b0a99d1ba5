"""The spool entry format: what real shells print for ``export -p``, parsed without eval."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from attribution.errors import SpoolError
from attribution.slurm.hookenv import (
    format_entry,
    iter_export_p,
    key_from_env,
    parse_entry,
    parse_export_p,
    sanitize_key,
)

NASTY = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NAME": 'it\'s a "job" $HOME `id` \\ end',
    "SLURM_JOB_COMMENT": "two\nlines\twith tab",
    "SLURM_JOB_STDOUT": "/tmp/o/%x-%j.out",
    "SLURM_CTRL": "bell\x07esc\x1bdone",
    "SLURM_UNICODE": "grüße ✓",
    "SLURM_EMPTY": "",
    "SLURM_EQ": "a=b=c",
}

SHELLS = [
    ["dash", "-c"],
    ["bash", "--posix", "-c"],
    ["bash", "-c"],
]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: " ".join(s[:-1]))
def test_real_shells_round_trip(shell: list[str]) -> None:
    if shutil.which(shell[0]) is None:
        pytest.skip(f"{shell[0]} is not installed")
    out = subprocess.run(
        [*shell, "export -p"], env=NASTY, capture_output=True, check=True
    ).stdout.decode()
    parsed = parse_export_p(out)
    for name, value in NASTY.items():
        assert parsed[name] == value, (shell, name, out)


def test_dash_single_quote_style() -> None:
    text = "export A='it'\"'\"'s'\nexport B='multi\nline'\nexport C\n"
    assert list(iter_export_p(text)) == [("A", "it's"), ("B", "multi\nline"), ("C", None)]


def test_bash_declare_and_ansi_c() -> None:
    text = 'declare -x A="x \\"y\\" \\$z"\ndeclare -x B=$\'a\\tb\\001c\\nd\'\ndeclare -x OLDPWD\n'
    assert parse_export_p(text) == {"A": 'x "y" $z', "B": "a\tb\x01c\nd"}


def test_nothing_is_executed(tmp_path) -> None:
    marker = tmp_path / "pwned"
    text = f"export A='$(touch {marker})'\nexport B=\"`touch {marker}`\"\n"
    parsed = parse_export_p(text)
    assert parsed["A"] == f"$(touch {marker})"
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("export A='unterminated\n", 1),
        ("export A=1\nrm -rf /\n", 2),
        ("export A=1\nexport 1BAD=2\n", 2),
        ('export A="open\n\n', 1),
    ],
)
def test_malformed_entries_name_the_line(text: str, line: int) -> None:
    with pytest.raises(SpoolError) as err:
        parse_export_p(text, "entry")
    assert err.value.location is not None
    assert err.value.location.line == line


def test_keys() -> None:
    base = {"SLURM_JOB_ID": "25", "SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_RESTART_COUNT": "2"}
    assert key_from_env(base) == "c1_25_2"
    arr = {**base, "SLURM_ARRAY_JOB_ID": "23", "SLURM_ARRAY_TASK_ID": "1"}
    assert key_from_env(arr) == "c1_23_1_2"
    assert key_from_env({**arr, "SLURM_JOB_SLUID": "s2MNM8NJZ1NP03"}) == "s2MNM8NJZ1NP03"
    assert key_from_env({"SLURM_JOB_ID": "7"}) == "cluster_7_0"
    with pytest.raises(SpoolError):
        key_from_env({})


def test_sanitize_key() -> None:
    assert sanitize_key("../etc/passwd") == "_.._etc_passwd"
    assert sanitize_key(".hidden") == "_.hidden"
    assert sanitize_key("ok-1.2_3") == "ok-1.2_3"
    assert sanitize_key("a b\nc") == "a_b_c"


def test_entry_round_trip_and_header() -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_CLUSTER_NAME": "c", "SLURM_JOB_NAME": "x'y"}
    text = format_entry(env, epoch=1796000000)
    entry = parse_entry(text + "export OTHER='ignored'\n", mtime=5.0)
    assert entry.key == "c_9_0"
    assert entry.env == env
    assert entry.spooled_at == 1796000000
    no_epoch = parse_entry(format_entry(env), mtime=5.0)
    assert no_epoch.spooled_at == 5.0


def test_entry_needs_header_and_job_id() -> None:
    with pytest.raises(SpoolError, match="bad header"):
        parse_entry("export SLURM_JOB_ID='1'\n")
    with pytest.raises(SpoolError, match="SLURM_JOB_ID"):
        parse_entry("# attribution-spool 1 key=x\nexport SLURM_X='1'\n")
