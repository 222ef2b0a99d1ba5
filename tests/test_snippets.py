"""Short real-world error snippets, as they show up in a failed job's output, each with the
sub_domain an operator would give it. One family per line: the whole kind, not one sample."""

from __future__ import annotations

import pytest

from attribution.analyze import analyze
from attribution.jobrecord import job_from_dict
from attribution.model import LogLine, SourceRef, Stream
from attribution.rules.compiled import RuleSet
from attribution.sources.prefix import parse_prefix

APP, HW, SW, INFRA, AMB, UNATTR = (
    "application",
    "hardware",
    "system_software",
    "infrastructure",
    "ambiguous",
    "unattributed",
)

SNIPPETS: list[tuple[str, str, str]] = [
    (
        "gpu-oom-old",
        APP,
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity; 77.12 GiB already allocated; 3.19 MiB free; 78.2 GiB reserved in total by PyTorch)",
    ),
    (
        "gpu-oom-nccl",
        APP,
        "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'",
    ),
    (
        "tensor-device",
        APP,
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    ),
    ("not-compiled", APP, "AssertionError: Torch not compiled with CUDA enabled"),
    (
        "key-error",
        APP,
        "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nKeyError: 'input_ids'",
    ),
    (
        "cudnn",
        APP,
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    ),
    ("misaligned", APP, "RuntimeError: CUDA error: misaligned address"),
    ("device-ordinal", APP, "RuntimeError: CUDA error: invalid device ordinal"),
    (
        "no-kernel-image",
        APP,
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ),
    ("illegal-address", APP, "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (
        "assert",
        APP,
        '../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [7,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
    ),
    ("nan", APP, "[2025-01-01 00:00:00,000] step 1200 loss: nan"),
    (
        "loss-scale",
        APP,
        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.",
    ),
    ("module", APP, "ModuleNotFoundError: No module named 'deepspeed'"),
    (
        "shared-lib",
        APP,
        "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory",
    ),
    (
        "undefined-symbol",
        APP,
        "ImportError: /env/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
    ),
    (
        "file",
        APP,
        "FileNotFoundError: [Errno 2] No such file or directory: 'configs/llama-7b.yaml'",
    ),
    ("permission", APP, "PermissionError: [Errno 13] Permission denied: '/data/shared/out'"),
    (
        "segfault",
        APP,
        "/var/spool/slurmd/job42/slurm_script: line 12: 1234 Segmentation fault      (core dumped) python train.py",
    ),
    (
        "port-in-use",
        APP,
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    ),
    (
        "host-oom-numpy",
        APP,
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 64.0 GiB for an array with shape (8589934592,) and data type float64",
    ),
    (
        "cgroup-oom",
        APP,
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.",
    ),
    (
        "dataloader-killed",
        APP,
        "RuntimeError: DataLoader worker (pid 4153) is killed by signal: Killed.",
    ),
    ("duplicate-gpu", APP, "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000"),
    ("exec", APP, "slurmstepd: error: execve(): torchrun: No such file or directory"),
    (
        "gres",
        APP,
        "srun: error: Unable to create step for job 1234: Invalid generic resource (gres) specification",
    ),
    ("quota", APP, "OSError: [Errno 122] Disk quota exceeded: '/home/u/.cache/huggingface/hub/x'"),
    (
        "time-limit",
        APP,
        "slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2025-01-01T16:30:21 DUE TO TIME LIMIT ***",
    ),
    (
        "xid79",
        HW,
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ),
    (
        "gpu-lost-smi",
        HW,
        "Unable to determine the device handle for GPU 0000:DB:00.0: GPU is lost.  Reboot the system to recover this GPU",
    ),
    ("ecc-cuda", HW, "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    (
        "nvlink-cuda",
        HW,
        "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
    ),
    (
        "xid48",
        HW,
        "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
    ),
    (
        "xid74",
        HW,
        "NVRM: Xid (PCI:0000:c1:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1",
    ),
    (
        "sxid",
        HW,
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack timeout error (First)",
    ),
    ("rminit", HW, "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)"),
    (
        "ib-catastrophic",
        HW,
        "node1:12:34 [0] NCCL WARN NET/IB : Got async event : local catastrophic error",
    ),
    (
        "edac-ue",
        HW,
        "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#2_DIMM#0 (channel:2 slot:0)",
    ),
    (
        "xid119",
        SW,
        "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=python, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC).",
    ),
    (
        "fm-802",
        SW,
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized",
    ),
    ("driver-mismatch", SW, "Failed to initialize NVML: Driver/library version mismatch"),
    (
        "driver-old",
        SW,
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    ),
    (
        "no-driver",
        SW,
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver.",
    ),
    ("shm", SW, "Error while creating shared memory segment /dev/shm/nccl-Ab12Cd (size 9637888)"),
    (
        "dataloader-shm",
        SW,
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    ),
    (
        "nccl-topology",
        SW,
        "Failed to find reverse path from remNode 0/5f000 nlinks 4 to node 0/cb000",
    ),
    (
        "peer-access",
        SW,
        "node1:1:2 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported between these two devices'",
    ),
    (
        "memlock",
        SW,
        "node1:1:2 [0] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    ),
    (
        "nvls",
        SW,
        "node23:12098:12141 [2] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'",
    ),
    ("busy", SW, "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"),
    ("xid45-solo", SW, "NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python, Ch 00000008"),
    (
        "lustre",
        INFRA,
        "LustreError: 167-0: fs1-OST0003-osc-ffff8810361c6000: This client was evicted by fs1-OST0003; in progress operations using this service will fail.",
    ),
    ("nfs", INFRA, "nfs: server home01 not responding, still trying"),
    ("eio", INFRA, "OSError: [Errno 5] Input/output error: '/lustre/data/shard.tar'"),
    ("enospc", INFRA, "OSError: [Errno 28] No space left on device"),
    (
        "ib-retry",
        INFRA,
        "node1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.1.2.3<53124> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    ),
    (
        "ib-port",
        INFRA,
        "node1:12:34 [0] NCCL WARN NET/IB : mlx5_3:1 Got non-fatal async event: port error(9)",
    ),
    (
        "preempt",
        INFRA,
        "slurmstepd: error: *** JOB 1234 ON node-a01 CANCELLED AT 2025-01-01T10:00:00 DUE TO PREEMPTION ***",
    ),
    (
        "launch",
        INFRA,
        "srun: error: Task launch for StepId=1234.0 failed on node node1: Socket timed out on send/recv operation",
    ),
    (
        # the snippets' job has one node: ranks missing there were never started
        # (rendezvous-ranks-never-started); on several nodes it stays ambiguous
        "rendezvous",
        APP,
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.",
    ),
    (
        "watchdog",
        AMB,
        "[rank0]:[E0101 00:00:00.000000000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5821, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
    ),
    ("cuda-unknown", AMB, "RuntimeError: CUDA error: unknown error"),
    (
        "remote-only",
        UNATTR,
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    ),
    ("nothing", UNATTR, "Epoch 3: 100%|##########| 1000/1000 [01:02<00:00, 16.0it/s]"),
]


@pytest.mark.parametrize(("name", "expected", "text"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_snippet(ruleset: RuleSet, name: str, expected: str, text: str) -> None:
    job = job_from_dict({"job_id": "1", "state": "FAILED", "exit_code": "1:0", "nodes": "node1"})
    stream = (
        Stream.KERNEL
        if any(k in text for k in ("NVRM", "SXid", "EDAC", "LustreError", "nfs: server"))
        else Stream.JOB_STDERR
    )
    lines = []
    for i, raw in enumerate(text.split("\n"), 1):
        p = parse_prefix(raw)
        lines.append(
            LogLine(
                stream,
                "node1" if stream is Stream.KERNEL else None,
                p.text,
                raw,
                SourceRef("x", i),
                p.time,
                p.host,
                p.rank,
                p.pid,
                p.device,
                p.task,
            )
        )
    verdict = analyze(job, lines, ruleset)
    assert verdict.sub_domain.value == expected, f"{name}: {verdict.cause} {verdict.summary}"
