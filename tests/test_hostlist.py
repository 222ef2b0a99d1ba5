"""Slurm host lists through ClusterShell."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attribution.hostlist import HostlistError, compress, expand, short_name


def test_expand_and_compress() -> None:
    assert expand("gpu[001-003],login1") == ("gpu001", "gpu002", "gpu003", "login1")
    assert expand(["a1", "a2", "a1"]) == ("a1", "a2")
    assert expand(None) == () and expand("None assigned") == ()
    assert compress(["gpu002", "gpu001", "gpu003"]) == "gpu[001-003]"
    with pytest.raises(HostlistError):
        expand("gpu[01-")


def test_short_names() -> None:
    assert short_name("node017.cluster.local") == "node017"
    assert short_name("node-3<34567>") == "node-3"
    assert short_name("10.0.0.7") == "10.0.0.7"


@given(st.sets(st.integers(min_value=0, max_value=2000), min_size=1, max_size=60))
def test_roundtrip(numbers: set[int]) -> None:
    names = [f"n{i:04d}" for i in sorted(numbers)]
    assert sorted(expand(compress(names))) == names


def test_a_hostile_node_list_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """'n[0000000-9999999]' would cost ClusterShell gigabytes; it is refused up front, before
    ClusterShell sees it. The memory it costs is measured with tracemalloc (this call's own
    peak), not with the process's lifetime peak RSS, which an earlier test may have raised
    above anything this call could add."""
    import tracemalloc

    import attribution.hostlist as hostlist

    hostile = ["n[0000000-9999999]", "a[1-1000]b[1-1000]"]
    built: list[str] = []

    class Watched(hostlist.NodeSet):  # type: ignore[misc]
        def __init__(self, pattern: str, *args: object, **kwargs: object) -> None:
            built.append(pattern)
            if pattern in hostile:  # the guard is gone: fail before ClusterShell builds millions
                raise AssertionError(f"ClusterShell was asked to build {pattern!r}")
            super().__init__(pattern, *args, **kwargs)

    monkeypatch.setattr(hostlist, "NodeSet", Watched)
    tracemalloc.start()
    try:
        for text in hostile:
            with pytest.raises(HostlistError, match="more than"):
                hostlist.expand(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert built == []
    assert peak < 1_000_000, f"{peak:,} bytes"
    assert len(hostlist.expand(f"n[1-{hostlist.MAX_NODES}]")) == hostlist.MAX_NODES
    assert built == [f"n[1-{hostlist.MAX_NODES}]"]
