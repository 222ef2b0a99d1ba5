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


def test_a_hostile_node_list_is_refused_before_it_is_built() -> None:
    """'n[0000000-9999999]' would cost ClusterShell gigabytes; it is refused up front."""
    import resource

    import pytest

    from attribution.hostlist import MAX_NODES, HostlistError, expand

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(HostlistError, match="more than"):
        expand("n[0000000-9999999]")
    with pytest.raises(HostlistError, match="more than"):
        expand("a[1-1000]b[1-1000]")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    assert len(expand(f"n[1-{MAX_NODES}]")) == MAX_NODES
