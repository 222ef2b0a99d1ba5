"""The configuration file: defaults, strictness and errors that name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attribution.config import EXAMPLE, Config, load_config, parse_config
from attribution.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTRIBUTION_CONFIG", raising=False)
    monkeypatch.setattr("attribution.config.DEFAULT_CONFIG", tmp_path / "absent.yaml")
    config = load_config()
    assert config == Config()
    assert config.admin_comment.enabled is False
    assert config.spool == Path("/var/spool/attribution")


def test_example_is_valid() -> None:
    config = parse_config(yaml.safe_load(EXAMPLE), "example")
    # kernel evidence from a source users cannot write: the journal's kernel transport
    assert config.logs.kernel == []
    assert config.logs.journal == ["/var/log/journal/remote/remote-{node}*.journal"]
    assert config.logs.trust.syslog == "untrusted" and config.logs.trust.kernel == "trusted"
    assert config.settle_delay == 30
    assert config.job_output.max_bytes == 16 << 30  # all of a job's output, up to 16 GiB


def test_units(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "settle_delay: 2m\nretention: 1d\njob_output: {max_bytes: 1MiB}\n")
    )
    assert (config.settle_delay, config.retention) == (120, 86400)
    assert config.job_output.max_bytes == 1 << 20


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("spool: /x\nlogs:\n  kernal: []\n", 3, "unknown key 'logs.kernal'"),
        ("admin_comment:\n  enabled: true\n  foreign: overwrite\n", 3, "admin_comment.foreign"),
        ("window:\n  before: soon\n", 2, "not a duration"),
        ("logs:\n  kernel:\n    - relative/{node}\n", 3, "must be absolute"),
        ("logs:\n  syslog: ['/var/log/{host}/syslog']\n", 2, "unknown placeholder {host}"),
        ("logs:\n  kernel: ['/v/{node!r:>99999999}/k']\n", 2, "no format spec"),
        ("timezone: Mars/Olympus\n", 1, "unknown timezone"),
        ("spool: /x\nspool: /y\n", 2, "duplicate key"),
        ("logs: [\n", 2, "invalid YAML"),
        ("- a list\n", 1, "must be a YAML mapping"),
        ("admin_comment: {max_length: 100000}\n", 1, "max_length"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message
    assert "\n" not in message


def test_several_problems_are_all_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "a: 1\nb: 2\n"))
    assert "unknown key 'a'" in str(err.value)
    assert "line 2: unknown key 'b'" in str(err.value)


def test_explicit_path_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(write(tmp_path, "record_pass: true\n")))
    assert load_config().record_pass is True


def test_shipped_example_file_is_valid() -> None:
    from tests.pipeline.conftest import REPO

    config = load_config(REPO / "contrib" / "config.yaml.example")
    assert config.logs.fabricmanager == ["/var/log/hosts/{node}/nv-fabricmanager.log*"]
    assert config.logs.kernel == [] and config.logs.journal
    assert config.logs.trust.syslog == "untrusted"
    assert config.retries.backoff_max == 3600
