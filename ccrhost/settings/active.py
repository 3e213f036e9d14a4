"""Active-check keys: the NCCL all-reduce gate, DCGM diagnostics,
nvbandwidth and the GEMM, whose results each node stores and every check judges."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from ccrhost.model.gemm import GemmPolicy


class ActiveSettings(BaseModel, defer_build=True):
    # NCCL all-reduce gate (model/allreduce.py, node/allreduce.py; docs/allreduce.md)
    verify_allreduce: bool = Field(
        False, description="Run nccl-tests' all_reduce_perf in the single-node modes of "
        "verify_allreduce_modes on each host (deploys/verify.py), store the results, and judge the stored "
        "results in `ccrhost check` and the prolog (which never run the test themselves).",
    )
    verify_allreduce_modes: tuple[Literal["nvlink", "loopback"], ...] = Field(
        ("nvlink", "loopback"), description="Single-node modes: nvlink (all GPUs in one process) and loopback "
        "(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: every byte through the NICs).",
    )
    verify_allreduce_binary: str = Field(
        "all_reduce_perf", pattern=r"^[A-Za-z0-9_.+@/-]{1,255}$",
        description="The all_reduce_perf command (a name on PATH or an absolute path, e.g. "
        "/usr/local/bin/all_reduce_perf in NGC PyTorch images).",
    )
    verify_allreduce_min_busbw: dict[Literal["nvlink", "loopback", "pair", "rack"],
                                     Annotated[float, Field(gt=0)]] | None = \
        Field(None, description="busbw (GB/s) below which a mode FAILS, overriding the published figure: the "
              "platform file's (docs/platforms.md), for pair else the node's NICs x 46 GB/s per 400G. rack: the "
              "rack-level all-reduce of `ccrhost slurm verify --rack-nvlink` (docs/rack.md). The platform's fleet "
              "figure applies as well.")
    verify_allreduce_retries: int = Field(
        2, ge=0, le=10, description="Reruns of a run below threshold; the first good run passes (wrong results "
        "and UNKNOWN are never rerun).",
    )
    verify_allreduce_timeout: int | None = Field(
        None, ge=10, le=7200, description="Seconds after which one run is killed (its whole process group) and "
        "counts as a hang (UNKNOWN). Unset: derived from the run's expected time at the mode's busbw figure "
        "(verify_allreduce_min_busbw or the built-in one): 60 s of start-up plus 3 x (2 x (5 warm-up + "
        "verify_allreduce_iters + 1 validation) all-reduces of verify_allreduce_max_bytes at that figure), "
        "at most 7200; 300 where no figure is known. A node that hangs in one mode is not run again in the "
        "later modes of the same run.",
    )
    verify_allreduce_max_bytes: str = Field(
        "16G", pattern=r"^[1-9][0-9]{0,11}[KMG]?$", description="The message size judged (-b and -e): one large "
        "size, as Azure's 16G; the busbw at the largest size is judged, never the average.",
    )
    verify_allreduce_iters: int = Field(
        20, ge=1, le=1000, description="Timed iterations of each size (-n), after nccl-tests' 5 warm-up ones.",
    )
    verify_allreduce_valid_for: int = Field(
        86400, ge=60, le=30 * 86400, description="Seconds a stored result holds; an older one is UNKNOWN as "
        "stale, never a pass.",
    )
    verify_allreduce_state: str = Field(
        "/var/lib/ccrhost/active.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where each node keeps its active-check results (written whole, atomically).",
    )
    verify_allreduce_launcher: Literal["none", "mpirun"] = Field(
        "none", description="How deploys/verify.py launches the two-node ring all-reduce (the pair mode) "
        "across hosts: none (single-node modes only; Slurm sites run `ccrhost slurm verify --nccl`), or mpirun "
        "(Open MPI's, run on each pair's first host; it reaches the second over SSH, so hosts need SSH to "
        "each other). Pairs cover every host in one round and isolate a slow pair as `slurm verify` does.",
    )
    verify_allreduce_mpirun: str = Field(
        "mpirun", pattern=r"^[A-Za-z0-9_.+@/-]{1,255}$",
        description="The mpirun command on the hosts (a name on PATH or an absolute path).",
    )
    verify_allreduce_port: int = Field(
        29500, ge=1024, le=60000, description="NCCL_COMM_ID port of the pair mode's root (on each pair's first "
        "host); pairs of one round use this port and the next ones, four apart.",
    )
    verify_active_when_busy: bool = Field(
        False, description="Run the active tests (all-reduce, DCGM diag, ib_write_bw, GPUDirect bandwidth, "
        "`ccrhost check --refresh-nic`'s NIC queries) on a node whose GPUs hold compute processes (nvidia-smi "
        "--query-compute-apps) or, where Slurm is in use, that runs a Slurm job (squeue -w NODE; `ccrhost dcgm` and "
        "`ccrhost check` on the node). Off: such a node's tests are skipped with an UNKNOWN node_busy that drains "
        "nothing (docs/verification.md).",
    )
    # DCGM diagnostics (model/dcgm.py, node/dcgm.py; docs/dcgm.md)
    verify_dcgm: bool = Field(
        False, description="Ask for DCGM's diag (`dcgmi diag -r LEVEL -j`): run it where a path's level "
        "(verify_dcgm_level_*) is above 0, and judge a stored pass past its validity as stale in `ccrhost check`, "
        "the prolog and the health check. Off, what a path stored (a sweep's FAIL) is still judged, so a drain "
        "for it holds; only a stale pass then says nothing.",
    )
    verify_dcgm_level_deploy: int = Field(
        1, ge=0, le=4, description="The diag level deploys/verify.py runs on each host (0: none; 1 quick, seconds; "
        "2 medium, minutes; 3 long; 4 extended, hours).",
    )
    verify_dcgm_level_prolog: int = Field(
        0, ge=0, le=1, description="The diag level the Slurm prolog runs before its check: 0 (none) reads only the "
        "stored result and its age; 1 (quick, seconds) is the most a job start may wait for.",
    )
    verify_dcgm_level_sweep: int = Field(
        2, ge=1, le=4, description="The diag level `ccrhost slurm verify --dcgm` and `ccrhost slurm sweep` run on "
        "idle nodes (exclusive jobs).",
    )
    verify_dcgm_exclude: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9 _/.-]{1,64}$")], ...] = Field(
        (), description="Diag tests or categories not judged, by the report's name (DCGM 3.x display names such as "
        "'Persistence Mode', DCGM 4.x plugin names such as 'software', or a category such as 'Deployment'), "
        "as gcm's --exclude_category.",
    )
    verify_dcgm_binary: str = Field(
        "dcgmi", pattern=r"^[A-Za-z0-9_.+@/-]{1,255}$", description="The dcgmi command (a name on PATH or a path).",
    )
    verify_dcgm_engine_timeout: int = Field(
        10, ge=1, le=120, description="Seconds the host engine has to answer `dcgmi discovery -l` before any diag; "
        "one that does not is UNKNOWN (dcgm_hostengine), never a FAIL of the GPUs, and the diag is not started.",
    )
    verify_dcgm_timeouts: dict[Literal[1, 2, 3, 4], Annotated[int, Field(ge=5, le=6 * 3600)]] | None = Field(
        None, description="Seconds after which a level's diag is killed and counts as a hang (UNKNOWN), "
        "overriding the built-in deadlines (1: 300, 2: 1200, 3: 3600, 4: 10800; docs/dcgm.md).",
    )
    verify_dcgm_valid_for: int = Field(
        86400, ge=60, le=30 * 86400, description="Seconds a stored diag result holds; an older one is UNKNOWN as "
        "stale, never a pass.",
    )
    verify_dcgm_state: str = Field(
        "/var/lib/ccrhost/dcgm.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where each node keeps its DCGM diag results: the active-check state file format "
        "(verify_allreduce_state's), written whole, atomically, apart from the all-reduce results so that "
        "neither run replaces the other's.",
    )
    verify_nvbandwidth: bool = Field(
        False, description="Also run nvbandwidth (host to device, device to host, device to device) wherever the "
        "DCGM diag runs on the node (`ccrhost dcgm`, slurm verify --dcgm, slurm sweep), stored beside it in "
        "verify_dcgm_state and judged with it.",
    )
    verify_nvbandwidth_binary: str = Field(
        "nvbandwidth", pattern=r"^[A-Za-z0-9_.+@/-]{1,255}$", description="The nvbandwidth command.",
    )
    verify_nvbandwidth_timeout: int = Field(
        300, ge=10, le=3600, description="Seconds after which nvbandwidth is killed (UNKNOWN).",
    )
    verify_nvbandwidth_min_gbs: dict[Literal["host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                                             "device_to_device_memcpy_read_ce"],
                                     Annotated[float, Field(gt=0)]] | None = Field(
        None, description="GB/s below which a GPU (or GPU pair) FAILS nvbandwidth's testcase, overriding the "
        "platform file's published figure (docs/platforms.md); the platform's fleet figure applies as well.",
    )

    # GEMM throughput per GPU (model/gemm.py, node/gemm.py; docs/dcgm.md)
    verify_gemm: bool = Field(
        False, description="Also run DCGM's dcgmproftester (field 1004, FP16 tensor-core GEMM) wherever the DCGM "
        "diag runs on the node (`ccrhost dcgm`, slurm verify --dcgm, slurm sweep), stored beside it in "
        "verify_dcgm_state and judged with it: a GPU below verify_gemm_min_fraction of its fp16 dense peak FAILs "
        "gemm_slow; a fresh result gives the measured CCR its measured compute.",
    )
    verify_gemm_seconds: int = Field(
        GemmPolicy.duration_s, ge=5, le=3 * 3600, description="Seconds of load per GPU (dcgmproftester -d); "
        "`ccrhost dcgm --gemm-seconds` overrides it for one run (an acceptance soak).",
    )
    verify_gemm_min_fraction: float = Field(
        GemmPolicy.min_fraction, gt=0, le=1, description="Fraction of a GPU's fp16 dense peak "
        "(ccrhost/platforms/gpus.yaml, or verify_gpu_tflops) below which its GEMM throughput FAILs gemm_slow: "
        "DCGM's own floor for this load, a proxy to calibrate per site (docs/dcgm.md).",
    )

    @field_validator("verify_dcgm_timeouts", mode="before")
    @classmethod
    def _level_keys(cls, value):
        # a YAML (or JSON) round trip gives the level keys back as text: "2" is level 2
        if isinstance(value, dict):
            return {int(k) if isinstance(k, str) and k in ("1", "2", "3", "4") else k: v for k, v in value.items()}
        return value

    @property
    def allreduce_state(self) -> str | None:
        """The state file whose all-reduce results a check judges; None when the gate is off."""
        return self.verify_allreduce_state if self.verify_allreduce else None

    @property
    def dcgm_state(self) -> str | None:
        """The state file whose DCGM diag and nvbandwidth results a check judges, verify_dcgm on or off:
        a result any path stored (a sweep's FAIL) is judged by every path, so a drain for it holds."""
        return self.verify_dcgm_state
