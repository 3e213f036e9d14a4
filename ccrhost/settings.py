"""Inventory data the deploys read: the keys, their defaults, and validation.

Every host's data is validated before any host is touched. A key that
starts with one of ccrhost's prefixes but is not known (``roce_dcsp``) is an
error, not silently ignored: a typo would otherwise leave the default in
force on a whole cluster.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from ccrhost.model import ccr as ccrmod
from ccrhost.model import datapath as dp
from ccrhost.model import fabric, presets
from ccrhost.model import workload as wl
from ccrhost.model.declared import PROFILES
from ccrhost.model.gpu_health import GpuHealthPolicy
from ccrhost.model.history import HistoryPolicy
from ccrhost.model.gpus import PRECISIONS
from ccrhost.model.gpus import PeakUnknown, peak_tflops
from ccrhost.model.gpus import lookup as lookup_gpu
from ccrhost.model.qos import DCQCN_NP, DCQCN_RP, Wanted, tos_byte
from ccrhost.model.verdict import Expectation, Policy

# Keys with these prefixes belong to ccrhost; anything else in host data
# (ssh_*, the site's own keys) is left alone.
OWNED_PREFIXES = ("ccrhost_", "monitor_", "rdma_", "roce_", "qos_", "pfc_", "ecn_", "dcqcn_", "nccl_", "verify_", "ccr_", "gpu_",
                  "slurm_")

# NCCL variables with a key of their own (or derived from ones): nccl_extra
# may not set them, or it would bypass their rules.
NCCL_TWINS = {
    "NCCL_IB_HCA": "nccl_ib_hca", "NCCL_SOCKET_IFNAME": "nccl_socket_ifname",
    "NCCL_IB_ADDR_FAMILY": "nccl_ib_addr_family", "NCCL_IB_ADDR_RANGE": "nccl_ib_addr_range",
    "NCCL_IB_GID_INDEX": "nccl_ib_gid_index", "NCCL_NET_GDR_LEVEL": "nccl_net_gdr_level",
    "NCCL_IB_QPS_PER_CONNECTION": "nccl_ib_qps_per_connection", "NCCL_IB_TIMEOUT": "nccl_ib_timeout",
    "NCCL_IB_RETRY_CNT": "nccl_ib_retry_cnt", "NCCL_CROSS_NIC": "nccl_cross_nic",
    "NCCL_IB_TC": "roce_dscp and roce_ecn_bits", "NCCL_IB_FIFO_TC": "nccl_fifo_dscp",
    "NCCL_IB_ROCE_VERSION_NUM": "roce_version",
}

ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]

DEFAULT_MODULES = ("ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm")

# RDMA device names, or fnmatch patterns of them (mlx5_*, rocep*s0).
DevicePattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_*?\[\]-]{1,64}$")]
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
# Kernel interface names (at most 15 characters, no '/', no white space),
# in NCCL's list syntax: an optional '=' (exact) or '^' (exclude) prefix.
IfnameList = Annotated[str, StringConstraints(pattern=r"^[=^]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*$")]
HcaList = Annotated[str, StringConstraints(
    pattern=r"^[=^]{0,2}[A-Za-z0-9_.-]{1,64}(:[0-9]{1,3})?(,[A-Za-z0-9_.-]{1,64}(:[0-9]{1,3})?)*$")]
NcclName = Annotated[str, StringConstraints(pattern=r"^NCCL_[A-Z0-9_]{1,64}$")]
# Values pass through to a file NCCL reads literally and to a shell profile:
# no newlines, '=', quotes, backslashes or shell metacharacters.
NcclValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:/@%+^-]{0,255}$")]
# Paths written into shell scripts and slurm.conf: absolute, no white space or shell metacharacters.
AbsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_.+@/-]{0,254}$")]
SearchPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_.+@/-]*(:/[A-Za-z0-9_.+@/-]*){0,31}$")]
# --- settings that name a path -------------------------------------------------
# A path setting must name one file plainly: no "." or ".." component (they
# would walk past every rule below), no empty one, no trailing "/".
# The files ccrhost writes on a node (slurm_fragment, verify_link_state) must
# also be its own; refused, and why:
# - Slurm's own configuration files, by name wherever they live (a site keeps
#   them in /etc/slurm, /etc/slurm-llnl or /usr/local/etc): the man pages of
#   slurm.conf(5), slurmdbd.conf(5), cgroup.conf(5), gres.conf(5),
#   topology.conf(5), acct_gather.conf(5), burst_buffer.conf(5),
#   helpers.conf(5), job_container.conf(5), mpi.conf(5), oci.conf(5), and
#   spank(8)'s plugstack.conf; and the slurm_conf value itself.
SLURM_OWN = ("slurm.conf", "slurmdbd.conf", "cgroup.conf", "gres.conf", "topology.conf", "acct_gather.conf",
             "burst_buffer.conf", "helpers.conf", "job_container.conf", "mpi.conf", "oci.conf", "plugstack.conf")
# - ccrhost's own files of another key (ccrhost/model/managed.py WHAT), NCCL's /etc/nccl.conf among them.
# - The trees of the package manager (/usr, /bin, /sbin, /lib*), of boot
#   (/boot) and the kernel's interfaces (/dev, /proc, /sys): nothing there is
#   a site's file to replace. Two sub-trees are: /usr/local/etc is Slurm's
#   configuration folder when built with the default prefix, and /dev/shm is
#   a plain tmpfs (a state file there lasts until reboot, as under /run).
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/libexec", "/boot", "/dev",
                "/proc", "/sys")
SYSTEM_TREE_EXCEPTIONS = ("/usr/local/etc", "/dev/shm")
# - A file directly in /etc (passwd, shadow, group, fstab, hosts, sudoers,
#   nccl.conf...) is the system's, unless its name starts with "ccrhost".
# - /etc folders whose every file the system parses or runs: a JSON file or
#   a slurm.conf fragment there breaks sudo, cron, PAM, logins or the boot.
ETC_DROPIN_FOLDERS = ("/etc/sudoers.d", "/etc/cron.d", "/etc/cron.hourly", "/etc/cron.daily", "/etc/cron.weekly",
                      "/etc/cron.monthly", "/etc/profile.d", "/etc/pam.d", "/etc/security", "/etc/ssh",
                      "/etc/systemd", "/etc/modprobe.d", "/etc/modules-load.d", "/etc/sysctl.d", "/etc/ld.so.conf.d",
                      "/etc/udev", "/etc/init.d", "/etc/default", "/etc/apt", "/etc/yum.repos.d", "/etc/logrotate.d",
                      "/etc/network", "/etc/netplan", "/etc/NetworkManager", "/etc/tmpfiles.d", "/etc/rc.d")


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _file_name_problem(path: str) -> str | None:
    """Why ``path`` does not plainly name one file, or None."""
    if path == "/" or path.endswith("/"):
        return "names a folder; allowed: the path of a file"
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component; allowed: a plain absolute path"
    return None


def _system_tree(path: str) -> str | None:
    """The system tree that ``path`` (absolute, plain) is in, or None."""
    if any(_within(path, ok) for ok in SYSTEM_TREE_EXCEPTIONS):
        return None
    return next((tree for tree in SYSTEM_TREES if _within(path, tree)), None)


def _not_ours(path: str) -> str | None:
    """Why ccrhost may not write the file ``path``, or None (the rules above)."""
    from ccrhost.model.managed import WHAT

    name = path.rsplit("/", 1)[-1]
    if name in SLURM_OWN:
        return f"is Slurm's own {name}"
    if path in WHAT:
        return f"is {WHAT[path]}"
    tree = _system_tree(path)
    if tree:
        return f"is a system file (under {tree})"
    folder = next((f for f in ETC_DROPIN_FOLDERS if _within(path, f)), None)
    if folder:
        return f"is in {folder}, whose every file the system reads"
    if path.count("/") == 2 and path.startswith("/etc/") and not name.startswith("ccrhost"):
        return "is a system file directly in /etc"
    return None


def _written_file(path: str, example: str) -> str:
    problem = _file_name_problem(path)
    why = _not_ours(path) if problem is None else None
    if problem:
        raise ValueError(problem)
    if why:
        raise ValueError(f"{why}; allowed: a file of ccrhost's own, such as {example}")
    return path


# Every setting naming a file ccrhost replaces (the state files on each
# check): one validator (_written_file) and one distinctness rule against
# every other path setting; a new one is added here and nowhere else.
STATE_PATHS = ("verify_link_state", "verify_gpu_state", "verify_allreduce_state", "verify_history", "verify_dcgm_state")
WRITTEN_PATHS = ("slurm_fragment", *STATE_PATHS)
PATH_SETTINGS = (*WRITTEN_PATHS, "slurm_ccrhost", "slurm_conf")
_STATE_EXAMPLE = "/run/ccrhost/counters.json"


# slurm.conf's HealthCheckNodeState: a comma list of these (slurm.conf(5)).
HEALTHCHECK_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")


class Workload(BaseModel):
    """A training job; the node CCR comes from it (ccrhost/model/workload.py,
    formulas in docs/ccr-model.md). ``preset`` fills the other keys from a
    named workload (ccrhost/model/presets.py); keys given beside it win."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    preset: Literal[presets.NAMES] | None = Field(  # type: ignore[valid-type]
        None, description="Named workload to start from (llama3-8b, llama3-70b, llama3-405b, llama3-405b-128k, "
        "gpt3-175b, mixtral-8x7b, deepseek-v3); the other keys override its values.")
    tokens_per_gpu_step: float | None = Field(
        None, gt=0, le=1e9, description="Tokens per step / GPUs of the job. Required unless a preset gives it.")
    dp_size: int | None = Field(
        None, ge=1, le=1_000_000, description="Data-parallel degree (model replicas). Required unless a preset "
        "gives it.")
    precision: Literal[wl.TRAIN_PRECISIONS] = Field(  # type: ignore[valid-type]
        "bf16", description="Training precision; the byte widths' defaults follow it.")
    framework: Literal[wl.FRAMEWORKS] | None = Field(  # type: ignore[valid-type]
        None, description="Framework whose default byte widths apply (megatron, torchtitan, deepspeed, ddp-amp). "
        "Default: none named, gradients reduced at the conservative fp32 width.")
    grad_bytes_per_param: float | None = Field(
        None, gt=0, le=16, description="Gradient-reduce bytes per value. Default: the framework's (fp32: 4 "
        "when none is named).")
    param_bytes: float | None = Field(
        None, gt=0, le=16, description="Parameter all-gather bytes per value (ZeRO, FSDP). Default: the "
        "framework's (2 for 16-bit and fp8 training).")
    activation_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of pipeline sends, expert all-to-all and KV exchange. "
        "Default: 2 (4 for fp32 training).")
    dispatch_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of the expert all-to-all dispatch (and of the gradient "
        "sent towards the experts in backward). Default: activation_bytes. DeepSeek-V3 sends it in FP8: 1.")
    combine_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of the expert all-to-all combine (and of its backward "
        "counterpart). Default: activation_bytes. DeepSeek-V3 keeps it in BF16: 2.")
    tp_size: int = Field(1, ge=1, le=64, description="Tensor-parallel degree, inside a node.")
    pp_size: int = Field(1, ge=1, le=4096, description="Pipeline stages, across nodes.")
    cp_size: int = Field(1, ge=1, le=4096, description="Context-parallel degree; needs seq_len, which it divides.")
    cp_method: Literal[wl.CP_METHODS] = Field(  # type: ignore[valid-type]
        "ring", description="How context parallelism moves K and V: ring (ring attention, 3 passes a step) or "
        "all-gather (Llama 3: gathered once forward, gradients reduce-scattered backward, 2 passes).")
    sharding: Literal[wl.SHARDING] = Field(  # type: ignore[valid-type]
        "none", description="none: all-reduce; optimizer: ZeRO-1/2; full: ZeRO-3/FSDP.")
    reduction: str | None = Field(
        None, description="Collective algorithm between nodes: ring (default: NCCL's choice for large buckets), "
        "tree (NCCL tree, hierarchical), sharp (InfiniBand SHARP: an all-reduce leaves each node once), nvls "
        "(NVLink SHARP reduces inside the node; between nodes NVLS-tree moves tree's volume).")
    compression: float = Field(1.0, description="Gradient bytes on the wire / uncompressed, (0, 1].")
    overlap: float = Field(
        0.0, description="Share of the gradient reduce (and FSDP's backward gather) hidden behind backward, "
        "[0, 1]; also the parameter gathers' unless param_overlap is given.")
    param_overlap: float | None = Field(
        None, description="Share of the parameter all-gathers hidden behind the pass they precede, [0, 1]. "
        "Default: overlap.")
    pipeline_overlap: float = Field(
        0.0, description="Share of the pipeline sends hidden behind the next micro-batch's compute, [0, 1].")
    a2a_overlap: float = Field(
        0.0, description="Share of the expert all-to-all hidden behind the other micro-batch's compute "
        "(DualPipe-style), [0, 1].")
    recompute: Literal[wl.RECOMPUTE] = Field(  # type: ignore[valid-type]
        "none", description="Activation recompute: full reruns the forward inside backward.")
    kernel_share: float | None = Field(
        None, description="Share of peak F the kernels reach while computing, [0.01, 1]: what F is multiplied "
        "by. Default: 1 (peak), or solved from mfu.")
    mfu: float | None = Field(
        None, description="A published or measured end-to-end MFU, [0.01, 1] (model FLOPs / step time / peak F, "
        "after the bubble and exposed communication); the model solves the kernel share from it. Not with "
        "kernel_share.")
    mfu_attention: Literal[wl.MFU_ATTENTION] = Field(  # type: ignore[valid-type]
        "full", description="How mfu counts attention FLOPs per token: full, 12 x layers x seq_len x attention "
        "width (PaLM, Megatron-LM, torchtitan), or causal, 6 x ... (the mask halves them).")
    hidden_size: int | None = Field(None, ge=1, le=1 << 20, description="Model width (hidden size).")
    attention_width: int | None = Field(
        None, ge=1, le=1 << 24, description="Attention FLOP width: heads x (query-key dim + value dim) / 2. "
        "Default: hidden_size (DeepSeek-V3: 128 x (192 + 128) / 2 = 20480).")
    params: float | None = Field(None, gt=0, le=1e15, description="Total parameters (MoE: experts included).")
    layers: int | None = Field(None, ge=1, le=100_000, description="Transformer layers (attention FLOPs, KV "
                               "exchange, all-to-all).")
    seq_len: int | None = Field(None, ge=1, le=1 << 30, description="Tokens per sequence (attention FLOPs, "
                                "context parallelism).")
    kv_size: int | None = Field(None, ge=1, le=1 << 20, description="K (and V) width per token per layer: kv "
                                "heads x head dim. Default: hidden_size.")
    experts: int | None = Field(None, ge=1, le=1 << 20, description="Routed experts per MoE layer.")
    expert_params: float | None = Field(None, gt=0, le=1e15, description="Parameters in routed experts, all "
                                        "layers.")
    top_k: int = Field(1, ge=1, le=1 << 20, description="Experts per token.")
    ep_size: int = Field(1, ge=1, le=1 << 20, description="Expert-parallel degree.")
    capacity_factor: float = Field(1.0, description="Expert buffer / even share of routed tokens, 1 to 64.")
    moe_layers: int | None = Field(None, ge=1, le=100_000, description="MoE layers. Default: all layers.")
    moe_max_nodes: int | None = Field(None, ge=1, le=1 << 20, description="Node-limited routing: a token "
                                      "reaches at most this many nodes, each once (DeepSeek-V3).")
    virtual_stages: int = Field(1, ge=1, le=1024, description="Interleaved pipeline chunks per stage.")
    micro_batches: int | None = Field(None, ge=1, le=1 << 20, description="Micro-batches per step (pipeline "
                                      "bubble).")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data):
        return presets.expand(data) if isinstance(data, dict) else data

    @field_validator("compression", "overlap", "param_overlap", "pipeline_overlap", "kernel_share", "mfu",
                     "capacity_factor", "reduction")
    @classmethod
    def _ratio(cls, value, info):
        # the model's own rule, so the inventory and calc refuse alike
        spec = wl.WorkloadSpec(1, 1, **{info.field_name: value})
        for problem in wl.spec_problems(spec):
            if problem.key == info.field_name:
                raise ValueError(problem.allowed)
        return value

    def missing(self) -> list[wl.Problem]:
        return [wl.Problem(k, None, "required: give it, or a preset that does")
                for k in ("tokens_per_gpu_step", "dp_size") if getattr(self, k) is None]

    def spec(self) -> wl.WorkloadSpec:
        return wl.WorkloadSpec(**self.model_dump())


ReadReq = Literal[dp.READ_REQ_SIZES]  # type: ignore[valid-type]
RoceMtu = Literal[dp.NETDEV_MTUS]  # type: ignore[valid-type]
LinkCounter = Literal[dp.COUNTERS]  # type: ignore[valid-type]
# A required version is a version number (datapath.version_key): numbers
# split by '.', '-' or '_'; a word in it could never be compared.
VersionText = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}([._-][0-9]{1,9}){0,15}$")]
FabricCounter = Literal[fabric.RATE_COUNTERS]  # type: ignore[valid-type]
# Keys that no longer exist, and what replaced them: refused with that name.
REMOVED_KEYS = {
    "verify_link_window": "removed: rates are now the change since the node's last stored reading, read in the "
                          "same command (no sleep); use verify_window_max_age to bound how old that reading may be",
}

Priority = Annotated[int, Field(ge=0, le=7)]
EightSizes = Annotated[tuple[Annotated[int, Field(ge=0, le=1 << 30)], ...], Field(min_length=8, max_length=8)]
EightBuffers = Annotated[tuple[Priority, ...], Field(min_length=8, max_length=8)]
DcqcnName = Literal[tuple(sorted({**DCQCN_RP, **DCQCN_NP}))]  # type: ignore[valid-type]


# A key only the controller running the deploy reads (it never reaches the
# node's check.yaml, so changing it rewrites nothing on the nodes).
CONTROLLER_ONLY = {"controller_only": True}


class HostSettings(BaseModel):
    """The validated settings for one host. Each field's description is its entry in the
    settings reference (docs/settings.md, generated by ``python -m ccrhost.docs``)."""

    # strict: "26" is not 26; no inf or nan in any float (a TFLOPS of inf makes every CCR 0)
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    rdma_modules: tuple[ModuleName, ...] = Field(
        DEFAULT_MODULES, description="Kernel modules to load now and at every boot."
    )
    rdma_require_devices: bool = Field(
        True, description="Fail the host when it has no RDMA device at all."
    )
    roce_version: Literal[1, 2] = Field(2, description="rdma_cm default RoCE mode: 2 writes `RoCE v2`, 1 writes `IB/RoCE v1`.")
    roce_dscp: int = Field(26, ge=0, le=63, description="DSCP of RoCE traffic (rdma_cm's default ToS, NCCL_IB_TC).")
    roce_ecn_bits: int = Field(
        2, ge=0, le=3, description="ECN bits of the ToS byte (2 = ECT(0), so DSCP 26 gives ToS 106)."
    )
    roce_force_traffic_class: bool = Field(
        False,
        description="Also write the OFED-only tc/<port>/traffic_class. It overrides the "
        "traffic class of every application on the port, hence opt-in.",
    )

    qos_enable: bool = Field(True, description="Run the QoS stage (trust, PFC, ECN, buffers) on RoCE ports.")
    qos_roce_priority: Priority = Field(3, description="Priority that roce_dscp maps to (trust DSCP).")
    qos_cnp_dscp: int = Field(48, ge=0, le=63, description="DSCP of congestion notification packets (CNP); must differ from roce_dscp.")
    qos_cnp_priority: Priority = Field(6, description="Priority that qos_cnp_dscp maps to, and CNPs' 802.1p priority.")
    qos_pfc_priorities: tuple[Priority, ...] | None = Field(
        None, max_length=8, description="Priorities with PFC on; each must be one a configured DSCP maps to (qos_roce_priority or "
        "qos_cnp_priority). Default: only qos_roce_priority."
    )
    qos_cable_len: int | None = Field(None, ge=1, le=999, description="Cable length in metres, for the xoff/xon thresholds; null: the driver's.")
    qos_buffer_size: EightSizes | None = Field(None, description="Receive buffer sizes in bytes, 8 values; null: the driver's. Each lossless buffer must "
                                              "hold xoff + MTU and all must fit the port buffer.")
    qos_prio2buffer: EightBuffers | None = Field(None, description="Buffer index of each priority, 8 values; null: the driver's.")
    qos_min_headroom: int | None = Field(
        None, gt=0, description="Bytes each lossless buffer must hold above xoff (checked on OFED's read-back)."
    )
    qos_credit_threshold: int | None = Field(
        None, gt=0, description="Written to a port's credit_threshold attribute, on drivers that have one."
    )
    qos_allow_ssh_interface: bool = Field(
        False, description="Allow QoS changes (which toggle the link) on the interface carrying SSH or the default route."
    )
    ecn_priorities: tuple[Priority, ...] | None = Field(
        None, max_length=8, description="Priorities with ECN (DCQCN) on; default: only qos_roce_priority."
    )
    ecn_rp: bool = Field(True, description="Enable the reaction point (roce_rp) on ecn_priorities.")
    ecn_np: bool = Field(True, description="Enable the notification point (roce_np) on ecn_priorities.")
    dcqcn_params: dict[DcqcnName, Annotated[int, Field(ge=0, le=1 << 31)]] | None = Field(
        None, description="DCQCN parameters by their MLNX_OFED names (rpg_ai_rate, min_time_between_cnps, ...); "
        "upstream drivers get the matching rp_*/np_* debugfs names."
    )

    rdma_gpudirect: bool = Field(
        True, description="Load and persist a peer-memory module (nvidia_peermem, or nv_peer_mem where that is "
        "what the driver ships) unless one is loaded or dma-buf serves; never both.",
    )
    rdma_acs_clear: bool = Field(
        True, description="Clear ACS redirect and source validation on the PCIe bridges between each GPU and its "
        "NIC, now and at every boot. Set false where ACS must stay (virtual machine hosts).",
    )
    rdma_nic_pcie_optimize: bool = Field(
        False, description="Opt-in: MaxReadReq 4096 on ConnectX NICs (NVIDIA's pciPerformanceOptimized), "
        "now and at every boot.",
    )
    rdma_nic_max_read_req: ReadReq | None = Field(
        None, description="Opt-in: MaxReadReq in bytes on every compute NIC (overrides the ConnectX 4096).",
    )
    rdma_nic_relaxed_ordering: bool | None = Field(
        None, description="Opt-in: PCIe relaxed ordering on (true) or off (false) on every compute NIC; "
        "null leaves it.",
    )
    roce_mtu: RoceMtu | None = Field(
        4200, description="MTU of the RoCE netdevs: 4200 gives RDMA active_mtu 4096 (9000 too, with more "
        "memory); never changed on the SSH or default-route netdev; null leaves it.",
    )

    rdma_exclude_devices: tuple[DevicePattern, ...] = Field(
        (), description="RDMA devices (names or fnmatch patterns) that are not compute fabric: storage, management."
    )

    nccl_ib_hca: HcaList | None = Field(None, description="NCCL_IB_HCA as given, instead of the discovered active compute ports.")
    nccl_socket_ifname: IfnameList | None = Field(
        None, description="NCCL_SOCKET_IFNAME; default: exactly the interface of the default route."
    )
    nccl_fifo_dscp: int | None = Field(
        None, ge=0, le=63, description="DSCP of NCCL's control and credit-return messages (default: roce_dscp)."
    )
    nccl_ib_addr_family: Literal["AF_INET", "AF_INET6"] = Field(
        "AF_INET", description="NCCL_IB_ADDR_FAMILY: the address family of the GID NCCL selects (RoCE only).")
    nccl_ib_addr_range: str | None = Field(
        None, pattern=r"^[0-9a-fA-F:.]{2,39}/[0-9]{1,3}$", description="Fabric subnet (CIDR) for GID auto-selection."
    )
    nccl_ib_gid_index: int | None = Field(
        None, ge=0, le=255,
        description="Pin NCCL_IB_GID_INDEX; only if the RoCE v2 IPv4 GID sits there on every compute port.",
    )
    nccl_net_gdr_level: Literal["LOC", "PIX", "PXB", "PHB", "SYS"] | None = Field(
        None, description="NCCL_NET_GDR_LEVEL: the farthest GPU-NIC distance at which NCCL uses GPUDirect RDMA; "
        "null: NCCL's default (PXB).")
    nccl_ib_qps_per_connection: int | None = Field(
        None, ge=1, le=128, description="NCCL_IB_QPS_PER_CONNECTION: queue pairs per connection; null: not set.")
    nccl_ib_timeout: int | None = Field(
        None, ge=1, le=31, description="NCCL_IB_TIMEOUT: the InfiniBand Verbs timeout, 4.096 us x 2^value; null: not set.")
    nccl_ib_retry_cnt: int | None = Field(
        None, ge=0, le=7, description="NCCL_IB_RETRY_CNT: InfiniBand retry count; null: not set.")
    nccl_cross_nic: Literal[0, 1, 2] | None = Field(
        None, description="NCCL_CROSS_NIC, whether rings and trees may use different NICs on different nodes "
        "(0, 1 or 2 as NCCL's documentation defines them); null: not set.")
    nccl_extra: dict[NcclName, NcclValue] | None = Field(None, description="Other NCCL_* variables, passed through ({NCCL_DEBUG: WARN}); a variable with a key of its "
        "own (NCCL_IB_HCA, NCCL_IB_GID_INDEX, ...) is refused with a pointer to that key.")

    verify_profile: str | None = Field(
        None, description=f"Declared hardware: {', '.join(PROFILES)}. Sets the four verify_* expectations below."
    )
    verify_gpu_model: str | None = Field(None, max_length=128, description="Expected GPU name as NVML reports it; default: from verify_profile.")
    verify_gpu_count: int | None = Field(None, ge=1, le=64, description="Expected number of GPUs; default: from verify_profile.")
    verify_ports: int | None = Field(None, ge=0, le=64, description="Expected active compute ports; default: from verify_profile.")
    verify_port_gbps: float | None = Field(None, gt=0, le=3200, description="Expected rate of each compute port, Gb/s; default: from verify_profile.")
    verify_precision: Precision = Field("bf16", description="Precision of F, the GPU compute.")
    verify_beta: float | None = Field(None, gt=0, le=1e6, description="Bytes per FLOP; default 4 (the CCR guide's). Not with verify_workload.")
    verify_workload: Workload | None = Field(
        None, description="The training job the node is judged for: the CCR and its bands come from the workload "
        "model instead of beta (see the Workload keys). Not with verify_beta."
    )
    verify_bandwidth_model: Literal["bottleneck", "sum"] = Field("bottleneck", description="How B is summed: the slowest active port x their count (bottleneck), or the sum.")
    verify_min_ccr: float | None = Field(None, ge=0, description="Absolute CCR floor; below it a host FAILS.")
    verify_min_ccr_fraction: float = Field(0.9, ge=0, le=1, description="Fail below this share of the expected CCR.")
    verify_gpu_tflops: dict[Precision, float] | None = Field(
        None, description="Peak dense TFLOPS per GPU by precision, for a model the table lacks."
    )
    verify_fleet_tolerance: float | None = Field(
        None, gt=0, lt=1, description="Flag hosts whose CCR is this share below the fleet median (0.1 = 10%)."
    )
    verify_measure: bool = Field(False, description="Measure bandwidth with ib_write_bw between host pairs (deploys/verify.py).")
    verify_measure_seconds: int = Field(10, ge=1, le=3600, description="Sustained duration of each ib_write_bw run.")
    verify_measure_retries: int = Field(2, ge=0, le=10, description="Reruns of a slow pair before it counts as slow.")
    verify_measure_min_fraction: float = Field(
        0.9, gt=0, le=1, description="A port measured below this share of its effective rate FAILS."
    )
    verify_measure_timeout: int = Field(
        60, ge=5, le=7200, description="Seconds after which one ib_write_bw run is killed and counts as UNKNOWN; at least "
        "verify_measure_seconds + 5."
    )
    verify_measure_port: int = Field(18515, ge=1024, le=65000, description="First TCP port of the ib_write_bw servers.")
    monitor_seconds: float = Field(10, gt=0, le=86400, description="Length of deploys/monitor.py's window.")
    monitor_interval: float = Field(1, ge=0.1, le=3600, description="Seconds between deploys/monitor.py's samples.")
    monitor_gpu_target: float = Field(90, ge=0, le=100, description="Mean GPU utilization target, %.")
    monitor_net_target: float = Field(80, ge=0, le=100, description="Network utilization target, % of effective rate.")
    monitor_outlier_tolerance: float = Field(
        0.2, gt=0, lt=1, description="Flag hosts this share below the fleet median (0.2 = 20%)."
    )
    verify_rail_local: bool | None = Field(
        None, description="Declared hardware has one NIC per GPU on its switch: a GPU whose NIC is across the "
        "CPU interconnect (SYS) FAILS. Default: from verify_profile.",
    )
    verify_window_max_age: float = Field(
        3600, ge=0, le=604800, description="Oldest stored counter reading (seconds) a rate is measured from; "
        "without one that serves (none, older, or from another boot) every rate is the counters' total over the "
        "time since boot (/proc/uptime), and a verify_link_thresholds count is per window of this length, on "
        "average since boot (0: rates are never judged). Replaces verify_link_window: nothing sleeps to measure "
        "a rate.",
    )
    verify_link_state: str = Field(
        "/run/ccrhost/counters", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where the node keeps its last counter reading (the deploy's snapshot and `ccrhost check` "
        "both read it and replace it: each rate is the change since it); under /run it starts afresh at boot, "
        "as the counters do.",
    )
    verify_pause_share_max: float = Field(
        0.1, gt=0, le=1, description="Share of the window a PFC priority may be paused (ethtool's "
        "<rx|tx>_prioN_pause_duration, microseconds): a netdev that sent pause longer FAILS (it stalls the "
        "fabric), one paused longer WARNS. 0.1 stays well below the 21.7% global pause was seen to take "
        "(NVIDIA/daqiri PR #252).",
    )
    verify_fabric_warn_per_hour: dict[FabricCounter, Annotated[float, Field(ge=0)] | None] | None = Field(
        None, description="Rise per hour above which a lossless-fabric error counter WARNS (null: never). "
        "Default 0 (any rise) for every one, as counters.rst lists them as errors.",
    )
    verify_fabric_fail_per_hour: dict[FabricCounter, Annotated[float, Field(ge=0)] | None] | None = Field(
        None, description="Rise per hour above which it FAILS (null: never). Defaults (NVSentinel's NIC health "
        "monitor): rnr_nak_retry_err and tx_pause_storm_error_events any rise, rx_symbol_err_phy and "
        "rx_crc_errors_phy 120 an hour.",
    )
    verify_link_thresholds: dict[LinkCounter, Annotated[int, Field(ge=0, le=65535)]] | None = Field(
        None, description="Rise of an error counter within the window above which a port WARNS "
        "(link_downed: FAILS). Defaults: symbol_error 10, link_error_recovery 10, the others 0.",
    )
    # issue 35: link flaps from the kernel log, read once with the XIDs
    verify_link_flap_lookback_hours: float = Field(
        24, ge=0, le=720, description="How far back the kernel log's `Link down` lines of a compute netdev "
        "(mlx5e: `mlx5_core <pci> <netdev>: Link down`) count as flaps (Azure's link-flap check: 24 h); a line "
        "without a time counts since boot.",
    )
    verify_link_flap_max: int = Field(
        4, ge=0, le=100000, description="`Link down` lines of one compute netdev within the lookback above which "
        "the node FAILS link_flap (Azure's link-flap check fails a device at 5 in 24 h).",
    )
    # GPU health (model/gpu_health.py; docs/gpu-health.md): defaults from the anchors named there
    verify_gpu_xid_lookback_hours: float = Field(
        2, ge=0, le=720, description="XIDs logged longer ago than this are not judged (Azure check_gpu_xid: 2 h); "
        "a log line without a time counts since boot. Those whose action is a reboot (Xid 79 fell off the bus, "
        "151, 168, an Xid 154 naming Node Reboot Required) count for the whole boot.",
    )
    verify_gpu_xid_ignore: tuple[Annotated[int, Field(ge=1, le=65535)], ...] = Field(
        (), description="XID codes never judged (still shown in the readings).",
    )
    verify_gpu_ecc_correctable_max: int = Field(
        10000, ge=0, description="Correctable volatile ECC errors of a GPU above which it WARNS "
        "(Azure check_gpu_ecc: 10,000 correctable SRAM errors).",
    )
    verify_gpu_nvlink_errors_per_min: float = Field(
        1, ge=0, description="NVLink CRC, replay and recovery errors of a GPU rising faster than this per minute "
        "since the last check (else since boot) WARN (DCGM_LIMIT_MAX_LWLINK_ERROR).",
    )
    verify_gpu_pcie_replays_per_min: float = Field(
        8, ge=0, description="PCIe replays of a GPU rising faster than this per minute since the last check (else "
        "since boot) WARN (DCGM_LIMIT_MAX_PCIREPLAY_RATE).",
    )
    verify_gpu_hw_slowdown: Literal["WARN", "FAIL"] = Field(
        "WARN", description="Level of a GPU whose clocks are held down by HW slowdown, HW thermal or power-brake "
        "slowdown: WARN (gpu_throttled says it) or FAIL (gpu_hw_slowdown). SW power capping is never judged.",
    )
    verify_gpu_state: str = Field(
        "/run/ccrhost/gpu-counters.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps the GPU error counters (NVLink, PCIe replay) between runs, for "
        "their rates; under /run it starts afresh at boot, as the counters do. A file of ccrhost's own, by the "
        "rules of verify_link_state, and no other path setting's file; replaced through a new temporary file "
        "and a rename, never written through a link. A stored reading that is corrupt or out of range is "
        "discarded and replaced, with a note.",
    )
    # a node's failure history (model/history.py; issue 40)
    verify_history: str | None = Field(
        None, pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps the node's failure history (each failure: time, codes, action, "
        "GPU serials), bounded by verify_history_entries, for verify_replace_failures; it must survive a "
        "reboot, so not under /run: /var/lib/ccrhost/history.json, for instance. Default null: no history is "
        "kept and no node is marked for replacement.",
    )
    verify_history_entries: int = Field(
        50, ge=1, le=10000, description="Failures the history keeps, newest last; older ones are dropped.")
    verify_replace_failures: int = Field(
        3, ge=0, le=1000, description="Failures (a FAIL after a check that did not fail) within "
        "verify_replace_window_hours after which the node's action is replace (node_repeat_failures) and its "
        "drain reason leads with that code, which no automatic resume lifts (0: never).",
    )
    verify_replace_window_hours: float = Field(
        168, gt=0, le=8760, description="The window verify_replace_failures counts failures in (hours).")
    verify_evidence_dir: str | None = Field(
        None, pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps a diagnostics bundle when a failure starts (verdict.json with "
        "its readings, the XID lines, `nvidia-smi -q -i N` of each failing GPU), one folder per failure named "
        "by its UTC time, which the drain reason and the report name: /var/lib/ccrhost/evidence, for instance. "
        "Default null: none is kept.",
    )
    verify_evidence_max_age_days: float = Field(
        7, gt=0, le=365, description="Bundles older than this are removed at the next failing check.")
    verify_evidence_keep: int = Field(10, ge=1, le=1000, description="Bundles kept at most, newest first.")
    verify_evidence_bug_report: bool = Field(
        False, description="Also run `nvidia-bug-report.sh --output-file` into the bundle where it is installed "
        "(it takes minutes: the check that collects waits for it).",
    )
    verify_required_nic_fw: VersionText | None = Field(None, description="Oldest NIC firmware (fw_ver) allowed.")
    verify_required_mlx5: VersionText | None = Field(
        None, description="Oldest mlx5 driver allowed (MLNX_OFED's /sys/module/mlx5_core/version).")
    verify_required_nvidia: VersionText | None = Field(None, description="Oldest NVIDIA driver allowed.")
    verify_measure_gpudirect: bool = Field(
        False, description="deploys/verify.py measures each GPU-NIC pair through GPU memory (ib_write_bw "
        "--use_cuda, NUMA-pinned); UNKNOWN where ib_write_bw has no CUDA.",
    )
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
    verify_allreduce_min_busbw: dict[Literal["nvlink", "loopback", "pair"], Annotated[float, Field(gt=0)]] | None = \
        Field(None, description="busbw (GB/s) below which a mode FAILS, overriding the built-in figure: the "
              "platform table for nvlink and loopback, the node's NICs x 46 GB/s per 400G for pair.")
    verify_allreduce_retries: int = Field(
        2, ge=0, le=10, description="Reruns of a run below threshold; the first good run passes (wrong results "
        "and UNKNOWN are never rerun).",
    )
    verify_allreduce_timeout: int = Field(
        300, ge=10, le=7200, description="Seconds after which one run is killed (its whole process group) and "
        "counts as a hang (UNKNOWN).",
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
    # NIC firmware audit (model/nicfw.py, node/nicfw.py; docs/nic-firmware.md)
    verify_nic_firmware: bool = Field(
        False, description="Audit each compute NIC's firmware settings (`mlxconfig -e q`, or mstflint's "
        "`mstconfig`) against the profile: the deploy and the health check (`ccrhost check --refresh-nic`) "
        "query and store them in verify_allreduce_state, every check judges the stored reading and its age.",
    )
    verify_nic_optics: bool = Field(
        False, description="Read each compute NIC's transceiver and link with `mlxlink -m -c` (or mstflint's "
        "`mstlink`) where the firmware audit reads (the deploy, `ccrhost check --refresh-nic`): module state, "
        "per-lane fault flags, DDM values against the ranges mlxlink prints, effective BER (gcm's check_mlxlink).",
    )
    verify_nic_raw_ber_max: float | None = Field(
        None, gt=0, lt=1, description="Raw (pre-FEC) physical BER above which a NIC's link WARNs; None: the raw "
        "BER is not judged (no sourced figure; the effective BER is judged against the IBTA's 1e-12).",
    )
    verify_nic_valid_for: int = Field(
        86400, ge=60, le=30 * 86400, description="Seconds a stored NIC firmware reading holds; an older one is "
        "UNKNOWN as stale.",
    )
    verify_nic_max_acc_out_read: tuple[Annotated[int, Field(ge=0, le=255)], ...] = Field(
        (0, 44, 128), min_length=1, description="MAX_ACC_OUT_READ values allowed (NVIDIA's NIC configuration "
        "operator: 0 = auto, or 44 or 128; OCI's and DGX's Max ACC checks).",
    )
    verify_nic_ats_enabled: bool = Field(
        False, description="The ATS_ENABLED wanted: off for bare-metal GPUDirect (the operator's "
        "gpuDirectOptimized); on only where a VM's IOMMU needs it.",
    )
    verify_nic_link_type: Literal[1, 2] | None = Field(
        None, description="LINK_TYPE_P1 wanted (1 InfiniBand, 2 Ethernet) on NICs that have it; None: not judged.",
    )
    # DCGM diagnostics (model/dcgm.py, node/dcgm.py; docs/dcgm.md)
    verify_dcgm: bool = Field(
        False, description="Judge the stored DCGM diag result (`dcgmi diag -r LEVEL -j`) in `ccrhost check`, the "
        "prolog and the health check (which read it with its age), and run the diag where a path's level "
        "(verify_dcgm_level_*) is above 0.",
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
        None, description="GB/s below which a GPU (or GPU pair) FAILS nvbandwidth's testcase, overriding the built-in "
        "figure (H200: 48 host to device and device to host, 335 device to device; H100: 52; docs/dcgm.md).",
    )
    verify_npd_warn_unhealthy: bool = Field(
        False, description="`ccrhost check --format npd` exits 1 (Node Problem Detector: problem) on WARN too; "
        "default: only FAIL is a problem.",
    )
    slurm_ccrhost: AbsPath = Field(
        "/usr/local/bin/ccrhost", description="The ccrhost command on the node, as the Slurm prolog and health check run it."
    )
    slurm_path: SearchPath = Field(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        description="PATH for the prolog and health check (slurmd runs them with none): nvidia-smi, scontrol.",
    )
    slurm_conf: AbsPath | None = Field(
        None, description="SLURM_CONF the scripts export for scontrol; default: Slurm's own (/etc/slurm/slurm.conf)."
    )
    slurm_fragment: AbsPath = Field(
        "/etc/slurm/ccrhost.conf", description="The slurm.conf fragment ccrhost writes; slurm.conf must `Include` it."
    )
    slurm_prolog: bool = Field(
        True, description="Set Prolog= in the fragment; off when the site's own prolog calls /etc/ccrhost/slurm-prolog.sh."
    )
    slurm_healthcheck_interval: int = Field(
        300, ge=0, le=86400, description="HealthCheckInterval, seconds (0: no periodic health check)."
    )
    slurm_healthcheck_node_state: str = Field(
        "ANY", description=f"HealthCheckNodeState: a comma list of {', '.join(HEALTHCHECK_STATES)}."
    )
    # --- the drain cap (issue 35): no drain storm; see ccrhost/model/drain_cap.py
    slurm_drain_cap_nodes: int | None = Field(
        None, ge=1, description="At most this many nodes drained by ccrhost for one reason code within "
        "slurm_drain_cap_window; past it the prolog keeps jobs off a failing node without draining it "
        "(none: only the share caps).",
    )
    slurm_drain_cap_share: float | None = Field(
        0.1, gt=0, le=1, description="At most this share of the node's partitions drained by ccrhost for one "
        "FAIL code within slurm_drain_cap_window (always at least one node; none: only the count caps).",
    )
    slurm_drain_cap_unknown_share: float | None = Field(
        0.05, gt=0, le=1, description="The same for an UNKNOWN code (a node that cannot be read), capped first: "
        "at most slurm_drain_cap_share.",
    )
    slurm_drain_cap_window: int = Field(
        3600, ge=60, le=30 * 86400, description="Seconds a ccrhost drain counts against the cap after it was set.",
    )
    slurm_drain_cap_textfile: AbsPath | None = Field(
        None, description="A node_exporter textfile the check writes when the drain cap holds on this node "
        "(ccrhost_drain_cap_held 1, per code) and clears when it no longer does; none: log and Slurm only.",
    )
    verify_report_dir: str = Field(
        "ccrhost-report", pattern=r"^[A-Za-z0-9_./-]{1,255}$",
        description="Where the controller writes the fleet report (JSON, JUnit, text, HTML).",
        json_schema_extra=CONTROLLER_ONLY,
    )

    # ccrhost on the compute nodes (deploys/install.py)
    ccrhost_install_dir: AbsPath = Field(
        "/usr/local/lib/ccrhost",
        description="Where deploys/install.py puts ccrhost on the node: a venv in `venv/`, the wheels it came from "
        "in `wheels/`; `slurm_ccrhost` becomes a link to `venv/bin/ccrhost`.",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_wheelhouse: str = Field(
        "ccrhost-wheelhouse", pattern=r"^[A-Za-z0-9_./-]{1,255}$",
        description="Folder on the controller with the ccrhost wheel of the controller's version and the wheels of "
        "its dependencies (`pip wheel --wheel-dir ccrhost-wheelhouse .` in the checkout); deploys/install.py "
        "uploads it, so the nodes need no network.",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_index_url: str | None = Field(
        None, pattern=r"^(https?://|file:///)[A-Za-z0-9_.:/@%+~-]{1,500}$",
        description="A package index the nodes reach (a site mirror: `https://`, or `file:///` on a shared "
        "folder; PEP 503 simple layout): the dependencies come from it, ccrhost itself still from the wheelhouse, "
        "which may then hold ccrhost's wheel alone. Default: none, the wheelhouse alone (pip --no-index).",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_python: str = Field(
        "python3", pattern=r"^(/[A-Za-z0-9_.+@/-]{1,254}|[A-Za-z0-9_.+-]{1,64})$",
        description="The node's Python (3.10 or later, with its venv module) that the venv is made with.",
        json_schema_extra=CONTROLLER_ONLY,
    )

    @field_validator("verify_profile")
    @classmethod
    def _known_profile(cls, value):
        if value is not None and value not in PROFILES:
            raise ValueError(f"allowed: {', '.join(PROFILES)}")
        return value

    @field_validator("roce_version", "nccl_cross_nic", mode="before")
    @classmethod
    def _not_a_bool(cls, value, info):
        # Literal[1, 2] alone takes true for 1 and 1.0 for 1 (True == 1.0 == 1 in Python)
        allowed = {"roce_version": "1 or 2", "nccl_cross_nic": "0, 1 or 2"}[info.field_name]
        if isinstance(value, bool):
            raise ValueError(f"allowed: {allowed} (a number, not true/false)")
        if isinstance(value, float):
            raise ValueError(f"allowed: {allowed} (a whole number, not {value!r})")
        return value

    @field_validator("verify_dcgm_timeouts", mode="before")
    @classmethod
    def _level_keys(cls, value):
        # a YAML (or JSON) round trip gives the level keys back as text: "2" is level 2
        if isinstance(value, dict):
            return {int(k) if isinstance(k, str) and k in ("1", "2", "3", "4") else k: v for k, v in value.items()}
        return value

    @field_validator("nccl_ib_addr_range")
    @classmethod
    def _cidr(cls, value):
        if value is not None:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError as exc:
                raise ValueError(f"allowed: an IPv4 or IPv6 network in CIDR form ({exc})") from None
        return value

    @field_validator("nccl_extra")
    @classmethod
    def _no_typed_twin(cls, value):
        for name in value or {}:
            if name in NCCL_TWINS:
                key = NCCL_TWINS[name]
                rule = _bounds(key) if key in cls.model_fields else None
                raise ValueError(f"{name} has its own key: set {key} instead"
                                 + (f" ({rule})" if rule else ""))
        return value

    @field_validator("slurm_healthcheck_node_state")
    @classmethod
    def _node_states(cls, value):
        words = value.split(",")
        if not value or any(w not in HEALTHCHECK_STATES for w in words) or len(set(words)) != len(words):
            raise ValueError(f"a comma list of {', '.join(HEALTHCHECK_STATES)}")
        return value

    @field_validator("slurm_fragment")
    @classmethod
    def _fragment_is_ours(cls, value):
        return _written_file(value, "/etc/slurm/ccrhost.conf")

    @field_validator(*STATE_PATHS)
    @classmethod
    def _state_is_ours(cls, value):
        return None if value is None else _written_file(value, _STATE_EXAMPLE)

    @field_validator("slurm_drain_cap_textfile")
    @classmethod
    def _cap_textfile_is_ours(cls, value):
        return None if value is None else _written_file(value, "/var/lib/node_exporter/textfile/ccrhost-drain-cap.prom")

    @field_validator("slurm_ccrhost", "slurm_conf")
    @classmethod
    def _names_a_file(cls, value):
        problem = _file_name_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("verify_report_dir")
    @classmethod
    def _report_dir(cls, value):
        # a folder the controller writes four report files into; relative
        # paths are the operator's working directory's business
        if not value.startswith("/"):
            return value
        plain = "/" + "/".join(p for p in value.split("/") if p)
        if any(p in (".", "..") for p in value.split("/")):
            raise ValueError("has a '.' or '..' component; allowed: a plain absolute path or a relative one")
        if plain == "/":
            raise ValueError("is the root folder; allowed: a folder of the reports' own, such as ccrhost-report")
        tree = _system_tree(plain)
        folder = next((f for f in ETC_DROPIN_FOLDERS if _within(plain, f)), None)
        if tree or folder or plain in ("/etc", "/var", "/run", "/home", "/root", "/opt", "/srv", "/tmp", "/mnt"):
            where = f"under {tree}" if tree else f"in {folder}" if folder else "a top-level system folder"
            raise ValueError(f"is a system folder ({where}); allowed: a folder of the reports' own, "
                             "such as ccrhost-report or /var/lib/ccrhost/report")
        return value

    @field_validator("verify_gpu_tflops")
    @classmethod
    def _positive_tflops(cls, value):
        for precision, tflops in (value or {}).items():
            if not tflops > 0:
                raise ValueError(f"{precision}: TFLOPS must be positive")
        return value

    def model_post_init(self, _context) -> None:
        if self.roce_dscp == self.qos_cnp_dscp:
            raise ValueError(f"[qos_cnp_dscp] {self.qos_cnp_dscp} is also roce_dscp: CNPs need their own DSCP")
        mapped = {self.qos_roce_priority, self.qos_cnp_priority}
        for prio in self.qos_pfc_priorities or ():
            if prio not in mapped:
                raise ValueError(
                    f"[qos_pfc_priorities] PFC on priority {prio}, but no configured DSCP maps to it "
                    f"(roce_dscp {self.roce_dscp} -> {self.qos_roce_priority}, "
                    f"qos_cnp_dscp {self.qos_cnp_dscp} -> {self.qos_cnp_priority})"
                )
        if self.verify_gpu_model and lookup_gpu(self.verify_gpu_model) is None and not self.verify_gpu_tflops:
            raise ValueError(
                f"[verify_gpu_model] {self.verify_gpu_model!r} is not in the peak-TFLOPS table; give its "
                "datasheet figures in verify_gpu_tflops, or use an NVML name such as 'NVIDIA H100 80GB HBM3'"
            )
        model = self.expectation().gpu_model
        if model and self.verify_gpu_tflops and self.verify_precision not in self.verify_gpu_tflops:
            try:
                peak_tflops(model, self.verify_precision)
            except PeakUnknown as exc:
                gave = ", ".join(self.verify_gpu_tflops)
                raise ValueError(
                    f"[verify_gpu_tflops/verify_precision] verify_gpu_tflops gives {gave} only, but "
                    f"verify_precision is {self.verify_precision} and {exc}: every host would be UNKNOWN; "
                    f"add its {self.verify_precision} figure to verify_gpu_tflops"
                ) from None
        if (self.slurm_drain_cap_unknown_share and self.slurm_drain_cap_share
                and self.slurm_drain_cap_unknown_share > self.slurm_drain_cap_share):
            raise ValueError(f"[slurm_drain_cap_unknown_share] {self.slurm_drain_cap_unknown_share} is above "
                             f"slurm_drain_cap_share {self.slurm_drain_cap_share}: UNKNOWN drains are capped first")
        for key in WRITTEN_PATHS:
            path = getattr(self, key)
            if path is None:  # not kept (verify_history's default)
                continue
            if path == (self.slurm_conf or "/etc/slurm/slurm.conf"):
                raise ValueError(f"[{key}] {path} is Slurm's own slurm.conf (slurm_conf)")
            for other in PATH_SETTINGS:
                if other != key and path == getattr(self, other):
                    raise ValueError(f"[{key}] {path} is also {other}: each file has one use")
        if self.verify_beta is not None and self.verify_workload is not None:
            raise ValueError("[verify_beta/verify_workload] set verify_beta or verify_workload, not both")
        if self.nccl_ib_addr_range is not None:
            family = ipaddress.ip_network(self.nccl_ib_addr_range, strict=False).version
            if family != (6 if self.nccl_ib_addr_family == "AF_INET6" else 4):
                raise ValueError(f"[nccl_ib_addr_range] {self.nccl_ib_addr_range} is an IPv{family} network but "
                                 f"nccl_ib_addr_family is {self.nccl_ib_addr_family}")
        if self.nccl_ib_gid_index is not None and self.nccl_ib_addr_family == "AF_INET6":
            raise ValueError("[nccl_ib_gid_index] pins an IPv4 GID; it cannot go with nccl_ib_addr_family AF_INET6")
        if self.verify_measure_timeout < self.verify_measure_seconds + 5:
            raise ValueError(
                f"[verify_measure_timeout] {self.verify_measure_timeout} must exceed verify_measure_seconds "
                f"({self.verify_measure_seconds}) by at least 5"
            )

    @classmethod
    def node_keys(cls) -> list[str]:
        """Every key the node-local check reads: all but the controller's own."""
        return [k for k, f in cls.model_fields.items() if f.json_schema_extra != CONTROLLER_ONLY]

    def expectation(self) -> Expectation:
        base = PROFILES.get(self.verify_profile or "", Expectation())
        return Expectation(
            gpu_model=self.verify_gpu_model or base.gpu_model,
            gpu_count=self.verify_gpu_count if self.verify_gpu_count is not None else base.gpu_count,
            ports=self.verify_ports if self.verify_ports is not None else base.ports,
            port_gbps=self.verify_port_gbps or base.port_gbps,
            rail_local=self.verify_rail_local if self.verify_rail_local is not None else base.rail_local,
        )

    def check_settings(self):
        """What ``ccrhost check`` uses of these settings (a record it can keep)."""
        from ccrhost.model.check_settings import CheckSettings

        return CheckSettings(tuple(self.rdma_exclude_devices), self.verify_link_state, self.verify_gpu_state,
                             self.verify_window_max_age, self.verify_npd_warn_unhealthy, self.expectation(),
                             self.policy(), self.drain_cap(), self.allreduce_state,
                             nic_fw_state=self.nic_fw_state, verify_nic_valid_for=self.verify_nic_valid_for,
                             verify_history=self.verify_history, verify_evidence_dir=self.verify_evidence_dir,
                             verify_evidence_max_age_days=self.verify_evidence_max_age_days,
                             verify_evidence_keep=self.verify_evidence_keep,
                             verify_evidence_bug_report=self.verify_evidence_bug_report, dcgm_state=self.dcgm_state)

    def drain_cap(self):
        """The drain cap (``slurm_drain_cap_*``)."""
        from ccrhost.model.drain_cap import DrainCap

        return DrainCap(self.slurm_drain_cap_nodes, self.slurm_drain_cap_share, self.slurm_drain_cap_unknown_share,
                        self.slurm_drain_cap_window, self.slurm_drain_cap_textfile)

    @property
    def allreduce_state(self) -> str | None:
        """The state file whose all-reduce results a check judges; None when the gate is off."""
        return self.verify_allreduce_state if self.verify_allreduce else None

    @property
    def dcgm_state(self) -> str | None:
        """The state file whose DCGM diag result a check judges; None when verify_dcgm is off."""
        return self.verify_dcgm_state if self.verify_dcgm else None

    def workload_problems(self) -> list[wl.Problem]:
        """The workload against the declared GPUs per node; when none is
        declared, the verification checks it against the GPUs it finds."""
        if self.verify_workload is None:
            return []
        if self.verify_workload.missing():
            return self.verify_workload.missing()
        spec, gpus = self.verify_workload.spec(), self.expectation().gpu_count
        peak = wl.peak_precision_problem(self.verify_precision, spec)
        return (wl.spec_problems(spec) + (wl.topology_problems(spec, gpus) if gpus else [])
                + ([peak] if peak else []))

    def policy(self) -> Policy:
        workload = self.verify_workload
        return Policy(
            precision=self.verify_precision,
            beta=self.verify_beta or ccrmod.SEED_BETA,
            workload=workload.spec() if workload else None,
            bandwidth_model=self.verify_bandwidth_model,
            min_ccr=self.verify_min_ccr,
            min_ccr_fraction=self.verify_min_ccr_fraction,
            gpu_tflops=dict(self.verify_gpu_tflops) if self.verify_gpu_tflops else None,
            measure_min_fraction=self.verify_measure_min_fraction,
            link_thresholds=dp.LinkThresholds(**(self.verify_link_thresholds or {})),
            fabric=fabric.FabricPolicy(
                pause_share=self.verify_pause_share_max,
                pfc=self.qos_enable and any(self.qos_wanted().pfc),
                warn_per_hour=_limits(fabric.DEFAULT_WARN_PER_HOUR, self.verify_fabric_warn_per_hour),
                fail_per_hour=_limits(fabric.DEFAULT_FAIL_PER_HOUR, self.verify_fabric_fail_per_hour),
                window_s=self.verify_window_max_age,
                flap_lookback_s=self.verify_link_flap_lookback_hours * 3600,
                flap_max=self.verify_link_flap_max),
            window_max_age=self.verify_window_max_age,
            history=HistoryPolicy(self.verify_replace_failures, self.verify_replace_window_hours * 3600,
                                  self.verify_history_entries),
            required_versions=dp.RequiredVersions(self.verify_required_nic_fw, self.verify_required_mlx5,
                                                  self.verify_required_nvidia),
            gpu_health=GpuHealthPolicy(
                xid_lookback_s=self.verify_gpu_xid_lookback_hours * 3600, xid_ignore=tuple(self.verify_gpu_xid_ignore),
                ecc_correctable_max=self.verify_gpu_ecc_correctable_max,
                nvlink_errors_per_min=self.verify_gpu_nvlink_errors_per_min,
                pcie_replays_per_min=self.verify_gpu_pcie_replays_per_min,
                hw_slowdown_level=self.verify_gpu_hw_slowdown),
            nic_fw=self.nic_fw_policy(),
        )

    def nic_fw_profile(self) -> dict:
        """The NIC firmware profile's parameters (its CNP values are this host's QoS settings)."""
        from ccrhost.model.nicfw import default_profile

        return default_profile(self.qos_cnp_dscp, self.qos_cnp_priority, tuple(self.verify_nic_max_acc_out_read),
                               self.verify_nic_link_type, self.verify_nic_ats_enabled)

    def nic_fw_policy(self):
        """How a check judges the NICs' stored readings; None when neither the audit nor the optics is
        on (a check then never imports them)."""
        if not (self.verify_nic_firmware or self.verify_nic_optics):
            return None
        from ccrhost.model.nicfw import NicFwPolicy

        return NicFwPolicy(self.verify_nic_firmware, self.nic_fw_profile(), self.verify_nic_optics,
                           self.verify_nic_raw_ber_max)

    @property
    def nic_fw_state(self) -> str | None:
        """The state file whose NIC firmware readings a check judges; None when the audit is off."""
        return self.verify_allreduce_state if self.verify_nic_firmware or self.verify_nic_optics else None

    def qos_wanted(self) -> Wanted:
        pfc = set(self.qos_pfc_priorities if self.qos_pfc_priorities is not None else (self.qos_roce_priority,))
        return Wanted(
            dscp_map={self.roce_dscp: self.qos_roce_priority, self.qos_cnp_dscp: self.qos_cnp_priority},
            pfc=tuple(int(p in pfc) for p in range(8)),
            ecn_priorities=tuple(self.ecn_priorities if self.ecn_priorities is not None else (self.qos_roce_priority,)),
            ecn_rp=self.ecn_rp, ecn_np=self.ecn_np,
            cnp_dscp=self.qos_cnp_dscp, cnp_802p_prio=self.qos_cnp_priority,
            dcqcn=dict(self.dcqcn_params or {}),
            cable_len=self.qos_cable_len,
            buffer_size=self.qos_buffer_size, prio2buffer=self.qos_prio2buffer,
        )

    def nic_devctl(self, vendor: int | None) -> tuple[int | None, bool | None]:
        """(MaxReadReq, relaxed ordering) wanted on a NIC of this PCI
        vendor; None: leave that field as it is."""
        read_req = self.rdma_nic_max_read_req
        if read_req is None and self.rdma_nic_pcie_optimize and vendor == dp.CONNECTX_VENDOR:
            read_req = dp.CONNECTX_MAX_READ_REQ
        return read_req, self.rdma_nic_relaxed_ordering

    @property
    def roce_tos(self) -> int:
        """The ToS byte: DSCP in the upper six bits, ECN in the lower two."""
        return tos_byte(self.roce_dscp, self.roce_ecn_bits)

    @property
    def roce_mode(self) -> str:
        return "RoCE v2" if self.roce_version == 2 else "IB/RoCE v1"


@dataclass(frozen=True)
class DataError:
    where: str  # host name (or "inventory")
    key: str
    value: Any
    allowed: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key} = {self.value!r}: {self.allowed}"


class InventoryDataError(Exception):
    def __init__(self, errors: list[DataError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _limits(defaults: dict, given: dict | None) -> dict:
    """The per-hour limits in force: the defaults, with the host's values
    (a null removes that counter's limit)."""
    out = {**defaults, **(given or {})}
    return {k: v for k, v in out.items() if v is not None}


def _bounds(key: str) -> str | None:
    field = HostSettings.model_fields.get(key)
    lo = hi = None
    for item in getattr(field, "metadata", []):
        lo = getattr(item, "ge", lo)
        hi = getattr(item, "le", hi)
    if lo is not None and hi is not None:
        kind = "integers " if field.annotation in (int, int | None) else ""
        return f"allowed: {kind}{lo} to {hi}"
    return None


def _describe(key: str, error: dict) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        if key == "verify_link_thresholds":
            return "allowed: integers 0 to 65535"
        return _bounds(key) or error["msg"]
    if kind == "extra_forbidden" and key == "verify_workload":
        return f"unknown key; allowed: {', '.join(Workload.model_fields)}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    return error["msg"].removeprefix("Value error, ")


def owned_keys(data: dict) -> dict:
    return {k: v for k, v in data.items() if k.startswith(OWNED_PREFIXES)}


def validate_host(name: str, data: dict) -> HostSettings:
    """Validate one host's data; raise InventoryDataError with every problem."""
    mine = owned_keys(data)
    known = set(HostSettings.model_fields)
    errors = []
    for key in sorted(set(mine) - known):
        import difflib  # only for a key that is not known

        close = difflib.get_close_matches(key, known, n=1)
        hint = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key"
        hint = REMOVED_KEYS.get(key, hint)
        errors.append(DataError(name, key, mine.pop(key), hint))
    # YAML/py data gives lists; the model stores tuples.
    for key, value in mine.items():  # YAML and Python data give lists; the model holds tuples
        if isinstance(value, list):
            mine[key] = tuple(value)
    try:
        settings = HostSettings(**mine)
    except ValidationError as exc:
        for err in exc.errors():
            if not err["loc"]:  # a rule across keys (model_post_init)
                # cross-key rules raise "[key] message"
                keys, _, msg = err["msg"].removeprefix("Value error, [").partition("] ")

                def given(k):  # the value in force: the host's, else the default
                    field = HostSettings.model_fields.get(k)
                    return mine[k] if k in mine else field.default if field else None
                value = {k: given(k) for k in keys.split("/")} if "/" in keys else given(keys)
                errors.append(DataError(name, keys, value, msg))
                continue
            key = str(err["loc"][0])
            value = mine.get(key)
            if len(err["loc"]) > 1:
                key = f"{key}[{err['loc'][1]}]"
                value = err.get("input")
            errors.append(DataError(name, key, value, _describe(str(err['loc'][0]), err)))
        settings = None
    for problem in settings.workload_problems() if settings else ():
        allowed = problem.allowed
        if problem.key in ("tp_size", "dp_size"):
            allowed += " (GPUs per node from verify_gpu_count / verify_profile)"
        errors.append(DataError(name, f"verify_workload[{problem.key}]", problem.value, allowed))
    if errors:
        raise InventoryDataError(errors)
    return settings


def validate_all(hosts: dict[str, dict]) -> dict[str, HostSettings]:
    """Validate every host; report all problems of all hosts at once."""
    if not hosts:
        raise InventoryDataError([DataError("inventory", "hosts", [], "at least one host is required")])
    settings, errors = {}, []
    for name, data in hosts.items():
        try:
            settings[name] = validate_host(name, data)
        except InventoryDataError as exc:
            errors.extend(exc.errors)
    if errors:
        raise InventoryDataError(errors)
    return settings
