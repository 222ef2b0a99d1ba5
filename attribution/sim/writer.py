"""Writing a bundle (its files and expected.yaml) to disk."""

from __future__ import annotations

from pathlib import Path

from attribution.sim.generate import SimBundle, generate
from attribution.sim.scenario import Scenario


def write_bundle(scenario: Scenario | SimBundle, outdir: Path | str) -> Path:
    """Generate (if needed) and write one bundle into ``outdir`` (created; must be empty
    or absent). Returns the bundle directory."""
    bundle = scenario if isinstance(scenario, SimBundle) else generate(scenario)
    root = Path(outdir)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root}: not empty")
    for rel, content in bundle.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root
