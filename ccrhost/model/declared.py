"""Declared hardware: what a node of a known build should have.

``verify_profile`` names one of these; the verification compares the
node's readings with it (GPU model and count, compute ports and rate).
"""

from __future__ import annotations

from ccrhost.model.verdict import Expectation

PROFILES: dict[str, Expectation] = {
    # 2-8-9-400 reference designs: one 400 Gb/s compute NIC per GPU, on
    # the GPU's own PCIe switch (rail-local).
    "hgx-h100-8x400": Expectation("NVIDIA H100 80GB HBM3", 8, 8, 400, rail_local=True),
    "hgx-h200-8x400": Expectation("NVIDIA H200 141GB HBM3e", 8, 8, 400, rail_local=True),
    "hgx-b200-8x400": Expectation("NVIDIA B200", 8, 8, 400, rail_local=True),
    # two GPUs and two NICs per PCIe switch
    "dgx-a100-8x200": Expectation("NVIDIA A100-SXM4-80GB", 8, 8, 200, rail_local=True),
}
