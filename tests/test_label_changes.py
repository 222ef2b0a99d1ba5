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


# the keys of an expected.yaml that backtest scores (docs/bundles.md); `why` is prose
SCORED = (
    "terminal_state",
    "sub_domain",
    "acceptable_sub_domains",
    "responsible_nodes",
    "suspect_nodes",
    "cause",
    "acceptable_causes",
)


def _answer(rev: str, path: str, root: Path) -> dict[str, object] | None:
    """The scored part of an expected.yaml at a revision (None: not there then)."""
    try:
        text = _git("show", f"{rev}:{path}", root=root)
    except subprocess.CalledProcessError:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {"unreadable": text}
    if not isinstance(data, dict):
        return {"not a mapping": text}
    return {key: data.get(key) for key in SCORED}


def _changed_files(commit: str, root: Path) -> list[str]:
    """Paths a commit changed; for a merge, only what neither parent had (an evil merge)."""
    parents = _git("rev-list", "--parents", "-n", "1", commit, root=root).split()[1:]
    how = ["--cc"] if len(parents) > 1 else ["--root"]
    out = _git("diff-tree", *how, "-r", "--name-only", "-z", "--no-commit-id", commit, root=root)
    return [p for p in out.split("\0") if p]


def _says_why(message: str) -> bool:
    found = TRAILER.search(message)
    return found is not None and len(found.group(1).split()) >= 3


def unmarked_label_changes(start: str, end: str = "HEAD", root: Path = ROOT) -> list[str]:
    """Commits in ``start..end`` that change what an existing expected.yaml scores (its
    answer moved) without a ``Label-change:`` trailer of at least three words.

    This is stricter than "a rule and the answer naming it in one commit": the answer may be
    moved in the commit after the rule, or follow a change of an extractor or a table, and
    both are caught. An answer added with a new case is not a change."""
    out = []
    for commit in _git("rev-list", f"{start}..{end}", root=root).split():
        answers = [
            f
            for f in _changed_files(commit, root)
            if f.startswith(ANSWER_DIRS) and f.endswith("/expected.yaml")
        ]
        hit = []
        for path in answers:
            before = _answer(f"{commit}^", path, root)
            if before is not None and before != _answer(commit, path, root):
                hit.append(path)
        if hit and not _says_why(_git("log", "-1", "--format=%B", commit, root=root)):
            subject = _git("log", "-1", "--format=%h %s", commit, root=root).strip()
            out.append(f"{subject} (changes {', '.join(sorted(hit)[:3])})")
    return out


def test_no_answer_is_a_symlink() -> None:
    """backtest reads expected.yaml through a link too, and a commit that changes the link's
    target would not show as a change of the answer."""
    links = [
        str(p.relative_to(ROOT))
        for d in ANSWER_DIRS
        for p in (ROOT / d).rglob("expected.yaml")
        if p.is_symlink()
    ]
    assert links == []


def test_rule_and_answer_changes_say_so() -> None:
    _history_or_skip()
    assert unmarked_label_changes(START) == [], (
        "a commit changed what an expected.yaml scores without a"
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


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_ways_around_the_check_are_caught(tmp_path: Path) -> None:
    """Ways a breaker found around the first version of the check: the answer moved in a
    later commit than the rule, an odd case directory name, a trailer that says nothing, an
    evil merge. An answer added with a new case, and prose, need no trailer."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    odd = "tests/blind/round99/café case/expected.yaml"
    _commit(repo, "start", {odd: "cause: demo\n", "rules/extract/x.yaml": "id: x\n"})
    start = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    _commit(repo, "an extractor changes", {"rules/extract/x.yaml": "id: x\nv: 2\n"})
    _commit(repo, "prose only", {odd: "cause: demo\nwhy: because\n"})
    _commit(repo, "a new case", {"tests/cases/new/expected.yaml": "cause: demo\n"})
    assert unmarked_label_changes(start, root=repo) == []
    _commit(repo, "answer follows a commit later", {odd: "cause: other\nwhy: because\n"})
    (found,) = unmarked_label_changes(start, root=repo)
    assert "answer follows" in found and "café case" in found
    _commit(repo, "again\n\nLabel-change: .", {odd: "cause: third\n"})
    assert len(unmarked_label_changes(start, root=repo)) == 2  # "." is no reason
    # an evil merge: the merge itself moves an answer neither parent had
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "checkout", "-q", "-b", "side"], check=True)
    _commit(repo, "side work", {"notes.txt": "x\n"})
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    _commit(repo, "main work", {"other.txt": "y\n"})
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    subprocess.run([*git, "merge", "-q", "--no-commit", "side"], check=True, env=env)
    (repo / "tests/cases/new/expected.yaml").write_text("cause: moved-in-the-merge\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "merge side"], check=True, env=env)
    found = unmarked_label_changes(start, root=repo)
    assert any("merge side" in f and "tests/cases/new/expected.yaml" in f for f in found)
