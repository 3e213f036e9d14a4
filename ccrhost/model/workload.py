"""What one training job asks of one node's network: the workload model
behind the node CCR. Pure functions, no I/O.

The CCR compares the time a node computes with the time its NICs need for
the job's inter-node traffic, both per training step::

    CCR = B / (beta x F) = compute_s / comm_s
    beta = NIC bytes per node per step / FLOPs per node per step

B is the node's NIC bandwidth (all compute ports together), F its peak
dense FLOP/s. Per node, not per GPU: on an NVLink node the GPUs reduce
among themselves first, so the NICs together carry one copy of the
gradient, not one per GPU (nccl-tests' multi-node all_reduce busbw tops
out at the node's total NIC bandwidth).

Assumptions, stated once here and in every result (``ASSUMPTIONS``):
whole nodes per pipeline stage, tensor parallelism inside a node, peak
FLOP/s and NIC line rate, 6 FLOPs per parameter per token.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ccrhost.model import ccr as ccrmod

# Training precision -> bytes per value on the wire (the guide's step 4).
# fp8 training (Transformer Engine, MS-AMP) moves 1-byte values; where a
# job reduces its gradients in a wider type, grad_bytes_per_param says so.
TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
VALUE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
SHARDING = ("none", "optimizer", "full")
REDUCTION = ("hierarchical", "flat")
# Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1:
# C = 6N FLOPs per token for training (2N forward, 4N backward).
FLOPS_PER_PARAM_TOKEN = 6
NOT_NETWORK_BOUND = "not-network-bound"

ASSUMPTIONS = (
    "compute: 6 FLOPs per parameter per token (Kaplan et al. 2020), no activation recompute, at peak dense F",
    "network: the node's NICs at line rate B, all of them busy with every collective (NCCL rails)",
    "tensor parallelism stays inside the node (its traffic is on NVLink, not counted)",
    "each pipeline stage fills whole nodes; pipeline sends are exposed (not overlapped)",
    "overlap hides at most the step's compute time of the gradient traffic",
    "compression multiplies the gradient bytes only; its own compute cost is not counted",
)


@dataclass(frozen=True)
class WorkloadSpec:
    """One training job, in the keys of ``verify_workload`` (validated there)."""

    tokens_per_gpu_step: float  # the job's tokens per step / its GPU count
    dp_size: int  # data-parallel degree (replicas of the model)
    precision: str = "bf16"  # training precision: gradient, parameter and activation bytes
    grad_bytes_per_param: float | None = None  # overrides the gradient bytes (e.g. 4: fp32 reduction)
    tp_size: int = 1  # tensor-parallel degree, inside a node
    pp_size: int = 1  # pipeline stages, across nodes
    sharding: str = "none"  # none: all-reduce; optimizer: ZeRO-1/2; full: ZeRO-3/FSDP
    reduction: str = "hierarchical"  # hierarchical (NVLink first) or flat (every GPU through its NIC)
    compression: float = 1.0  # gradient bytes on the wire / uncompressed, (0, 1]
    overlap: float = 0.0  # share of gradient traffic hidden behind backward, [0, 1]
    hidden_size: int | None = None  # model width, for the pipeline's activation sends
    params: float | None = None  # total parameters; needed with pp_size > 1

    @property
    def grad_bytes(self) -> float:
        return self.grad_bytes_per_param if self.grad_bytes_per_param is not None else VALUE_BYTES[self.precision]

    @property
    def value_bytes(self) -> int:
        return VALUE_BYTES[self.precision]


@dataclass(frozen=True)
class Problem:
    """A workload key that does not fit the node it runs on."""

    key: str
    value: object
    allowed: str

    def __str__(self) -> str:
        return f"{self.key} = {self.value!r}: {self.allowed}"


def spec_problems(spec: WorkloadSpec) -> list[Problem]:
    """Rules that need only the workload (the inventory's schema checks them too)."""
    problems = []
    if not 0 < spec.compression <= 1:
        problems.append(Problem("compression", spec.compression,
                                "allowed: a ratio in (0, 1], compressed / uncompressed gradient bytes "
                                "(2-bit of bf16 = 0.125)"))
    if not 0 <= spec.overlap <= 1:
        problems.append(Problem("overlap", spec.overlap,
                                "allowed: a fraction in [0, 1] of the gradient traffic hidden behind backward"))
    if spec.pp_size > 1 and (spec.hidden_size is None or spec.params is None):
        problems.append(Problem("pp_size", spec.pp_size,
                                "pipeline stages send activations: give hidden_size and params with pp_size > 1"))
    return problems


def topology_problems(spec: WorkloadSpec, gpus_per_node: int) -> list[Problem]:
    """Rules that need the node's GPU count: TP fits in the node, stages fill whole nodes."""
    g = gpus_per_node
    problems = []
    if g < 1:
        return [Problem("tp_size", spec.tp_size, "the node has no GPU to run the workload on")]
    if spec.tp_size > g or g % spec.tp_size:
        problems.append(Problem("tp_size", spec.tp_size,
                                f"allowed: a divisor of the {g} GPUs per node (tensor parallelism stays "
                                "inside the node's NVLink)"))
    elif (spec.dp_size * spec.tp_size) % g:
        per_node = g // spec.tp_size
        problems.append(Problem("dp_size", spec.dp_size,
                                f"allowed: a multiple of {per_node} ({g} GPUs per node / tp_size "
                                f"{spec.tp_size}), so that each pipeline stage fills whole nodes"))
    return problems


def gradient_bytes(spec: WorkloadSpec, gpus_per_node: int, stage_nodes: int, stage_params: float) -> float:
    """Bytes one node's NICs send per step to synchronise the data-parallel copies.

    Ring collectives (Patarasuk & Yuan 2009; NCCL): over n members a
    reduce-scatter or an all-gather of S bytes sends (n-1)/n x S per member,
    an all-reduce (the two in sequence) 2(n-1)/n x S.

    - hierarchical (default): the GPUs of a node reduce over NVLink first,
      so each node is one member holding one copy of its stage's gradients
      (S = stage_params x grad bytes) and n = the nodes of the stage
      (Jia et al. 2018, arXiv:1807.11205, hierarchical all-reduce; NCCL's
      rail-aligned rings move the same volume, the issue-15 derivation).
    - flat: every GPU is a member reaching the others through a NIC: n =
      dp_size, each of the node's GPUs sending its own shard
      (S = stage_params / tp_size x grad bytes, times GPUs per node). This
      is the per-GPU formula ccrhost used before this model, an upper bound
      for nodes without NVLink.

    Volumes by ``sharding`` (Rajbhandari et al. 2020, ZeRO, sec. 7):
    none, all-reduce of gradients: 2(n-1)/n x S_grad; optimizer (ZeRO-1/2),
    reduce-scatter of gradients plus all-gather of the updated parameters:
    (n-1)/n x (S_grad + S_param); full (ZeRO-3/FSDP), reduce-scatter plus an
    all-gather before forward and again before backward: (n-1)/n x (S_grad +
    2 S_param), 1.5x plain data parallelism at equal byte widths.
    ``compression`` scales the gradient part only (the guide's step 3).
    A stage on one node reduces without its NICs in either mode: 0 bytes.
    """
    if stage_nodes == 1:
        return 0.0
    if spec.reduction == "flat":
        members, values = spec.dp_size, gpus_per_node * stage_params / spec.tp_size
    else:
        members, values = stage_nodes, stage_params
    share = (members - 1) / members
    grad = values * spec.grad_bytes * spec.compression
    param = values * spec.value_bytes
    if spec.sharding == "none":
        return 2 * share * grad
    if spec.sharding == "optimizer":
        return share * (grad + param)
    return share * (grad + 2 * param)


def activation_bytes(spec: WorkloadSpec, gpus_per_node: int) -> float:
    """Bytes the busiest node's NICs send per step at pipeline-stage boundaries.

    Each replica processes tokens_per_gpu_step x tp_size x pp_size tokens a
    step (its GPUs' share of the batch); at a boundary it sends a hidden_size
    vector per token forward and the same-sized gradient backward (Narayanan
    et al. 2021, arXiv:2104.04473, sec. 3.2: Megatron splits the send across
    its TP ranks, the total is unchanged). A node holds gpus_per_node /
    tp_size replicas of its stage. A middle stage sends both ways (forward
    to the next stage, backward to the previous), an end stage one way; with
    three stages or more the middle one is the busiest:

        bytes = sends x (g / tp) x (T x tp x pp) x hidden x value bytes
              = sends x g x T x pp x hidden x value bytes
    """
    if spec.pp_size == 1:
        return 0.0
    sends = 2 if spec.pp_size > 2 else 1
    return sends * gpus_per_node * spec.tokens_per_gpu_step * spec.pp_size * spec.hidden_size * spec.value_bytes


def node_flops(spec: WorkloadSpec, gpus_per_node: int, params: float) -> float:
    """FLOPs one node computes per step: 6 x params x tokens for each GPU's
    share (Kaplan et al. 2020). tokens_per_gpu_step is per GPU whatever the
    parallelism, so TP and PP change who computes, not how much per GPU."""
    return FLOPS_PER_PARAM_TOKEN * gpus_per_node * spec.tokens_per_gpu_step * params


@dataclass(frozen=True)
class NodeModel:
    """The workload model's answer for one node. Byte, FLOP and time
    figures are per parameter when ``params`` is None (they scale with it)."""

    spec: WorkloadSpec
    gpus_per_node: int
    bandwidth_gbps: float  # B, the node's NICs together
    tflops: float  # F, the node's GPUs together
    params: float | None
    nodes: int  # the job's nodes
    stage_nodes: int  # nodes per pipeline stage: the data-parallel reduction spans them
    grad_bytes: float  # gradient sync bytes the node's NICs send per step
    act_bytes: float  # pipeline activation bytes the node's NICs send per step
    flops: float  # node FLOPs per step
    compute_s: float
    grad_s: float
    act_s: float

    @property
    def nic_bytes(self) -> float:
        return self.grad_bytes + self.act_bytes

    @property
    def beta(self) -> float:
        """Bytes per FLOP for the node: NIC bytes / FLOPs per step."""
        return self.nic_bytes / self.flops

    @property
    def comm_s(self) -> float:
        return self.grad_s + self.act_s

    @property
    def ccr(self) -> float:
        """compute_s / comm_s = B / (beta x F); infinite without inter-node traffic."""
        return math.inf if self.comm_s == 0 else self.compute_s / self.comm_s

    @property
    def band(self) -> str:
        return NOT_NETWORK_BOUND if self.comm_s == 0 else ccrmod.band(self.ccr)

    @property
    def exposed_s(self) -> float:
        """Communication the step waits for. Overlap hides a share of the
        gradient traffic behind backward, never more than the compute time
        there is to hide it behind (the guide's step 3); pipeline sends sit
        between micro-batches on the critical path and stay exposed."""
        hidden = min(self.spec.overlap * self.grad_s, self.compute_s) if self.spec.overlap else 0.0
        return self.grad_s - hidden + self.act_s

    @property
    def exposed_comm_fraction(self) -> float:
        """Exposed communication / step time, step = compute + exposed."""
        if math.isinf(self.exposed_s):
            return 1.0
        return self.exposed_s / (self.compute_s + self.exposed_s)

    @property
    def slowdown(self) -> float:
        """Step time / the step time on a network that is never the bottleneck."""
        return (self.compute_s + self.exposed_s) / self.compute_s

    def statement(self) -> str:
        s = self.spec
        unit = "" if self.params else "/param"
        where = (f"{s.reduction} DP over {self.stage_nodes} nodes per stage" if self.stage_nodes > 1
                 else "DP inside one node")
        return (f"{where}, {self.nodes} node(s) x {self.gpus_per_node} GPUs, dp {s.dp_size} tp {s.tp_size} "
                f"pp {s.pp_size}, {s.precision} ({s.grad_bytes:g} B/grad), sharding {s.sharding}, "
                f"compression {s.compression:g}, overlap {s.overlap:g}: NIC {self.nic_bytes:.4g} B{unit}, "
                f"compute {self.flops:.4g} FLOP{unit} per step; beta {self.beta:.4g} B/FLOP; "
                + ("CCR: no inter-node traffic, not network-bound" if self.comm_s == 0 else
                   f"CCR {self.ccr:.4g} ({self.band}), exposed communication {self.exposed_comm_fraction:.1%} "
                   f"of the step, slowdown x{self.slowdown:.3f}"))

    def to_dict(self) -> dict:
        return {
            "inputs": asdict(self.spec),
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "stage_nodes": self.stage_nodes,
            "params": self.params,
            "per_parameter": self.params is None,
            "grad_bytes_per_node_step": self.grad_bytes,
            "activation_bytes_per_node_step": self.act_bytes,
            "nic_bytes_per_node_step": self.nic_bytes,
            "flops_per_node_step": self.flops,
            "beta": self.beta,
            "ccr": None if self.comm_s == 0 else self.ccr,
            "band": self.band,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s if math.isfinite(self.comm_s) else None,
            "exposed_comm_s": self.exposed_s if math.isfinite(self.exposed_s) else None,
            "exposed_comm_fraction": self.exposed_comm_fraction,
            "slowdown": self.slowdown if math.isfinite(self.slowdown) else None,
            "statement": self.statement(),
            "assumptions": list(ASSUMPTIONS),
        }


class WorkloadError(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def node_model(spec: WorkloadSpec, gpus_per_node: int, bandwidth_gbps: float, tflops: float) -> NodeModel:
    """The workload on one node of ``gpus_per_node`` GPUs, ``bandwidth_gbps``
    of NICs and ``tflops`` of compute. Raises WorkloadError naming each key
    that does not fit.

    Time = work / rate: comm_s = bytes / (B x 1e9 / 8), compute_s = FLOPs /
    (F x 1e12), the same unit conversions as ``ccr.ccr``.
    """
    problems = spec_problems(spec) + topology_problems(spec, gpus_per_node)
    if problems:
        raise WorkloadError(problems)
    if bandwidth_gbps < 0 or tflops <= 0:
        raise ValueError("compute must be positive and bandwidth not negative")
    g = gpus_per_node
    stage_nodes = spec.dp_size * spec.tp_size // g
    params = spec.params if spec.params is not None else 1.0
    grad = gradient_bytes(spec, g, stage_nodes, params / spec.pp_size)
    act = activation_bytes(spec, g)
    flops = node_flops(spec, g, params)
    byte_rate = bandwidth_gbps * 1e9 / 8

    def seconds(nbytes: float) -> float:  # no NIC left: traffic never completes
        return nbytes / byte_rate if byte_rate else (math.inf if nbytes else 0.0)

    return NodeModel(
        spec=spec, gpus_per_node=g, bandwidth_gbps=bandwidth_gbps, tflops=tflops, params=spec.params,
        nodes=stage_nodes * spec.pp_size, stage_nodes=stage_nodes,
        grad_bytes=grad, act_bytes=act, flops=flops,
        compute_s=flops / (tflops * 1e12), grad_s=seconds(grad), act_s=seconds(act),
    )
