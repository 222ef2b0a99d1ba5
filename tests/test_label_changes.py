"""A commit that changes a rule and the expected answer that scores it must say so.

Changing a rule and, in the same commit, the golden answer (`expected.yaml`) that names it is how
a regression gets hidden: the suite stays green because the answer moved with the code. Such a
commit must carry a `Label-change:` trailer with a reason in its message, e.g.

    Label-change: the case's XID 79 came after the job's own traceback; the answer was wrong

The check covers every commit after ``START`` (the commit that introduced it). It needs the
git history; on a source tree without it the test skips, and `.ci/run` (which runs on a clone)
sets ATTRIBUTION_REQUIRE_GIT=1 so that it fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
START = "336c738e423e5ba773facb6a04cdaa44d3032261"
TRAILER = re.compile(r"^Label-change:[ \t]*(\S.*)$", re.MULTILINE)
ANSWER_DIRS = ("tests/cases/", "tests/blind/")


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def _history_or_skip() -> None:
    why = None
    if shutil.which("git") is None:
        why = "git is not installed"
    elif not (ROOT / ".git").exists():
        why = "not a git checkout"
    else:
        probe = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{START}^{{commit}}"],
            capture_output=True,
        )
        if probe.returncode != 0:
            why = f"the history does not reach {START[:12]} (a shallow clone?)"
    if why is None:
        return
    if os.environ.get("ATTRIBUTION_REQUIRE_GIT") == "1":
        pytest.fail(f"ATTRIBUTION_REQUIRE_GIT=1 but {why}")
    pytest.skip(f"cannot check commit messages: {why}")


def _rule_ids(commit: str, paths: list[str], root: Path) -> set[str]:
    """The ids of the rule files a commit changed (before and after the change)."""
    ids = set()
    for path in paths:
        ids.add(Path(path).stem)  # a rule's id equals its file name
        for rev in (commit, f"{commit}^"):
            try:
                data = yaml.safe_load(_git("show", f"{rev}:{path}", root=root))
            except (subprocess.CalledProcessError, yaml.YAMLError):
                continue
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                ids.add(data["id"])
    return ids


def _named_rules(commit: str, path: str, root: Path) -> set[str]:
    """The rules an expected.yaml names (cause and acceptable_causes), before and after."""
    out: set[str] = set()
    for rev in (commit, f"{commit}^"):
        try:
            data = yaml.safe_load(_git("show", f"{rev}:{path}", root=root))
        except (subprocess.CalledProcessError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("cause"), str):
            out.add(data["cause"])
        extra = data.get("acceptable_causes") or []
        if isinstance(extra, list):
            out.update(c for c in extra if isinstance(c, str))
    return out


def unmarked_label_changes(start: str, end: str = "HEAD", root: Path = ROOT) -> list[str]:
    """Commits in ``start..end`` that change a rule and an answer naming it, unmarked."""
    out = []
    for commit in _git("rev-list", "--no-merges", f"{start}..{end}", root=root).split():
        files = _git(
            "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", commit, root=root
        ).split()
        rules = [f for f in files if f.startswith("rules/") and f.endswith(".yaml")]
        answers = [f for f in files if f.startswith(ANSWER_DIRS) and f.endswith("/expected.yaml")]
        if not rules or not answers:
            continue
        changed = _rule_ids(commit, rules, root)
        hit = sorted(a for a in answers if _named_rules(commit, a, root) & changed)
        if hit and not TRAILER.search(_git("log", "-1", "--format=%B", commit, root=root)):
            subject = _git("log", "-1", "--format=%h %s", commit, root=root).strip()
            out.append(f"{subject} (changes {', '.join(hit[:3])})")
    return out


def test_rule_and_answer_changes_say_so() -> None:
    _history_or_skip()
    assert unmarked_label_changes(START) == [], (
        "a commit changed a rule and the expected.yaml that scores it without a"
        " 'Label-change: <reason>' trailer in its message"
    )


def _commit(repo: Path, message: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-qm", message],
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
        },
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_check_catches_an_unmarked_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    rule = "rules/diagnose/demo.yaml"
    answer = "tests/cases/demo/expected.yaml"
    other = "tests/cases/other/expected.yaml"
    _commit(
        repo,
        "start",
        {
            rule: "id: demo\npriority: 1\n",
            answer: "cause: demo\n",
            other: "cause: something-else\n",
        },
    )
    start = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # a rule change alone, and a rule change with an unrelated answer, are fine
    _commit(repo, "tune demo", {rule: "id: demo\npriority: 2\n"})
    _commit(
        repo,
        "tune demo again",
        {rule: "id: demo\npriority: 3\n", other: "cause: something-else\nwhy: x\n"},
    )
    assert unmarked_label_changes(start, root=repo) == []
    # the rule and the answer that names it, in one commit, without a trailer
    _commit(
        repo,
        "move the goalposts",
        {rule: "id: demo\npriority: 4\n", answer: "cause: demo\nsub_domain: hardware\n"},
    )
    (found,) = unmarked_label_changes(start, root=repo)
    assert "move the goalposts" in found and "tests/cases/demo/expected.yaml" in found
    # the same, said in the message
    _commit(
        repo,
        "relabel\n\nLabel-change: the answer was wrong, see the kernel log",
        {rule: "id: demo\npriority: 5\n", answer: "cause: demo\nsub_domain: application\n"},
    )
    assert len(unmarked_label_changes(start, root=repo)) == 1
