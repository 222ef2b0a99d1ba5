"""The on-disk cache of the compiled ruleset (attribution/rules/cache.py): used when warm, rebuilt
when a rule file, a site directory or the version changes, refused when it is not only the
user's, survives damage, and gives the same verdicts as a fresh load. Every test uses a
temporary cache directory (``ATTRIBUTION_RULES_CACHE``), never ``~/.cache``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import attribution.rules.loader
from attribution.cli import main
from attribution.errors import RuleErrors
from attribution.model import verdict_to_dict
from attribution.rules import cache
from attribution.rules.compiled import RuleSet

from .conftest import CASES
from .test_loader import GOOD_RULE

GOLDEN = [
    "benign-noise-completed",
    "real-case11",
    "blind2-c02-app-exc-before-xid79",
    "blind3-ib-leaf-switch-reboot-eight-nodes",
    "blind10-shared-c04-dbe-ecc-own-gpu",
]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache directory for this test; files written a moment ago may be cached."""
    where = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(where))
    monkeypatch.setattr(cache, "_RACY_NS", 0)
    return where


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A small rules directory of two extractors (loaded without the shipped rules: fast)."""
    where = tmp_path / "site"
    where.mkdir()
    (where / "a.yaml").write_text(GOOD_RULE.format(id="site-a", word="boom"))
    (where / "sub").mkdir()
    (where / "sub" / "b.yaml").write_text(GOOD_RULE.format(id="site-b", word="bang"))
    return where


class Loads:
    """Counts calls of the real loader (``attribution.rules.loader.load_ruleset``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = attribution.rules.loader.load_ruleset

        def load(*args: object, **kwargs: object) -> RuleSet:
            self.calls += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(attribution.rules.loader, "load_ruleset", load)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Loads:
    return Loads(monkeypatch)


def _files(where: Path) -> list[Path]:
    return sorted(where.glob("rules-*.pickle"))


def _load(site: Path) -> RuleSet:
    return cache.load_cached([site], include_shipped=False)


def test_warm_cache_parses_no_yaml(
    cache_dir: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _load(site)
    assert loads.calls == 1
    (written,) = _files(cache_dir)
    assert written.stat().st_mode & 0o777 == 0o600
    assert cache_dir.stat().st_mode & 0o777 == 0o700

    def parse(*_args: object) -> None:
        raise AssertionError("a warm cache parsed a rule file")

    monkeypatch.setattr(attribution.rules.loader, "parse_rule_text", parse)
    second = _load(site)
    assert loads.calls == 1
    assert second.digest == first.digest
    assert [e.id for e in second.extractors] == [e.id for e in first.extractors]
    assert second.sources["site-b"].path == str(site / "sub" / "b.yaml")
    assert second.extractors[0].regex.search("boom now").group("what") == "now"
    for rule_id, source in first.sources.items():  # line numbers survive (unpacked lazily)
        for path in (["id"], ["match", "regex"], ["emit", "fields", "what"], ["nowhere"]):
            assert second.sources[rule_id].lines.line_for(path) == source.lines.line_for(path)
    # a ruleset read from the cache pickles again to the same thing
    third = pickle.loads(cache._dumps(second))
    assert third.sources["site-a"].lines.line_for(["match", "regex"]) == 11


def test_off_writes_nothing(
    tmp_path: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.ENV, "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _load(site)
    _load(site)
    assert loads.calls == 2
    assert not (tmp_path / "xdg").exists()


def test_default_directory_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "attribution"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "attribution"


def test_the_default_directory_is_made_and_used(
    tmp_path: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setattr(cache, "_RACY_NS", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _load(site)
    _load(site)
    assert loads.calls == 1
    assert (tmp_path / "xdg" / "attribution").stat().st_mode & 0o777 == 0o700
    assert len(_files(tmp_path / "xdg" / "attribution")) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="a home of another user needs root")
def test_nothing_is_made_in_the_home_of_another_user(
    tmp_path: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """root under sudo with the caller's HOME: a root-owned cache there would be refused to
    its owner ever after."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 4321, -1)
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(cache, "_RACY_NS", 0)
    _load(site)
    _load(site)
    assert loads.calls == 2
    assert not (home / ".cache").exists()


def test_a_changed_rule_file_rebuilds(cache_dir: Path, site: Path, loads: Loads) -> None:
    first = _load(site)
    rule = site / "sub" / "b.yaml"
    rule.write_text(rule.read_text().replace("Site rule for the boom", "Site rule for the BANG"))
    second = _load(site)
    assert loads.calls == 2
    assert second.digest != first.digest
    changed = second.rule("site-b")
    assert changed is not None and changed.title.startswith("Site rule for the BANG")
    assert len(_files(cache_dir)) == 1  # the same file, rewritten with the new key
    _load(site)
    assert loads.calls == 2


def test_same_size_rewrite_rebuilds(cache_dir: Path, site: Path, loads: Loads) -> None:
    rule = site / "a.yaml"
    _load(site)
    text = rule.read_text()
    rule.write_text(text.replace("boom", "bong"))  # same size, same directory entry
    second = _load(site)
    assert loads.calls == 2
    assert second.extractors[0].regex.search("bong now") is not None


def test_added_and_removed_files_rebuild(cache_dir: Path, site: Path, loads: Loads) -> None:
    _load(site)
    (site / "c.yaml").write_text(GOOD_RULE.format(id="site-c", word="crash"))
    assert _load(site).rule("site-c") is not None
    (site / "c.yaml").unlink()
    assert _load(site).rule("site-c") is None
    assert loads.calls == 3


def test_a_new_version_or_format_rebuilds(
    cache_dir: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    _load(site)
    monkeypatch.setattr(cache, "__version__", "99.0.0")
    _load(site)
    assert loads.calls == 2
    monkeypatch.setattr(cache, "CACHE_FORMAT", cache.CACHE_FORMAT + 1)
    _load(site)
    assert loads.calls == 3
    _load(site)
    assert loads.calls == 3


def test_the_engine_code_is_in_the_key(site: Path) -> None:
    """A source checkout changes the code without changing the version: the modules a ruleset
    is made with (imported by the loader) are among the files whose times are in the key."""
    code = (
        "import sys, attribution.rules.loader, attribution.rules.cache;"
        "print('\\n'.join(m for m in sys.modules if m.startswith('attribution')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "attribution.rules.schema" in out
    for name in out:
        parts = name.split(".")
        assert len(parts) <= 2 or parts[:2] == ["attribution", "rules"], name
        assert len(parts) <= 3, name


def test_site_directories_are_in_the_key(
    cache_dir: Path, site: Path, tmp_path: Path, loads: Loads
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.yaml").write_text(GOOD_RULE.format(id="site-x", word="crash"))
    one = _load(site)
    two = cache.load_cached([site, other], include_shipped=False)
    assert loads.calls == 2
    assert two.rule("site-x") is not None and one.rule("site-x") is None
    assert len(_files(cache_dir)) == 2
    # the same directories, another order: another ruleset (a later one overrides)
    cache.load_cached([other, site], include_shipped=False)
    assert loads.calls == 3
    # each list is still cached
    assert cache.load_cached([site, other], include_shipped=False).digest == two.digest
    assert _load(site).digest == one.digest
    assert loads.calls == 3


def test_rule_errors_are_raised_and_not_cached(cache_dir: Path, site: Path) -> None:
    (site / "bad.yaml").write_text("schema: 1\nkind: nonsense\n")
    for _ in range(2):
        with pytest.raises(RuleErrors):
            _load(site)
    assert not _files(cache_dir)


def test_a_missing_directory_is_the_loaders_error(cache_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(RuleErrors, match="not a rules directory"):
        cache.load_cached([tmp_path / "nowhere"], include_shipped=False)


def test_a_file_changed_a_moment_ago_is_not_saved(
    cache_dir: Path, site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system with coarse timestamps a second change within the same tick would not
    change the key: a rule file that changed within the last seconds is not cached yet."""
    monkeypatch.setattr(cache, "_RACY_NS", 3_000_000_000)
    _load(site)
    assert not _files(cache_dir)
    old = (site / "a.yaml").stat()
    monkeypatch.setattr(cache.time, "time_ns", lambda: old.st_ctime_ns + 10_000_000_000)
    _load(site)
    assert _files(cache_dir)


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_file_others_may_write_is_refused(
    cache_dir: Path, site: Path, loads: Loads, mode: int
) -> None:
    _load(site)
    (written,) = _files(cache_dir)
    written.chmod(mode)
    _load(site)
    assert loads.calls == 2
    assert written.stat().st_mode & 0o777 == 0o600  # replaced by a new file of ours


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_directory_others_may_write_is_refused(
    cache_dir: Path, site: Path, loads: Loads, mode: int
) -> None:
    _load(site)
    cache_dir.chmod(mode)
    try:
        _load(site)
        _load(site)
        assert loads.calls == 3  # neither read nor written
    finally:
        cache_dir.chmod(0o700)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(cache_dir: Path, site: Path, loads: Loads) -> None:
    _load(site)
    (written,) = _files(cache_dir)
    os.chown(written, 4321, -1)
    _load(site)
    assert loads.calls == 2
    assert written.stat().st_uid == os.geteuid()  # replaced by ours
    os.chown(cache_dir, 4321, -1)
    _load(site)
    _load(site)
    assert loads.calls == 4


def test_a_symbolic_link_is_refused(
    cache_dir: Path, site: Path, tmp_path: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    _load(site)
    (written,) = _files(cache_dir)
    elsewhere = tmp_path / "elsewhere.pickle"
    written.rename(elsewhere)
    written.symlink_to(elsewhere)
    _load(site)
    assert loads.calls == 2
    assert not written.is_symlink()
    linked = tmp_path / "linked"
    linked.symlink_to(cache_dir)
    monkeypatch.setenv(cache.ENV, str(linked))
    _load(site)
    assert loads.calls == 3


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "header only", "flipped byte", "garbage", "not a ruleset", "old key"],
)
def test_a_damaged_file_falls_back_to_a_load(
    cache_dir: Path, site: Path, loads: Loads, damage: str
) -> None:
    good = _load(site)
    (written,) = _files(cache_dir)
    data = written.read_bytes()
    header, payload = data.split(b"\n", 2)[:2], data.split(b"\n", 2)[2]
    if damage == "empty":
        data = b""
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "header only":
        data = b"\n".join(header) + b"\n"
    elif damage == "flipped byte":
        middle = len(data) - len(payload) // 2
        data = data[:middle] + bytes([data[middle] ^ 0x55]) + data[middle + 1 :]
    elif damage == "garbage":
        data = os.urandom(4096)
    elif damage == "not a ruleset":
        key = header[1].split(b" ")[0].decode()
        other = pickle.dumps({"digest": "x"})
        data = cache._header(key, other) + other
    elif damage == "old key":
        data = cache._header("0" * 64, payload) + payload
    written.write_bytes(data)
    again = _load(site)
    assert loads.calls == 2
    assert again.digest == good.digest
    _load(site)  # rewritten whole
    assert loads.calls == 2


def test_an_unwritable_directory_is_not_an_error(
    tmp_path: Path, site: Path, loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    assert _load(site).rule("site-a") is not None
    assert _load(site).rule("site-a") is not None
    assert loads.calls == 2


# --------------------------------------------------------------------- the same verdicts


def test_a_cached_ruleset_gives_the_same_verdicts(cache_dir: Path, ruleset: RuleSet) -> None:
    from attribution.bundle import diagnose_bundle

    cache.load_cached()  # a miss: the session's ruleset, saved
    assert len(_files(cache_dir)) == 1
    cached = cache.load_cached()
    assert cached is not ruleset
    assert cached.digest == ruleset.digest and cached.version == ruleset.version
    assert [e.id for e in cached.extractors] == [e.id for e in ruleset.extractors]
    assert cached.correlations == ruleset.correlations
    assert cached.diagnoses == ruleset.diagnoses
    assert cached.tables == ruleset.tables
    for case in GOLDEN:
        _, fresh = diagnose_bundle(CASES / case, ruleset)
        _, again = diagnose_bundle(CASES / case, cached)
        assert verdict_to_dict(again) == verdict_to_dict(fresh), case


def test_the_cli_gives_the_same_json_warm_and_cold(cache_dir: Path) -> None:
    runner = CliRunner()
    for case in GOLDEN[:3]:
        outputs = []
        for _ in range(2):  # the first run saves the cache, the second reads it
            result = runner.invoke(main, ["diagnose", str(CASES / case), "--json"])
            assert result.exit_code == 0, result.output
            outputs.append(json.loads(result.stdout))
        assert outputs[0] == outputs[1], case
    assert len(_files(cache_dir)) == 1


def test_lint_reads_the_same_lines_from_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "diagnose").mkdir(parents=True)
    (site / "diagnose" / "wrong-name.yaml").write_text(
        "schema: 1\nid: not-the-file-name\nkind: diagnosis\nversion: 1\n"
        "title: Uses an event nobody emits\ndescription: The event below is emitted by none.\n"
        "priority: 10\nsub_domain: application\nwhen:\n  any:\n"
        "    - {event: app.never_emitted}\nsummary: never\n"
    )
    runner = CliRunner()
    runs = [runner.invoke(main, ["rules", "lint", str(site)]) for _ in range(2)]
    assert runs[0].exit_code == runs[1].exit_code == 1
    assert runs[0].output == runs[1].output
    assert f"{site / 'diagnose' / 'wrong-name.yaml'}:2" in runs[0].output
    assert len(_files(cache_dir)) == 1


def test_the_cli_with_a_site_directory(cache_dir: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "a.yaml").write_text(GOOD_RULE.format(id="site-a", word="boom"))
    runner = CliRunner()
    args = ["diagnose", str(CASES / GOLDEN[0]), "--json", "--rules", str(site)]
    first = runner.invoke(main, args)
    second = runner.invoke(main, args)
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    assert json.loads(first.stdout) == json.loads(second.stdout)
    assert len(_files(cache_dir)) == 1
