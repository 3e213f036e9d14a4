"""Shared fixtures: a lab that is always torn down, and the pyinfra CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from ccrhost.lab import ci
from ccrhost.settings import validate_host

# Property-based fuzzing (tests/test_fuzz.py, marked `fuzz`). "ci" keeps the
# suite's share bounded: 50 examples per target, derandomized so a run is
# repeatable (200 cost some 70 CPU seconds of the suite's 10 minutes on two
# cores, bench/suite-time.md; the same fixed examples each run, so more of
# them belong in "deep"). "deep" is the long run, ten times as many per target (over
# some 50 targets, well past 10,000 in total), with a fresh seed each time:
#     scripts/test -m fuzz --hypothesis-profile=deep
# Its last result is in bench/fuzz-results.md.
_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
             print_blob=True)
settings.register_profile("ci", max_examples=50, derandomize=True, **_FUZZ)
settings.register_profile("deep", max_examples=2000, **_FUZZ)
settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
# pytest-xdist runs a module per worker (--dist loadfile): each worker gets
# its own lab (folder, link names, 198.18.<subnet>.0/24), so two labs run at
# once without touching each other. Without xdist: worker 0.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
# scripts/test gives the run a tmpfs of its own (CCRHOST_TEST_TMP): see there why
LAB_DIR = Path(os.environ.get("CCRHOST_TEST_TMP") or "/var/tmp") / f"ccrhost-test-lab{_WORKER or ''}"
LAB_NAME = "tuvwxyz"[_WORKER]  # a letter each: no lab's link names are a prefix of another's
LAB_SUBNET = 200 + _WORKER


@pytest.fixture(autouse=True, scope="session")
def _check_cache(tmp_path_factory):
    """`ccrhost check` keeps its validated settings (ccrhost.node.prepared):
    here, not in this machine's /run."""
    os.environ["CCRHOST_CHECK_CACHE"] = str(tmp_path_factory.mktemp("check-cache") / "check-settings.marshal")
    yield
    os.environ.pop("CCRHOST_CHECK_CACHE", None)


class PyinfraRun(ci.PyinfraRun):
    """A pyinfra run's exit code and output; its results table is parsed the
    way ``ccrhost ci run`` parses it."""

    def changed(self) -> bool:
        return bool(ci.changed_operations(self))


def run_pyinfra(*args: str, lab_dir: Path = LAB_DIR, timeout: int = 180, inventory: str = "inventories/lab.py") -> PyinfraRun:
    env = {**os.environ, "CCRHOST_LAB_DIR": str(lab_dir), "PYINFRA_PROGRESS": "off", "COLUMNS": "200"}
    proc = subprocess.run(
        # --dry plans with change detection, which -y would skip
        [sys.executable, "-m", "pyinfra", *([] if "--dry" in args else ["-y"]), inventory, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )
    return PyinfraRun(proc.returncode, proc.stdout + proc.stderr)


@pytest.fixture
def make_lab():
    """Start a lab with the given shape; always removed afterwards."""
    from ccrhost.lab.fleet import Lab, parse_faults

    lab = Lab(LAB_DIR)
    lab.down(name=LAB_NAME)  # leftovers of an interrupted earlier run, with or without its state

    def start(nodes=4, profile="hgx-h100-8x400", faults=(), profiles=None, wiring=False):
        lab.up(nodes, profile, parse_faults(list(faults)), name=LAB_NAME, subnet=LAB_SUBNET, profiles=profiles or {},
               wiring=wiring)
        return lab

    try:
        yield start
    finally:
        lab.down(name=LAB_NAME)


@pytest.fixture(scope="module")
def slurm_lab(request):
    """A lab with a real Slurm cluster (munged, slurmctld, a slurmd in every
    node), shared by one module's tests; always removed afterwards. Its
    size: the module's ``SLURM_NODES`` (default 3); ``SLURM_HEALTHCHECK_INTERVAL``
    (0: none) for a module that never waits on Slurm's health check, whose
    every node would otherwise run a check each 5 s beside the other workers. Each worker's cluster
    has ports of its own, so two modules' clusters run at once."""
    from ccrhost.lab.fleet import Lab

    lab = Lab(LAB_DIR)
    lab.down(name=LAB_NAME)  # leftovers of an interrupted earlier run, with or without its state
    try:
        lab.up(getattr(request.module, "SLURM_NODES", 3), "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET,
               slurm=True, wiring=getattr(request.module, "LAB_WIRING", False),
               **({"healthcheck_interval": request.module.SLURM_HEALTHCHECK_INTERVAL}
                              if hasattr(request.module, "SLURM_HEALTHCHECK_INTERVAL") else {}))
        yield lab
    finally:
        lab.down(name=LAB_NAME)


def heal_slurm_lab(lab) -> None:
    """No job, no fault, no drain left on a Slurm lab (each test leaves it so for the next)."""
    from ccrhost.lab import slurm as lab_slurm

    lab_slurm.run(lab, "scancel", "--user=root")
    for node in lab.load().nodes:
        for fault in list(node.faults):
            lab.clear(node.name, fault)
    for node, (st, _) in lab_slurm.node_states(lab).items():
        if "drain" in st:
            lab_slurm.run(lab, "scontrol", "update", f"NodeName={node}", "State=RESUME")


def node_address(index: int) -> str:
    return f"198.18.{LAB_SUBNET}.{10 + index}"


def in_node(lab, node, *cmd, env=(), timeout=60) -> subprocess.CompletedProcess:
    """Run as slurmd runs a prolog or health check: inside the node's
    namespaces, its clock included (a node's uptime is its own since its
    boot), with no environment but its name and ``env`` ("KEY=VALUE")."""
    from ccrhost.lab.procs import NODE_CLOCK

    holder = lab.node(node).holder_pid
    return subprocess.run(["nsenter", "-t", str(holder), "-m", "-n", "-u", *NODE_CLOCK, "--", "env", "-i",
                           f"SLURMD_NODENAME={node}", *env, *cmd], capture_output=True, text=True, timeout=timeout)


def lab_ssh(lab, node: str, command: str) -> subprocess.CompletedProcess:
    """Run a command on a lab node over its real sshd, strict host-key checking on."""
    address = lab.node(node).address
    return subprocess.run(
        ["ssh", "-i", str(lab.dir / "client_key"), "-o", f"UserKnownHostsFile={lab.dir / 'known_hosts'}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
         f"root@{address}", command],
        capture_output=True, text=True, timeout=30,
    )


def tree_snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its type, size, mode and content hash."""
    import hashlib

    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            digest = None
            if path.is_file() and not path.is_symlink():
                try:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    digest = "unreadable"
            snap[str(path.relative_to(root))] = (st.st_mode, st.st_size, digest)
    return snap


def lab_inventory(tmp_path: Path, per_node: dict | None = None, **data) -> str:
    """An inventory of the running lab with extra data for every host, and
    per lab node (``{"node2": {...}}``); reports go under ``tmp_path``."""
    path = tmp_path / "inventory.py"
    data.setdefault("verify_report_dir", str(tmp_path / "report"))
    path.write_text(
        "from ccrhost.lab.inventory import lab_hosts\n"
        f"per_node = {per_node or {}!r}\n"
        f"nodes = [(n, {{**d, **{data!r}, **per_node.get(d['lab_node'], {{}})}}) for n, d in lab_hosts()]\n")
    return str(path)


# The modules that take longest (seconds of one worker, bench/suite-time.md),
# handed out first: xdist keeps this order under scripts/test's
# --no-loadscope-reorder (its default hands out the modules with the most
# tests first, so these few-test, long lab modules started last and one
# worker ran alone at the end). Each worker takes two modules at the start
# (of six workers, worker N the Nth and the (N+6)th); after that a free
# worker takes the next one.
SLOW_FIRST = ("test_accept_lab.py", "test_allreduce_lab.py", "test_rollout_lab.py", "test_dcgm_lab.py", "test_bench_smoke.py",
              "test_install_e2e.py", "test_host_health_lab.py", "test_calibrate_lab.py", "test_baseline_lab.py", "test_platform_lab.py",
              "test_qos_e2e.py", "test_nicfw_lab.py", "test_slurm_paths.py", "test_slurm.py", "test_accept_deploy_lab.py",
              "test_verify_e2e.py", "test_wiring_lab.py", "test_rack_lab.py", "test_rack_nvlink_lab.py", "test_datapath_e2e.py",
              "test_trouble_e2e.py", "test_fuzz.py",
              "test_remediate_lab.py", "test_ci.py", "test_faults.py", "test_busy_lab.py",
              "test_fabric_e2e.py", "test_kubernetes.py", "test_gpu_health_e2e.py", "test_wheel.py",
              "test_pci_shims.py", "test_lab.py", "test_deploy_rdma.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the others keep their order


def declared(platform: str):
    """The declared hardware (Expectation) of a built-in platform file, as verify_profile gives it."""
    return validate_host("n", {"verify_profile": platform}).expectation()


# the builds with a Kubernetes overlay (deploy/kubernetes/profiles/), each a built-in platform
K8S_PROFILES = {p: declared(p) for p in ("dgx-a100-8x200", "hgx-b200-8x400", "hgx-h100-8x400", "hgx-h200-8x400")}
