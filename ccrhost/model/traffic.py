"""The bytes one node's NICs send per training step for each kind of
parallelism: data-parallel sync, pipeline sends, the expert all-to-all and
the context-parallel K/V exchange. Pure functions, no I/O; the formulas'
derivations are in docs/ccr-model.md.
"""

from __future__ import annotations

from ccrhost.model.workload import WorkloadSpec


def _share(op: str, algorithm: str, ranks: int, nodes: int) -> float:
    """Bytes a node's NICs send per byte of the collective's buffer.

    ring (nccl-tests PERFORMANCE.md; Patarasuk & Yuan 2009): N ranks, the
    ring leaves each node once: all-reduce 2(N-1)/N, reduce-scatter or
    all-gather (N-1)/N. tree (NCCL tree, hierarchical all-reduce, Jia et
    al. 2018): the same over the m nodes. nvls: NVLink SHARP reduces inside
    the node only; between nodes NCCL runs NVLS-tree, the tree's volume.
    sharp (InfiniBand SHARP / CollNet, between nodes): an all-reduce's data
    leaves each node once and the switch returns the sum (NVIDIA SHARP docs,
    "Using NVIDIA SHARP with NVIDIA NCCL"): 1; reduce-scatter and
    all-gather gain nothing from a switch reduction and move what tree
    moves. A group inside one node: 0."""
    if nodes <= 1:
        return 0.0
    base = ranks if algorithm == "ring" else nodes
    once = (base - 1) / base
    if op == "all-reduce":
        return 1.0 if algorithm == "sharp" else 2 * once
    return once



def data_parallel_bytes(spec: WorkloadSpec, g: int, stage_nodes: int, params: float) -> tuple[float, float]:
    """(backward, forward) bytes one node's NICs send per step to keep the
    data-parallel copies in step; a stage on one node sends none.

    The replica's stage holds params / pp_size parameters; the dense ones
    are reduced over the N = dp x cp data-parallel ranks on the stage's m
    nodes, the routed experts' over the N/ep expert-data-parallel ranks on
    m / n_ep nodes, each node holding 1/n_ep of them (n_ep = the nodes an
    expert-parallel group spans). By ``sharding`` (Rajbhandari et al. 2020,
    ZeRO, sec. 7): none, an all-reduce of gradients (backward); optimizer
    (ZeRO-1/2), a reduce-scatter of gradients (backward) and an all-gather
    of updated parameters (before the next forward); full (ZeRO-3/FSDP), the
    reduce-scatter, an all-gather before forward and another before backward.
    ``compression`` scales the gradient part only (the CCR guide's step 3).
    """
    gb, pb, _ = spec.widths
    ranks = spec.dp_size * spec.cp_size
    expert = (spec.expert_params or 0.0) if spec.moe else 0.0
    n_ep = max(1, spec.ep_size * spec.tp_size // g) if spec.moe else 1
    pieces = [((params - expert) / spec.pp_size, ranks, stage_nodes)]
    if expert:
        pieces.append((expert / spec.pp_size / n_ep, ranks // spec.ep_size, stage_nodes // n_ep))
    bwd = fwd = 0.0
    for values, n, m in pieces:
        grad = values * gb * spec.compression
        if spec.sharding == "none":
            bwd += _share("all-reduce", spec.algorithm, n, m) * grad
            continue
        once = _share("reduce-scatter", spec.algorithm, n, m)
        bwd += once * grad
        fwd += once * values * pb
        if spec.sharding == "full":
            bwd += once * values * pb
    return bwd, fwd


def pipeline_bytes(spec: WorkloadSpec, g: int) -> float:
    """Bytes the busiest node's NICs send per step at pipeline-stage boundaries.

    Each replica processes tokens_per_gpu_step x tp x cp x pp tokens a
    step; a node holds g / (tp x cp) replica slices of its stage, so g x T x
    pp tokens cross its stage, each sending a hidden_size vector forward and
    its gradient backward (Narayanan et al. 2021, arXiv:2104.04473, sec. 3.2:
    Megatron splits the send across TP ranks, the total is unchanged). A
    middle stage sends both ways, an end stage one way; with v interleaved
    chunks a stage sends at each chunk's boundary (sec. 2.2.2: "the amount of
    communication also increases by v"): 2v sends (pp > 2), 2v - 1 (pp 2).

        bytes = sends x g x T x pp x hidden x activation bytes
    """
    if spec.pp_size == 1:
        return 0.0
    v = spec.virtual_stages
    sends = 2 * v if spec.pp_size > 2 else 2 * v - 1
    return sends * g * spec.tokens_per_gpu_step * spec.pp_size * spec.hidden_size * spec.widths[2]


def moe_bytes(spec: WorkloadSpec, g: int) -> float:
    """Expert all-to-all bytes a node's NICs send per step.

    A node routes g x T x pp tokens through each of its stage's moe_layers /
    pp MoE layers: g x T x moe_layers token-layers. Each token goes to top_k
    experts; buffers are sized capacity_factor x the even share (GShard,
    Lepikhin et al. 2020, sec. 2.2). Experts sit evenly on the n_ep nodes of
    the expert-parallel group, so (n_ep - 1)/n_ep of the copies leave the
    node. With node-limited routing (DeepSeek-V3 sec. 2.1.2 and 3.2.2: a
    token goes to at most M nodes, once over IB, then over NVLink to its
    experts there) the copies are M instead of top_k x cf. Each pass moves a
    hidden_size vector per copy out (dispatch, or in backward the gradient
    towards the experts) and back (combine, or its gradient): forward and
    backward, and the forward again with full recompute. DeepSeek-V3 sec.
    3.3.2 sends the dispatch and the activation gradient before the
    down-projection in FP8 and keeps both combines in BF16: dispatch_bytes 1,
    combine_bytes 2.

        bytes = passes x (dispatch + combine bytes) x g x T x moe_layers x copies x (n_ep-1)/n_ep x hidden
    """
    if not spec.moe or spec.ep_size * spec.tp_size <= g:
        return 0.0
    n_ep = spec.ep_size * spec.tp_size // g
    passes = 3 if spec.recompute == "full" else 2
    layers = spec.moe_layers if spec.moe_layers is not None else spec.layers
    copies = spec.top_k * spec.capacity_factor
    if spec.moe_max_nodes is not None:
        copies = min(copies, spec.moe_max_nodes)
    return (passes * sum(spec.a2a_widths) * g * spec.tokens_per_gpu_step * layers * copies
            * (n_ep - 1) / n_ep * spec.hidden_size)


def context_parallel_bytes(spec: WorkloadSpec, g: int) -> float:
    """K/V bytes a node's NICs send per step for context parallelism.

    The cp ranks of a group hold s/cp tokens each. Ring attention (Liu et
    al. 2023, arXiv:2310.01889; Megatron-Core context parallelism) passes
    their K and V blocks around the ring cp - 1 times per layer: per
    sequence and layer a node sends (cp-1) x s/cp x 2 x kv_size values;
    backward passes K, V and their gradients, twice that: 3 passes. The
    all-gather method (Llama 3, arXiv:2407.21783 sec. 3.3.2) gathers K and V
    once forward, the same (cp-1)/cp volume, keeps them, and reduce-scatters
    their gradients backward: 2 passes. Full recompute gathers once more (+1).
    A node hosts one group's slice; the group handles T x tp x cp x layers /
    s sequence-layers a step:

        bytes = passes x T x tp x layers x (cp - 1) x 2 x kv_size x act bytes

    Zero when the group (cp x tp GPUs) fits in a node (NVLink)."""
    if spec.cp_size == 1 or spec.cp_size * spec.tp_size <= g:
        return 0.0
    passes = (3 if spec.cp_method == "ring" else 2) + (1 if spec.recompute == "full" else 0)
    kv = spec.kv_size if spec.kv_size is not None else spec.hidden_size
    return (passes * spec.tokens_per_gpu_step * spec.tp_size * spec.layers * (spec.cp_size - 1)
            * 2 * kv * spec.widths[2])

