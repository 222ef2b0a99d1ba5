"""Every signature of the knowledge catalog is read by a shipped extractor.

``tests/fixtures/catalog-lines.yaml`` holds the 185 catalog signatures (NVIDIA XID/SXid, Fabric
Manager, NCCL, PyTorch/CUDA/torchrun, NeMo/Megatron, Slurm, kernel, NIC/IB/EFA, Lustre/NFS, DCGM)
with their example lines; each line must yield the events listed for it, parsed exactly like a real
log line of that stream (prefixes stripped, times read).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from attribution.model import Stream
from attribution.rules.compiled import RuleSet
from attribution.rules.examples import example_lines
from attribution.rules.extract import Extractor

from .conftest import FIXTURES

CATALOG: list[dict[str, Any]] = yaml.safe_load(
    (FIXTURES / "catalog-lines.yaml").read_text(encoding="utf-8")
)["signatures"]
FAMILIES = ("xid", "sxid", "fm", "nccl", "torch", "app", "slurm", "kernel", "mlx5", "fs", "dcgm")


def _events(ruleset: RuleSet, text: str, stream: Stream):  # type: ignore[no-untyped-def]
    lines = example_lines(text, stream)
    return Extractor(ruleset).extract(lines[0], lines[1:])


def test_the_fixture_holds_the_whole_catalog() -> None:
    ids = [s["id"] for s in CATALOG]
    assert len(ids) == len(set(ids)) == 185
    families = Counter(i.split(".")[0] for i in ids)
    assert all(families[f] for f in FAMILIES), families
    assert all(s["lines"] for s in CATALOG)


@pytest.mark.parametrize("signature", CATALOG, ids=[s["id"] for s in CATALOG])
def test_catalog_signature_is_extracted(ruleset: RuleSet, signature: dict[str, Any]) -> None:
    stream = Stream(signature["stream"])
    for item in signature["lines"]:
        events = _events(ruleset, item["line"], stream)
        if not events and stream is Stream.SYSLOG:  # syslog lines wrapping kernel messages
            events = _events(ruleset, item["line"], Stream.KERNEL)
        names = {e.name for e in events}
        assert set(item["events"]) <= names, f"{item['line'][:160]!r} gave {sorted(names)}"
        if "xid" in item:
            assert item["xid"] in {e.fields.get("code") for e in events if e.name == "gpu.xid"}
