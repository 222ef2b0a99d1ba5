"""The verdict names the failure domain its nodes share (Slurm's topology.conf, tree or block,
and the site's group map): in the bundle, from the worker's configuration, in the JSON and the
view."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.console import Console

from attribution.bundle import diagnose_bundle
from attribution.config import Config
from attribution.errors import BundleError
from attribution.model import Placement, Responsible, verdict_to_dict
from attribution.render import placement_text, verdict_view
from attribution.rules.compiled import RuleSet
from attribution.topology import Topology, parse_topology, place
from attribution.verdictjson import verdict_from_dict
from attribution.worker import _site_topology

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "topology"
LEAF_CASE = HERE / "cases" / "blind3-ib-leaf-switch-reboot-eight-nodes"

# dgx[001-064] under eight leaf switches of eight nodes, two spines, one core
TREE = "".join(
    f"SwitchName=leaf{i:02d} Nodes=dgx[{8 * i - 7:03d}-{8 * i:03d}]\n" for i in range(1, 9)
) + (
    "SwitchName=spine1 Switches=leaf[01-04]\nSwitchName=spine2 Switches=leaf[05-08]\n"
    "SwitchName=core Switches=spine[1-2]\n"
)


def test_real_world_tree_file() -> None:
    topo = parse_topology((FIXTURES / "ib-fat-tree.conf").read_text(), "ib-fat-tree.conf")
    leaves = {g.name: len(g.nodes) for g in topo.groups if g.leaf}
    assert leaves == {"ibsw01": 8, "ibsw02": 8, "ibsw03": 8, "ibsw04": 8}
    pair = topo.smallest_common(["dgx-a3-02", "dgx-a3-07"])
    assert pair is not None and (pair.name, pair.label) == ("ibsw03", "leaf switch ibsw03")
    spread = topo.smallest_common(["dgx-a3-02", "dgx-a4-07"])
    assert spread is not None and (spread.name, spread.leaf) == ("ibspine2", False)
    assert topo.smallest_common(["dgx-a1-01", "dgx-a4-01"]) is None  # the core says nothing


def test_real_world_block_file() -> None:
    topo = parse_topology((FIXTURES / "nvl72-block.conf").read_text(), "nvl72-block.conf")
    assert [(g.kind, g.name, len(g.nodes)) for g in topo.groups] == [
        ("block", "nvl-rack01", 18),
        ("block", "nvl-rack02", 18),
        ("block", "nvl-rack03", 18),
    ]
    found = place(topo, ["gb-r02-n04", "gb-r02-n11"], "responsible")
    assert found == Placement(
        "block", "nvl-rack02", "block nvl-rack02", "gb-r02-n[04,11]", "responsible", 18
    )
    assert placement_text(found) == (
        "gb-r02-n[04,11] (responsible) share block nvl-rack02 (18 nodes)"
    )


def with_topology(tmp_path: Path, text: str | None) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(LEAF_CASE, root)
    if text is not None:
        (root / "topology.conf").write_text(text)
    return root


def test_ports_down_under_one_leaf_switch_name_it(tmp_path: Path, ruleset: RuleSet) -> None:
    _, verdict = diagnose_bundle(with_topology(tmp_path, TREE), ruleset)
    assert verdict.cause is not None and verdict.cause.id == "fabric-ports-down-together"
    assert verdict.placement == Placement(
        "switch", "leaf05", "leaf switch leaf05", "dgx[033-040]", "root", 8
    )
    again = verdict_from_dict(verdict_to_dict(verdict))
    assert again.placement == verdict.placement
    console = Console(record=True, width=200)
    console.print(verdict_view(verdict))
    assert "Where: dgx[033-040] (root) share leaf switch leaf05 (8 nodes)" in console.export_text()


def test_without_a_topology_the_verdict_says_nothing_of_it(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    _, verdict = diagnose_bundle(with_topology(tmp_path, None), ruleset)
    assert verdict.placement is None
    assert verdict_to_dict(verdict)["placement"] is None


def test_a_broken_topology_file_is_one_line_naming_it(tmp_path: Path, ruleset: RuleSet) -> None:
    root = with_topology(tmp_path, "SwitchName=leaf1 Nodes=dgx[001-\n")
    with pytest.raises(BundleError) as err:
        diagnose_bundle(root, ruleset)
    assert "topology.conf:1" in str(err.value)
    assert "\n" not in str(err.value)


def test_one_node_is_placed_under_its_smallest_domain() -> None:
    topo = parse_topology(TREE)
    found = place(topo, ["dgx012"], "responsible")
    assert found is not None and placement_text(found) == (
        "dgx012 (responsible) is under leaf switch leaf02 (8 nodes)"
    )
    assert place(Topology(), ["dgx012"], "responsible") is None
    assert Responsible("dgx012").node == "dgx012"


def test_the_worker_reads_the_sites_topology(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(TREE)
    found = _site_topology(Config.model_validate({"fleet": {"topology": str(conf)}}))
    assert found is not None and len(found.groups) == 11
    assert (
        _site_topology(Config.model_validate({"fleet": {"topology": str(tmp_path / "no")}})) is None
    )
    conf.write_text("SwitchName=x Switches=nothing-here\n")
    assert _site_topology(Config.model_validate({"fleet": {"topology": str(conf)}})) is None
