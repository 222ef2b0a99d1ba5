"""How a fault spreads through the job's output: Python tracebacks, what surviving ranks print
after losing a peer (CHAINS.md §7), NCCL watchdog timeouts and dump signals (§9), and the
teardown by the launcher (torchrun or srun) and Slurm.

In big jobs every rank of every node would print its own copy of a peer error; only a
bounded sample of peer nodes (``Scenario.peer_sample``) prints the full per-rank cascade.
"""

from __future__ import annotations

from collections.abc import Iterable

from attribution.sim.state import Node, Sim


def traceback_lines(frames: list[tuple[str, int, str, str]], last: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(last)
    return lines


_TRAIN_FRAMES = [
    ("/home/{user}/run/train.py", 412, "<module>", "main(cfg)"),
    ("/home/{user}/run/train.py", 377, "main", "loss = train_step(model, batch, optimizer)"),
]


def train_frames(sim: Sim, *extra: tuple[str, int, str, str]) -> list[tuple[str, int, str, str]]:
    base = [(p.format(user=sim.sc.user), ln, fn, code) for p, ln, fn, code in _TRAIN_FRAMES]
    return base + list(extra)


def peer_remote_error(sim: Sim, rank: int, t: float, peer: Node, how: str) -> None:
    """What a surviving rank prints after losing ``peer`` (chain 7 / chain 1 peers)."""
    rng = sim.rng
    port = rng.randrange(30000, 60000)
    me = sim.node_of(rank)
    if how == "closed":
        sim.nccl(
            rank,
            t,
            "WARN",
            f"Net : Connection closed by remote peer {peer.host_in_log}<{port}>",
            tid_off=377,
            src="misc/socket.cc:538",
        )
        sim.nccl(
            rank,
            t + 0.01,
            "WARN",
            f"[Proxy Service {rank}] Failed to execute operation "
            f"Connect from rank {rank}, retcode 6",
            tid_off=378,
            src="proxy.cc:1119",
        )
        last = f"socketProgress: Connection closed by remote peer {peer.host_in_log}<{port}>"
    elif how == "ib12":
        sim.nccl(
            rank,
            t,
            "WARN",
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=12 opcode=0 "
            f"len=0 vendor err 129 (Recv) localGid ::ffff:{me.ip} remoteGids::ffff:{peer.ip}",
            tid_off=398,
            src="transport/net_ib.cc:1696",
        )
        last = (
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=12 opcode=0 len=0 "
            "vendor err 129 (Recv)"
        )
    else:  # ib5: flush after the queue pair went to error
        sim.nccl(
            rank,
            t,
            "WARN",
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=5 opcode=1 "
            f"len=0 vendor err 249 (Send) localGid ::ffff:{me.ip} remoteGids::ffff:{peer.ip}",
            tid_off=398,
            src="transport/net_ib.cc:1696",
        )
        last = (
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=5 opcode=1 len=0 "
            "vendor err 249 (Send)"
        )
    src = (
        "ProcessGroupNCCL.cpp:1595" if sim.sc.torch_style == "new" else "ProcessGroupNCCL.cpp:1275"
    )
    tag = (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        if sim.sc.torch_style == "new"
        else f"[Rank {rank}]"
    )
    sim.c10(
        rank,
        t + 0.2,
        "E",
        src,
        f"{tag} Process group watchdog thread terminated with exception: NCCL error: remote "
        f"process exited or there was a network error, NCCL version {sim.nccl_version}",
    )
    sim.rank_block(
        rank,
        t + 0.2,
        [
            "ncclRemoteError: A call failed possibly due to a network error or a remote "
            "process exiting prematurely.",
            "Last error:",
            last,
        ],
    )
    sim.out(
        t + 0.3,
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        task=sim.task(rank),
    )


def watchdog(
    sim: Sim, rank: int, t: float, seq: int, enqueued: int, *, op: str = "ALLREDUCE"
) -> None:
    """The watchdog lines of one rank whose collective ``seq`` timed out (chain 9)."""
    numel = sim.rng.choice([1, 262144000, 466119168, 131072])
    ms = sim.sc.pg_timeout * 1000
    ran = ms + sim.rng.randrange(20, 900)
    new = sim.sc.torch_style == "new"
    sim.c10(
        rank,
        t,
        "E",
        "ProcessGroupNCCL.cpp:616" if new else "ProcessGroupNCCL.cpp:563",
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={ms}) ran for {ran} "
        "milliseconds before timing out.",
    )
    if new:
        sim.c10(
            rank,
            t + 0.05,
            "E",
            "ProcessGroupNCCL.cpp:1785",
            f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or "
            f"timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: "
            f"{enqueued}, last completed NCCL work: {seq - 1}.",
        )
    else:
        sim.c10(
            rank,
            t + 0.05,
            "E",
            "ProcessGroupNCCL.cpp:1709",
            f"[Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, "
            f"last completed NCCL work: {seq - 1}.",
        )
    sim.c10(
        rank,
        t + 0.06,
        "E",
        "ProcessGroupNCCL.cpp:630" if new else "ProcessGroupNCCL.cpp:577",
        f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
        "data.",
    )
    sim.c10(
        rank,
        t + 0.07,
        "E",
        "ProcessGroupNCCL.cpp:636" if new else "ProcessGroupNCCL.cpp:583",
        f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
    )


def dump_signal(sim: Sim, rank: int, t: float, src_rank: int, enqueued: int) -> None:
    """A rank that never issued the collective receives the dump signal (chain 9 straggler)."""
    if sim.sc.torch_style != "new":
        return
    sim.c10(
        rank,
        t,
        "E",
        "ProcessGroupNCCL.cpp:1772",
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Received a dump signal due to a "
        f"collective timeout from  rank {src_rank} and we will try our best to dump the debug "
        f"info. Last enqueued NCCL work: {enqueued}, last completed NCCL work: {enqueued}.This "
        "is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
        "across ranks, the order of collectives is not same for all ranks or the scheduled "
        "collective, for some reason, didn't run. Additionally, this can be caused by GIL "
        "deadlock or other reasons such as network errors or bugs in the communications "
        "library (e.g. NCCL), etc. ",
    )


def straggler_cascade(
    sim: Sim, t: float, stuck: list[int], seq: int
) -> tuple[float, dict[int, int]]:
    """Everyone but ``stuck`` enqueued ``seq``; the watchdogs fire (chain 9)."""
    rng = sim.rng
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    stuck_nodes = {sim.node_of(r).index for r in stuck}
    shown = [sim.nodes[i] for i in sorted(stuck_nodes)] + sim.sample_peers(
        [sim.nodes[i] for i in stuck_nodes]
    )
    reporter = None
    for node in shown:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            if r in stuck:
                continue
            watchdog(sim, r, tw + rng.uniform(0, 2), seq, seq)
            failed[r] = -6
            reporter = r if reporter is None else reporter
    for r in stuck:
        dump_signal(sim, r, tw + 2.5, reporter if reporter is not None else 0, seq - 1)
        failed[r] = -6
    return tw + 3, failed


_TORCHRUN_TRACEBACK = traceback_lines(
    [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py",
            892,
            "main",
            "run(args)",
        ),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py",
            263,
            "launch_agent",
            "raise ChildFailedError(",
        ),
    ],
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
)


_SIGNALS = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS"}

_SRUN_SIGNALS = {
    -6: "Aborted",
    -9: "Killed",
    -11: "Segmentation fault",
    -15: "Terminated",
    -7: "Bus error",
}


def teardown(
    sim: Sim,
    t: float,
    failed: dict[int, int],
    *,
    first_node: Node | None = None,
    killed_agents: Iterable[Node] = (),
) -> float:
    """Launcher and Slurm teardown after ranks ended.

    ``failed`` maps rank -> exit code (negative = killed by that signal) for the
    ranks that ended on their own; every other rank is stopped by the launcher.
    ``killed_agents``: nodes whose whole task (launcher included) was killed, so
    they print nothing and srun reports the task as killed. Returns the time the
    job ended.
    """
    killed = {n.index for n in killed_agents}
    rng = sim.rng
    sc = sim.sc
    by_node: dict[int, dict[int, int]] = {}
    for rank, code in failed.items():
        by_node.setdefault(sim.node_of(rank).index, {})[rank] = code
    order = sorted(by_node, key=lambda i: (sim.nodes[i] is not first_node, i))
    sample = set(order[: sc.peer_sample]) | {0}
    t_end = t + rng.uniform(3, 12)
    if sc.launcher == "torchrun":
        for i in order:
            if i not in sample:
                continue
            node = sim.nodes[i]
            codes = by_node[i]
            ft = t + rng.uniform(0.5, 3)
            if i in killed:
                sim.out(ft, f"srun: error: {node.name}: task {node.index}: Killed")
                continue
            first_rank = next(iter(codes))  # the first rank that failed on this node
            code = codes[first_rank]
            for r in sim.ranks_of(node):
                if r not in codes:
                    sim.agent_log(
                        node,
                        ft,
                        "WARNING",
                        "elastic.multiprocessing.api",
                        f"Sending process {sim.pid(r)} closing signal SIGTERM",
                    )
            sim.agent_log(
                node,
                ft + 0.5,
                "ERROR",
                "elastic.multiprocessing.api",
                f"failed (exitcode: {code}) local_rank: {first_rank % sim.rpn} (pid: "
                f"{sim.pid(first_rank)}) of binary: /usr/bin/python3",
            )
            trace = (
                f"Signal {-code} ({_SIGNALS.get(code, 'SIG?')}) received by PID "
                f"{sim.pid(first_rank)}"
                if code < 0
                else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
            )
            block = [
                *_TORCHRUN_TRACEBACK,
                "============================================================",
                "train.py FAILED",
                "------------------------------------------------------------",
                "Failures:",
                "  <NO_OTHER_FAILURES>",
                "------------------------------------------------------------",
                "Root Cause (first observed failure):",
                "[0]:",
                f"  time      : {sim.local(ft, node):%Y-%m-%d_%H:%M:%S}",
                f"  host      : {node.host_in_log}",
                f"  rank      : {first_rank} (local_rank: {first_rank % sim.rpn})",
                f"  exitcode  : {code} (pid: {sim.pid(first_rank)})",
                "  error_file: <N/A>",
                f"  traceback : {trace}",
                "============================================================",
            ]
            sim.block(ft + 0.6, block, task=node.index)
            sim.out(ft + 1, f"srun: error: {node.name}: task {node.index}: Exited with exit code 1")
        # the other agents are stopped by srun
        for node in sim.nodes:
            if node.index in by_node or node.index not in sample | set(range(4)):
                continue
            st = t + rng.uniform(1, 4)
            sim.agent_log(
                node,
                st,
                "WARNING",
                "elastic.agent.server.api",
                "Received 15 death signal, shutting down workers",
            )
    else:
        for i in order:
            if i not in sample:
                continue
            node = sim.nodes[i]
            for rank, code in sorted(by_node[i].items()):
                what = (
                    f"Exited with exit code {code}"
                    if code >= 0
                    else _SRUN_SIGNALS.get(code, "Terminated")
                )
                sim.out(t + 0.5, f"srun: error: {node.name}: task {rank}: {what}")
    step = f"{sim.job_id}.0"
    sim.out(t + 1.2, f"srun: Terminating StepId={step}")
    for node in sim.nodes[: min(len(sim.nodes), sc.peer_sample)]:
        if node.index in by_node:
            continue
        sim.out(
            t + 1.5,
            f"slurmstepd: error: *** STEP {step} ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 1.5, node)} ***",
        )
    sim.out(t + 2.0, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    return t_end


def fail_job(
    sim: Sim,
    t_fail: float,
    origin: list[int],
    code: int,
    how: str,
    *,
    first_node: Node,
    killed_agents: Iterable[Node] = (),
) -> float:
    """Peers lose the origin ranks (chain 7 peer pattern), then teardown. Returns end time."""
    rng = sim.rng
    origin_node = sim.node_of(origin[0])
    failed: dict[int, int] = dict.fromkeys(origin, code)
    for peer in sim.sample_peers([origin_node]):
        ranks = list(sim.ranks_of(peer))
        for r in ranks[: 2 if len(sim.nodes) > 64 else len(ranks)]:
            tt = t_fail + rng.uniform(0.5, 25)
            peer_remote_error(
                sim, r, tt, origin_node, how if how != "ib" else rng.choice(["ib12", "ib5"])
            )
            failed[r] = -6
    # other local ranks of the origin node are aborted too
    for r in sim.ranks_of(origin_node):
        failed.setdefault(r, -6)
    return teardown(sim, t_fail + 30, failed, first_node=first_node, killed_agents=killed_agents)
