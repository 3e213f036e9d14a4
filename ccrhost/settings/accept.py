"""Acceptance of new and repaired nodes (``ccrhost slurm accept``; issue 50):
which stages a node must pass, their time budgets, the soak's length, the
connectivity stage's mesh and latency gate, and the certificate's file and
validity (model/certificate.py; docs/accept.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ccrhost.model.certificate import BUDGETS, STAGES

Stage = Literal["check", "node", "mesh", "pairs", "scale", "soak"]
assert STAGES == Stage.__args__  # one list of stages: the model's


class AcceptSettings(BaseModel, defer_build=True):
    # Acceptance (model/certificate.py, fleet/accept.py; docs/accept.md)
    accept_stages: tuple[Stage, ...] = Field(
        STAGES, description="The stages a node must pass to be certified, in this order: check (S0: the passive "
        "check), node (S1: DCGM diag, nvbandwidth, GEMM, the single-node all-reduce modes), mesh (S2: a full mesh "
        "of ib_write_lat pairs in groups, pruning and the latency gate), pairs (S3: ib_write_bw between pairs "
        "covering every node), scale (S4: all-reduce over growing groups, a failing step bisected), soak (S5: "
        "the GEMM load for accept_soak_minutes, the passive check before and after). A stage left out is "
        "skipped for the node and said so in its certificate.",
    )
    accept_budgets: dict[Stage, Annotated[int, Field(ge=10, le=7 * 86400)]] | None = Field(
        None, description="Seconds each stage may take on the whole run before its nodes still waiting are "
        "UNKNOWN (accept_budget_exceeded), overriding the built-in budgets "
        f"({', '.join(f'{k}: {v}' for k, v in BUDGETS.items())}).",
    )
    accept_soak_minutes: float = Field(
        30, gt=0, le=24 * 60, description="The soak's length (S5): the GEMM load on every GPU of the node, "
        "with the node's counters (XIDs, ECC, PCIe replays, pause and drop counters) read before and after. "
        "Imbue's host validation burns the fabric for 30 minutes, SuperBench the GPUs for 15.",
    )
    accept_dcgm_level: Literal[1, 2, 3, 4] = Field(
        2, description="The DCGM diag level S1 runs (docs/dcgm.md: 1 seconds, 2 minutes, 3 and 4 hours).",
    )
    accept_mesh_group: int = Field(
        32, ge=2, le=1024, description="Nodes per full-mesh group in S2 (AMD cvs nodes_per_full_mesh_group).",
    )
    accept_mesh_prune: float = Field(
        0.5, gt=0, le=1, description="A node that fails at least this share of its mesh pairs is pruned and "
        "FAILs rdma_mesh_pruned (AMD cvs prune_failure_threshold).",
    )
    accept_mesh_timeout: int = Field(
        20, ge=1, le=600, description="Seconds each ib_write_lat end of a mesh pair may run in S2 from a "
        "pyinfra deploy (deploys/accept.py); ccrhost slurm accept takes --mesh-timeout.",
    )
    accept_max_nodes: int = Field(
        8, ge=2, le=4096, description="Nodes a pyinfra deploy (deploys/accept.py) loads at once in the power-heavy "
        "stages (S1 node-local, S5 soak: one batch after another) and in S4's largest group; the smallest any "
        "node asks for. ccrhost slurm accept takes --max-nodes.",
    )
    accept_latency_max_p99_us: float = Field(
        4.2, gt=0, le=1000, description="ib_write_lat's 99th percentile above which a mesh pair FAILs "
        "rdma_latency_high (Imbue's host validation: at most 4.2 us).",
    )
    accept_certificate: str = Field(
        "/var/lib/ccrhost/certificate.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where each node keeps its acceptance certificate (the stages with their verdicts and "
        "figures, the versions, the time), written whole, atomically.",
    )
    accept_valid_for: int = Field(
        30 * 86400, ge=3600, le=366 * 86400, description="Seconds a passed stage, and so a certificate, holds; "
        "an older one is expired and its stages run again.",
    )

    def accept_budget(self, stage: str) -> int:
        return (self.accept_budgets or {}).get(stage, BUDGETS[stage])
