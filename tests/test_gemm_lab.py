"""The GEMM on a lab node (issue 50): `ccrhost dcgm --gemm-only` runs the
lab's dcgmproftester12 on every GPU and stores the result; a GPU that
slows only under sustained load (gemm_throttle=0:60) passes 30 s and
FAILs a 10-minute soak by name, and the node's own check then reports it
from the stored result."""

import json
import sys

import pytest
from conftest import REPO, lab_ssh

pytestmark = pytest.mark.lab

CONFIG = {"verify_gemm": True, "verify_dcgm_state": "/run/ccrhost/dcgm.json"}
CCRHOST = f"cd {REPO} && {sys.executable} -m ccrhost"
GEMM = f"{CCRHOST} dcgm --config /run/ccrhost-gemm.yaml --gemm-only --format json --gemm-seconds"


def gemm(lab, seconds: int) -> tuple[int, dict]:
    run = lab_ssh(lab, "node1", f"{GEMM} {seconds}")
    held = json.loads(run.stdout)
    assert [r["check"] for r in held] == ["gemm"], run.stdout + run.stderr  # no diag, no nvbandwidth
    return run.returncode, held[0]


def test_a_gemm_soak_fails_the_gpu_that_slows_under_sustained_load(make_lab):
    lab = make_lab(nodes=1)
    (lab.root("node1") / "run/ccrhost-gemm.yaml").write_text(json.dumps(CONFIG))  # JSON is YAML
    rc, healthy = gemm(lab, 30)
    assert (rc, healthy["status"], healthy["mode"]) == (0, "OK", "fp16"), healthy
    assert healthy["data"]["seconds"] == 30 and healthy["data"]["tool"] == "dcgmproftester12"
    assert healthy["data"]["tflops"] == {str(g): 604.0 for g in range(8)}  # 0.61 of H100 SXM's 989.5

    lab.fault("node1", "gemm_throttle=0:60")
    rc, short = gemm(lab, 30)
    assert (rc, short["status"]) == (0, "OK"), short
    rc, soak = gemm(lab, 600)
    assert (rc, soak["status"], soak["code"], soak["value"]) == (2, "FAIL", "gemm_slow", 181.0), soak
    assert [(r["code"], r["gpu"]) for r in soak["reasons"]] == [("gemm_slow", 0)]
    assert soak["message"].startswith("GEMM (dcgmproftester12 field 1004, fp16): GPU 0 achieved 181.0 TFLOP/s, "
                                      "0.18 of its peak 989.5 TFLOP/s"), soak["message"]

    check = lab_ssh(lab, "node1", f"{CCRHOST} check --config /run/ccrhost-gemm.yaml --profile hgx-h100-8x400 "
                                  "--format json")
    verdict = json.loads(check.stdout)
    slow = [r for r in verdict["reasons"] if r["code"] == "gemm_slow"]
    assert check.returncode == 2 and verdict["status"] == "FAIL", check.stdout[-2000:] + check.stderr[-2000:]
    assert len(slow) == 1 and slow[0]["gpu"] == 0 and slow[0]["message"] == soak["message"]
