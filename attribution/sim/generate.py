"""One scenario -> one bundle in memory: play the chain, decide which responsible nodes
trusted evidence backs, add the background, then render every file of the bundle (node logs,
job output, slurmctld.log, job.json and expected.yaml).

Every random choice comes from one ``random.Random(scenario.seed)``, so a scenario always
produces byte-identical files.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from attribution import hostlist
from attribution.sim.background import add_noise, add_out_of_window
from attribution.sim.families import CHAIN_FUNCS
from attribution.sim.formats import format_line
from attribution.sim.render import join_lines, render_fm, render_kernel, render_syslog
from attribution.sim.scenario import Scenario
from attribution.sim.state import Expected, Node, Result, Sim


@dataclass(slots=True)
class SimBundle:
    """A generated bundle in memory: ``files`` maps a path relative to the
    bundle root to its content (``bytes`` for gzip'd files)."""

    name: str
    scenario: Scenario
    files: dict[str, str | bytes]
    expected: Expected
    job: dict[str, Any]


def _trusted_evidence(sim: Sim, missing: Callable[[str, Node], bool]) -> set[str]:
    """Nodes the chain wrote kernel or Fabric Manager lines for (in files the bundle keeps), or
    that its slurmctld lines name: call before the noise is added."""
    out = {
        node.name
        for node in sim.nodes
        if (node.kernel_lines and not missing("kernel", node))
        or (node.fm_lines and sim.has_fm and not missing("fabricmanager", node))
    }
    for _t, _s, msg in sim.ctld_lines:
        out.update(n for n in sim.by_name if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", msg))
    return out


def _split_suspects(result: Result, written: set[str]) -> None:
    """Responsible nodes that no trusted source in the bundle backs become suspects."""
    exp = result.expected
    trusted = result.confirmed if result.confirmed is not None else written
    exp.suspect_nodes = [n for n in exp.responsible_nodes if n not in trusted]
    exp.responsible_nodes = [n for n in exp.responsible_nodes if n in trusted]


def generate(scenario: Scenario) -> SimBundle:
    """Simulate ``scenario`` into an in-memory bundle (deterministic for its seed).

    Raises:
        ValueError: when the scenario is inconsistent (unknown node, option, or
            a chain that needs more nodes or an NVSwitch platform).
    """
    sim = Sim(scenario)
    result = CHAIN_FUNCS[scenario.fault.chain](sim)
    end = result.end
    responsible = set(result.expected.responsible_nodes)

    def missing(stream: str, node: Node) -> bool:
        names = scenario.missing.get(stream, [])  # type: ignore[call-overload]
        return "*" in names or node.name in names or (stream, node.name) in sim.forced_missing

    _split_suspects(result, _trusted_evidence(sim, missing))
    add_noise(sim, end)
    for spec in scenario.out_of_window:
        add_out_of_window(sim, spec, end, responsible)

    files: dict[str, str | bytes] = {}
    rng = sim.rng

    for stream, name in result.needs:
        if missing(stream, sim.by_name[name]):
            raise ValueError(
                f"scenario {scenario.name}: the {stream} log of {name} carries the root evidence "
                f"of chain {scenario.fault.chain}; removing it changes the honest answer (use "
                "chain peer_lost_no_evidence for a failure whose evidence is missing)"
            )

    for node in sim.nodes:
        entries = [
            ("kernel", node.kfile, render_kernel),
            ("syslog", node.sfile, render_syslog),
        ]
        if sim.has_fm:
            entries.append(("fabricmanager", "fabricmanager.log", render_fm))
        for stream, fname, render in entries:
            if missing(stream, node):
                continue
            text = join_lines(render(sim, node))
            path = f"nodes/{node.name}/{fname}"
            if scenario.compress and rng.random() < scenario.compress:
                files[path + ".gz"] = gzip.compress(text.encode(), compresslevel=1, mtime=0)
            else:
                files[path] = text
    job_lines = sorted(sim.job_lines)
    if scenario.split_output:
        files["job/stdout.log"] = join_lines([x[2] for x in job_lines if not x[3]])
        files["job/stderr.log"] = join_lines([x[2] for x in job_lines if x[3]])
    else:
        files["job/stdout.log"] = join_lines([x[2] for x in job_lines])
    if sim.ctld_lines or scenario.slurmctld_log:
        sim.ctld(
            sim.t0 - 2,
            f"sched: Allocate JobId={sim.job_id} "
            f"NodeList={hostlist.compress(n.name for n in sim.nodes)} "
            f"#CPUs={len(sim.nodes) * 96} Partition=gpu",
        )
        sim.ctld(
            end,
            f"_job_complete: JobId={sim.job_id} "
            + (
                "WEXITSTATUS " + result.exit_code.split(":")[0]
                if result.state == "FAILED"
                else "done"
            ),
        )
        ctld = []
        for t, _s, msg in sorted(sim.ctld_lines):
            ctld.append(format_line("slurmctld", sim.local(t), msg))
        files["slurmctld.log"] = join_lines(ctld)

    start_local = datetime.fromtimestamp(sim.t0, sim.tz)
    end_local = datetime.fromtimestamp(end, sim.tz)
    job: dict[str, Any] = {
        "cluster": "sim",
        "job_id": str(sim.job_id),
        "name": "pretrain",
        "user": scenario.user,
        "uid": scenario.uid,
        "partition": "gpu",
        "state": result.state,
        "exit_code": result.exit_code,
        "nodes": hostlist.compress(n.name for n in sim.nodes),
        "start": start_local.strftime("%Y-%m-%dT%H:%M:%S"),
        "end": end_local.strftime("%Y-%m-%dT%H:%M:%S"),
        "time_limit": scenario.time_limit // 60,
        "work_dir": f"/home/{scenario.user}/run",
        "std_out": f"/home/{scenario.user}/run/slurm-{sim.job_id}.out",
    }
    if scenario.timezone != "UTC":
        job["timezone"] = scenario.timezone
    raw_boots = {
        n.name: datetime.fromtimestamp(n.boot + n.skew, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for n in sim.nodes
        if n.kfmt == "raw"
    }
    if raw_boots:
        job["boot_times"] = raw_boots
    job.update(result.extra_job)
    files["job.json"] = json.dumps(job, indent=2) + "\n"
    expected = result.expected
    exp_doc = expected.to_dict()
    exp_doc["simulated"] = {
        "scenario": scenario.name,
        "chain": scenario.fault.chain,
        "seed": scenario.seed,
    }
    files["expected.yaml"] = yaml.safe_dump(exp_doc, sort_keys=False, width=100, allow_unicode=True)
    return SimBundle(scenario.name, scenario, files, expected, job)
