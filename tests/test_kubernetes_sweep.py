"""deploy/kubernetes/sweep: the CronJob that runs DCGM's diag on idle GPU
nodes builds and validates offline, with its cap, its priority, one pod per
node, whole-node GPU requests, the DaemonSet's check first and a config the
node command accepts. (No API server here: scheduling itself is not run.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from conftest import K8S_PROFILES as PROFILES
from conftest import REPO
from test_kubernetes import KUBERNETES_VERSION, by_kind

from ccrhost.settings import validate_host

SWEEP = REPO / "deploy" / "kubernetes" / "sweep"
PROFILE = "hgx-h100-8x400"


@pytest.fixture(scope="module")
def built() -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: scripts/bootstrap installs Debian's kubernetes-client"
    out = subprocess.run([kubectl, "kustomize", str(SWEEP)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod(docs) -> dict:
    return by_kind(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_the_sweep_builds_and_validates_against_the_kubernetes_schemas(built):
    import kubernetes_validate

    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == [
        ("ConfigMap", "ccrhost-sweep"), ("CronJob", f"ccrhost-sweep-{PROFILE}"), ("PriorityClass", "ccrhost-sweep")]
    for doc in built:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_at_most_the_cap_at_once_one_pod_per_node_at_the_lowest_priority(built):
    cron = by_kind(built, "CronJob")["spec"]
    job = cron["jobTemplate"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"  # never two sweeps at once
    assert job["parallelism"] == job["completions"] == 2 and job["backoffLimit"] == 0
    spec = pod(built)
    assert spec["priorityClassName"] == "ccrhost-sweep"
    priority = by_kind(built, "PriorityClass")
    assert priority["value"] < 0 and priority["preemptionPolicy"] == "Never"  # waits behind every pod, evicts none
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "ccrhost-sweep"}},
                     "topologyKey": "kubernetes.io/hostname"}]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", "ccrhost/profile": PROFILE}


def test_each_pod_asks_for_every_gpu_of_its_node_so_only_an_idle_node_takes_it(built):
    diag = next(c for c in pod(built)["containers"] if c["name"] == "diag")
    assert diag["resources"]["limits"]["nvidia.com/gpu"] == PROFILES[PROFILE].gpu_count


def test_the_daemonsets_check_runs_first_with_the_profiles_node_data_then_the_diag(built):
    spec = pod(built)
    fit = spec["initContainers"][0]
    assert fit["command"][:2] == ["ccrhost", "check"] and "--format" in fit["command"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["node-data"]["configMap"]["name"] == f"ccrhost-node-{PROFILE}"
    out = subprocess.run([shutil.which("kubectl"), "kustomize", str(REPO / "deploy" / "kubernetes")],
                         capture_output=True, text=True, timeout=60)
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "ConfigMap"}
    assert f"ccrhost-node-{PROFILE}" in names  # the DaemonSet's own node data
    diag = next(c for c in spec["containers"] if c["name"] == "diag")
    assert diag["command"][:2] == ["ccrhost", "dcgm"] and diag["command"][-2:] == ["--level", "2"]
    config = yaml.safe_load(by_kind(built, "ConfigMap", "ccrhost-sweep")["data"]["sweep.yaml"])
    settings = validate_host("node", config)
    # stored in the host's /run/ccrhost, which both the sweep and the DaemonSet's check mount
    assert settings.verify_dcgm and settings.verify_dcgm_state.startswith("/run/ccrhost/")
    state = next(m for m in diag["volumeMounts"] if m["name"] == "state")
    assert state["mountPath"] == "/run/ccrhost" and volumes["state"]["hostPath"]["path"] == "/run/ccrhost"
    # the node command takes exactly these arguments
    from click.testing import CliRunner

    from ccrhost.cli import main

    assert CliRunner().invoke(main, ["dcgm", "--help"]).exit_code == 0
    ctx = main.commands["dcgm"].make_context("dcgm", diag["command"][2:])
    assert ctx.params["level"] == 2 and ctx.params["config_path"] == "/run/ccrhost-sweep/sweep.yaml"
