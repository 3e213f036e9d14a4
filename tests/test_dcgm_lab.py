"""DCGM diagnostics end to end on an 8-node Slurm lab: the lab's dcgmi
answers from each node's emulated GPUs, and every path names the same
test and GPU.

Faults: node1 an uncorrectable ECC error on GPU 3 (memory), node2 a failed
row remap on GPU 5 (software), node3 NVLink down on GPU 2 (pcie), node4 a
GPU 6 that fails only the stress test (targeted_stress, level 3), node5 a
hung host engine, node6 a diag that hangs; node7 and node8 are healthy.
"""

import json
import shlex
import subprocess
import sys
import threading
import time

import pytest
from conftest import heal_slurm_lab, in_node, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.slurm import integration_files
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 8
# no periodic health check: eight nodes' checks every few seconds were a steady load on the CI's two
# cores; where a test asserts what the health check does, it runs the installed one as slurmd would
SLURM_HEALTHCHECK_INTERVAL = 0
FAULTS = {"node1": "ecc_uncorrectable=3", "node2": "row_remap_failure=5", "node3": "nvlink_down=2",
          "node4": "dcgm_stress_fail=6", "node5": "dcgm_hostengine_hung", "node6": "dcgm_diag_hang"}
# the diag test and the GPU each fault fails, as the report names them
NAMED = {"node1": ("Hardware test 'memory' failed on GPU 3", "DCGM error 4"),
         "node2": ("Deployment test 'software' failed on GPU 5", "DCGM error 80"),
         "node3": ("Integration test 'pcie' failed on GPU 2", "DCGM error 14"),
         "node4": ("Stress test 'targeted_stress' failed on GPU 6", "DCGM error 50")}
DCGM_DATA = {"verify_dcgm": True, "verify_dcgm_state": "/run/ccrhost/dcgm.json", "verify_dcgm_engine_timeout": 3,
             "verify_dcgm_timeouts": {1: 8, 2: 8, 3: 8, 4: 8},
             # four nodes fail one code here: the drain cap (10% of the partition per code) would hold three
             "slurm_drain_cap_share": 1.0}


def health_checks(lab, *nodes) -> str:
    """The installed health check once on each node, as slurmd runs it; their output, for messages."""
    return "\n".join(f"{n}: {(r := in_node(lab, n, '/etc/ccrhost/slurm-healthcheck.sh')).returncode} "
                     f"{r.stdout.strip()} {r.stderr.strip()}" for n in nodes)


def install(lab, **extra):
    """The nodes' check settings (and prolog) as deploys/slurm.py writes them, with ``extra``."""
    data = {**lab_slurm.integration_data(lab, lab_slurm.HEALTHCHECK_INTERVAL), **extra}
    files = integration_files(validate_host("lab", data))
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, files)


@pytest.fixture
def dcgm_lab(slurm_lab):
    lab = slurm_lab
    install(lab, **DCGM_DATA)
    try:
        yield lab
    finally:
        # the stored results first: a health check between the resume and their removal drains again
        for node in lab.load().nodes:
            lab_ssh(lab, node.name, "rm -f /run/ccrhost/dcgm.json")
        heal_slurm_lab(lab)
        install(lab)


def slurm_ccrhost(lab, tmp_path, *args, job=None, timeout=600):
    env = lab_slurm.client_env(lab)
    if job:  # run inside that allocation, as from an salloc shell
        nodes = lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
        env = {**env, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodes}
    return subprocess.run([sys.executable, "-m", "ccrhost", "slurm", *args, "--ccrhost", lab_slurm.ccrhost_command(),
                           "--report-dir", str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


def allocate(lab, nodes: str, name: str = "someone-else") -> str:
    """An exclusive job holding ``nodes``, running (its prologs passed)."""
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", name, "-w", nodes, "--exclusive", "-o", "/dev/null",
                        "--wrap", "exec sleep 3600", check=True).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 180
    # RUNNING with no reason: every node's prolog has passed (PrologFlags=Alloc), as slurm verify waits
    while (state := lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()) != "RUNNING|None":
        assert time.monotonic() < deadline, (job, nodes, state, lab_slurm.node_states(lab))
        time.sleep(0.3)
    return job


def wait_states(lab, done, timeout=30):
    """The nodes' (state, reason) once ``done(states)`` holds, or when ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while not done(states := lab_slurm.node_states(lab)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return states


def dcgm_reasons(host):
    return [r for r in host["reasons"] if r["code"].startswith("dcgm_")]


def test_each_diag_fault_fails_its_node_naming_test_and_gpu_on_every_path(dcgm_lab, tmp_path):
    lab = dcgm_lab
    # inside an allocation, as an operator's salloc: the health checks (idle nodes only) would
    # otherwise drain the nodes whose faults the passive checks see before the diag runs
    job = allocate(lab, "node[1-8]", "operator")
    for node, fault in FAULTS.items():
        lab.fault(node, fault)
    run = slurm_ccrhost(lab, tmp_path, "verify", "--dcgm", "--dcgm-level", "3", job=job)
    assert run.returncode == 2, run.stderr[-4000:]
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    status = {h: v["status"] for h, v in hosts.items()}
    assert {n: status[n] for n in NAMED} == dict.fromkeys(NAMED, "FAIL"), run.stderr[-4000:]
    for node, (test, code) in NAMED.items():
        failed = [r["message"] for r in dcgm_reasons(hosts[node]) if r["code"] == "dcgm_test_failed"]
        assert len(failed) == 1 and test in failed[0] and code in failed[0], (node, failed)
        gpu = int(test.rsplit(" ", 1)[1])
        # named by index, PCI address and UUID, as nvidia-smi on the node gives them
        assert f"GPU {gpu} (0000" in failed[0] and "GPU-" in failed[0], failed[0]
    # the stress-only GPU fails nothing passive: the diag alone found it
    assert [r["code"] for r in hosts["node4"]["reasons"] if r["level"] == "FAIL"] == ["dcgm_test_failed"]
    # a hung host engine and a hung diag are UNKNOWN, never a FAIL of the GPUs
    assert [(r["level"], r["code"]) for r in dcgm_reasons(hosts["node5"])] == [("UNKNOWN", "dcgm_hostengine")]
    assert dcgm_reasons(hosts["node5"])[0]["message"].startswith("DCGM host engine not responding")
    assert [(r["level"], r["code"]) for r in dcgm_reasons(hosts["node6"])] == [("UNKNOWN", "dcgm_hang")]
    assert status["node5"] == status["node6"] == "UNKNOWN"
    assert status["node7"] in ("OK", "WARN") and status["node8"] in ("OK", "WARN")
    assert not dcgm_reasons(hosts["node7"]) and not dcgm_reasons(hosts["node8"])

    # the node's own check (what the prolog and health check run) reads the stored result and its age
    check = lab_ssh(lab, "node4", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                  "--format json")
    mine = [r for r in json.loads(check.stdout)["reasons"] if r["code"] == "dcgm_test_failed"]
    assert check.returncode == 2 and len(mine) == 1 and NAMED["node4"][0] in mine[0]["message"], check.stdout[-2000:]
    hung = lab_ssh(lab, "node5", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                 "--format json")
    assert [r["code"] for r in json.loads(hung.stdout)["reasons"] if r["code"].startswith("dcgm")] == \
        ["dcgm_hostengine"]

    # FAIL drains (verify's own drain); the UNKNOWN nodes are drained by nothing, the health checks included
    lab_slurm.run(lab, "scancel", job)
    states = wait_states(lab, lambda states: all(states[n][0] == "drained" for n in NAMED))
    assert all(states[n][0] == "drained" for n in NAMED), states
    assert "dcgm_test_failed" in states["node4"][1]
    lab_slurm.run(lab, "scontrol", "update", "NodeName=node4", "State=RESUME")
    lab_slurm.wait_idle(lab, lab.load(), ["node4"], 60)
    told = health_checks(lab, "node4", "node5", "node6", "node7", "node8")  # the idle nodes
    states = lab_slurm.node_states(lab)
    # the health check read node4's stored FAIL and drained it again; node5 and node6 stay idle
    assert states["node4"][0] == "drained" and "dcgm_test_failed" in states["node4"][1], (states["node4"], told)
    assert {n: states[n][0] for n in ("node5", "node6", "node7", "node8")} == dict.fromkeys(
        ("node5", "node6", "node7", "node8"), "idle"), (states, told)
    # and a job starts on node5 and node6: their prologs judge the same stored UNKNOWN, which is only a
    # missing proof (dcgm_hostengine, dcgm_hang), so they let it start and drain nothing
    job = allocate(lab, "node[5-6]", "someone")
    states = lab_slurm.node_states(lab)
    assert {n: states[n][0] for n in ("node5", "node6")} == dict.fromkeys(("node5", "node6"), "allocated"), states
    lab_slurm.run(lab, "scancel", job)


def test_a_sweeps_dcgm_fail_keeps_its_drain_with_verify_dcgm_off(dcgm_lab, tmp_path):
    """Issue 45 case 9a: verify_dcgm off in the nodes' check.yaml (the default), a sweep's level 3 drains
    node4, whose GPU 6 fails only the stress test; the next health checks judge what the sweep stored and
    keep the drain, and the reason names GPU 6 for the history."""
    lab = dcgm_lab
    install(lab, **{**DCGM_DATA, "verify_dcgm": False})
    lab.fault("node4", "dcgm_stress_fail=6")
    # the node answers slurmctld again (idle, not idle*) after the last test's resume: else the sweep,
    # idle nodes only, rightly leaves it unchecked
    lab_slurm.wait_idle(lab, lab.load(), ["node4"], 60)
    run = slurm_ccrhost(lab, tmp_path, "sweep", "-p", "lab", "-w", "node4", "--dcgm-level", "3")
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert hosts["node4"]["status"] == "FAIL", run.stderr[-3000:]
    failed = [r for r in dcgm_reasons(hosts["node4"]) if r["code"] == "dcgm_test_failed"]
    assert len(failed) == 1 and failed[0]["gpu"] == 6 and NAMED["node4"][0] in failed[0]["message"], failed
    states = wait_states(lab, lambda states: states["node4"][0] == "drained")
    assert states["node4"][0] == "drained" and "dcgm_test_failed" in states["node4"][1], states["node4"]
    # what the health check judges: the stored FAIL, verify_dcgm off
    check = lab_ssh(lab, "node4", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                  "--format json")
    assert check.returncode == 2 and [r["gpu"] for r in json.loads(check.stdout)["reasons"]
                                      if r["code"] == "dcgm_test_failed"] == [6], check.stdout[-2000:]
    told = health_checks(lab, "node4")  # a health check since: it keeps the drain
    states = lab_slurm.node_states(lab)
    assert states["node4"][0] == "drained" and "dcgm_test_failed" in states["node4"][1], (states["node4"], told)


class Held:
    """Polls slurmctld while the sweep runs: the most nodes its jobs hold at
    once, every node list a ccrhost job was given, and their nice values."""

    def __init__(self, lab, busy):
        self.lab, self.busy, self.most, self.lists, self.nice, self.polls = lab, busy, 0, set(), set(), 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self):
        while not self.stop.is_set():
            jobs = lab_slurm.run(self.lab, "squeue", "-h", "-o", "%j|%T|%N|%y").stdout.splitlines()
            states = lab_slurm.node_states(self.lab)
            held = [n for n, (st, _) in states.items()
                    if n != self.busy and any(w in st for w in ("alloc", "mix", "comp"))]
            self.most = max(self.most, len(held))
            for j in jobs:
                name, _, nodes, nice = j.split("|")
                if name == "ccrhost-verify" and nodes:
                    self.lists.add(nodes)
                    self.nice.add(nice)
            self.polls += 1
            time.sleep(0.1)


def test_a_sweep_never_touches_a_running_job_nor_holds_more_than_its_cap_and_stale_shows(dcgm_lab, tmp_path):
    lab = dcgm_lab
    lab.fault("node4", "dcgm_stress_fail=6")  # stress only: level 2 passes it
    other = allocate(lab, "node8")
    held = Held(lab, "node8")
    held.thread.start()
    try:
        # 25% of 8 nodes: 2 at once, below --max-nodes 3
        run = slurm_ccrhost(lab, tmp_path, "sweep", "-p", "lab", "--max-nodes", "3", "--max-percent", "25")
    finally:
        held.stop.set()
        held.thread.join()
    assert "at most 2 held at once, nice 10000" in run.stderr, run.stderr[-3000:]
    assert held.polls > 30 and 1 <= held.most <= 2, (held.most, held.polls)
    given = [lab_slurm.run(lab, "scontrol", "show", "hostnames", x).stdout.split() for x in held.lists]
    assert given and all(len(g) <= 2 for g in given) and not any("node8" in g for g in given), given
    assert held.nice == {"10000"}, held.nice
    assert lab_slurm.run(lab, "squeue", "-h", "-j", other, "-o", "%T|%N").stdout.strip() == "RUNNING|node8"
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert [r["code"] for r in hosts["node8"]["reasons"]] == ["not_checked"]
    assert not dcgm_reasons(hosts["node4"]), hosts["node4"]  # level 2 runs no stress test
    # each swept node stored its result with its time and validity
    stored = json.loads(lab_ssh(lab, "node7", "cat /run/ccrhost/dcgm.json").stdout)["results"]["dcgm_diag/level 2"]
    assert stored["status"] == "OK" and stored["valid_for"] == 86400 and abs(stored["measured_at"] - time.time()) < 600
    assert lab_ssh(lab, "node8", "test -e /run/ccrhost/dcgm.json").returncode != 0  # never touched

    # a result past its validity: UNKNOWN as stale in the node's check, its Prometheus textfile and slurm
    # verify (in an allocation taken while the result was fresh)
    lab_slurm.run(lab, "scancel", other)
    mine = allocate(lab, "node7", "operator")
    old = {**stored, "measured_at": stored["measured_at"] - 2 * 86400}
    doc = json.dumps({"version": 1, "results": {"dcgm_diag/level 2": old}})
    # printf, not echo: dash's echo turns the JSON's backslash escapes into the characters
    assert lab_ssh(lab, "node7", f"printf '%s' {shlex.quote(doc)} > /run/ccrhost/dcgm.json").returncode == 0
    prom = lab_ssh(lab, "node7", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                 "--format prometheus")
    assert 'ccrhost_active_result_stale{check="dcgm_diag",mode="level 2"} 1' in prom.stdout, prom.stdout[-2000:]
    ages = [line for line in prom.stdout.splitlines() if line.startswith("ccrhost_active_result_age_seconds")]
    assert len(ages) == 1 and 2 * 86400 <= float(ages[0].split()[-1]) < 2 * 86400 + 600, ages
    verify = slurm_ccrhost(lab, tmp_path, "verify", "-w", "node7", "--no-drain", job=mine)
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert hosts["node7"]["status"] == "UNKNOWN", verify.stderr[-3000:]
    assert [r["code"] for r in dcgm_reasons(hosts["node7"])] == ["dcgm_stale"]
    assert "s old, valid for 86400 s" in dcgm_reasons(hosts["node7"])[0]["message"]
    # a stale proof keeps no job off the node: a new job's prolog reads it and lets the job start, undrained
    lab_slurm.run(lab, "scancel", mine)
    again = allocate(lab, "node7", "someone")
    assert lab_slurm.node_states(lab)["node7"][0] == "allocated"
    lab_slurm.run(lab, "scancel", again)


def test_the_deploys_verification_runs_the_diag_and_names_the_same_test_and_gpu(dcgm_lab, tmp_path):
    """The pyinfra path: deploys/verify.py with verify_dcgm runs verify_dcgm_level_deploy on every host."""
    lab = dcgm_lab
    lab.fault("node4", "dcgm_stress_fail=6")
    lab.fault("node1", "ecc_uncorrectable=3")
    lab.fault("node5", "dcgm_hostengine_hung")
    report_dir = tmp_path / "report"
    inventory = lab_inventory(tmp_path, verify_report_dir=str(report_dir), **DCGM_DATA, verify_dcgm_level_deploy=3)
    run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=600)
    assert "Traceback" not in run.out, run.out[-4000:]
    hosts = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    by = {f"node{i}": hosts[node_address(i)] for i in range(1, SLURM_NODES + 1)}
    for node in ("node1", "node4"):
        failed = [r["message"] for r in dcgm_reasons(by[node]) if r["code"] == "dcgm_test_failed"]
        assert len(failed) == 1 and NAMED[node][0] in failed[0] and NAMED[node][1] in failed[0], (node, failed)
        assert by[node]["status"] == "FAIL"
    assert [(r["level"], r["code"]) for r in dcgm_reasons(by["node5"])] == [("UNKNOWN", "dcgm_hostengine")]
    assert not dcgm_reasons(by["node7"])
    # stored where the node's own check reads it
    stored = json.loads(lab_ssh(lab, "node4", "cat /run/ccrhost/dcgm.json").stdout)["results"]
    assert stored["dcgm_diag/level 3"]["code"] == "dcgm_test_failed"


def test_a_gpu_reading_x16_but_copying_at_x4_fails_naming_it(dcgm_lab, tmp_path):
    """nvbandwidth beside the diag: node3's GPU 3 reads x16 everywhere a passive check looks, and copies
    a quarter of what its neighbours do."""
    lab = dcgm_lab
    install(lab, **DCGM_DATA, verify_nvbandwidth=True,
            verify_nvbandwidth_min_gbs={"device_to_device_memcpy_read_ce": 300.0})
    lab.fault("node3", "gpu_pcie_slow=3")
    width = lab_ssh(lab, "node3", "nvidia-smi --query-gpu=pcie.link.width.current --format=csv,noheader")
    assert width.stdout.split() == ["16"] * 8, width.stdout  # every GPU, GPU 3 included, reads x16
    run = slurm_ccrhost(lab, tmp_path, "verify", "-w", "node[2-3]", "--dcgm", "--dcgm-level", "1", "--no-drain")
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert run.returncode == 2 and hosts["node3"]["status"] == "FAIL", run.stderr[-3000:]
    slow = [r["message"] for r in hosts["node3"]["reasons"] if r["code"] == "nvbandwidth_slow"]
    assert len(slow) == 2, hosts["node3"]["reasons"]  # host to device and device to host
    assert slow[0].startswith("nvbandwidth host to device: GPU 3 (0000") and "copies at 13.89 GB/s" in slow[0]
    assert "below 48 GB/s (published figure of hgx-h100-8x400: Azure/azurehpc-health-checks " \
        "conf/nd96isr_h100_v5.conf `check_gpu_bw 48 335`" in slow[0]
    assert not any(r["code"] == "gpu_pcie_width" for r in hosts["node3"]["reasons"])  # invisible to the passive checks
    assert not [r for r in hosts["node2"]["reasons"] if r["code"].startswith(("nvbandwidth", "dcgm"))]
    # stored beside the diag, where the node's own check reads it
    stored = json.loads(lab_ssh(lab, "node3", "cat /run/ccrhost/dcgm.json").stdout)["results"]
    assert stored["nvbandwidth/copy engine"]["code"] == "nvbandwidth_slow"
    check = lab_ssh(lab, "node3", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                  "--format json")
    assert [r["message"] for r in json.loads(check.stdout)["reasons"] if r["code"] == "nvbandwidth_slow"] == slow


def test_a_sweeps_dry_run_prints_each_batch_exactly_and_submits_runs_and_changes_nothing(dcgm_lab, tmp_path):
    """Issue 46: `sweep --dry-run` submitted its batches and ran the diag (only drains were held back).
    Now, with a job on node8 and node6 drained by an operator: the exact sbatch/srun/scancel lines per
    batch and the drains are printed, no job is submitted (the controller's next job id follows the one
    before), no node's state changes and no diag runs (no result stored)."""
    lab = dcgm_lab
    other = allocate(lab, "node8")
    lab_slurm.run(lab, "scontrol", "update", "NodeName=node6", "State=DRAIN", "Reason=disk swap", check=True)
    lab_slurm.wait_idle(lab, lab.load(), ["node1", "node2", "node3", "node4", "node5", "node7"], 60)
    before = lab_slurm.node_states(lab)
    run = slurm_ccrhost(lab, tmp_path, "sweep", "-p", "lab", "--max-nodes", "4", "--max-percent", "100",
                        "--dcgm-level", "2", "--dry-run")
    assert lab_slurm.node_states(lab) == before
    after = allocate(lab, "node7", "marker")  # the next job id the controller gives
    assert run.returncode == 0, run.stdout + run.stderr
    assert int(after) == int(other) + 1, (other, after, run.stdout)
    jobs = lab_slurm.run(lab, "squeue", "-h", "-o", "%j").stdout.split()
    assert sorted(jobs) == ["marker", "someone-else"], jobs
    lab_slurm.run(lab, "scancel", after)
    for node in ("node1", "node2", "node7"):  # the diag never ran: nothing stored
        assert lab_ssh(lab, node, "test -e /run/ccrhost/dcgm.json").returncode != 0, node
    assert lab_slurm.run(lab, "squeue", "-h", "-j", other, "-o", "%T|%N").stdout.strip() == "RUNNING|node8"
    ccrhost = lab_slurm.ccrhost_command()
    check = shlex.quote(
        'echo "@@node $SLURMD_NODENAME"; if [ -r /etc/ccrhost/check.yaml ]; then echo "@@config"; '
        'base64 < /etc/ccrhost/check.yaml; else echo "@@config -"; fi; echo "@@check base64"; '
        f'out=$({ccrhost} check --config /etc/ccrhost/check.yaml --format json 2>&1); rc=$?; '
        'printf "%s\\n" "$out" | base64; echo "@@rc $rc"')
    diag = (f'echo "@@dcgm"; {ccrhost} dcgm --config /etc/ccrhost/check.yaml --level 2 --format json 2>&1 | base64; '
            'echo "@@end"')
    sbatch = ("would run: sbatch --parsable -J ccrhost-verify -N {n} -w {w} --exclusive -o /dev/null -e /dev/null "
              "--nice=10000 -p lab --wrap 'exec sleep 86400'   # prints JOB")
    srun = ("would run: srun --jobid=JOB --overlap -J {j} -N {n} -n {n} --ntasks-per-node=1 -w {w} -l "
            "--kill-on-bad-exit=0 /bin/sh -c ")

    def case(nodes):
        return ("$'echo \"@@node $SLURMD_NODENAME\"\\ncase \"$SLURMD_NODENAME\" in\\n"
                + "".join(f"{n}) {diag} ;;\\n" for n in nodes) + "esac\\n'")

    first, second = ["node1", "node2", "node3", "node4"], ["node5", "node7"]
    drains = [f"would run: scontrol update NodeName={n} State=DRAIN 'Reason=ccrhost: <its FAIL codes>: "
              "<what failed> [action <its action>]'" for n in first + second]
    assert run.stdout.splitlines() == [
        "# 8 node(s); 6 idle to check in 2 batch(es) of at most 4; not checked: node6 drained (disk swap), "
        "node8 allocated",
        "# check: batch 1 of 2: node1,node2,node3,node4",
        sbatch.format(n=4, w="node1,node2,node3,node4"),
        srun.format(j="ccrhost-check", n=4, w="node1,node2,node3,node4") + check,
        "would run: scancel JOB",
        "# check: batch 2 of 2: node5,node7",
        sbatch.format(n=2, w="node5,node7"), srun.format(j="ccrhost-check", n=2, w="node5,node7") + check,
        "would run: scancel JOB",
        "# DCGM diag level 2: batch 1 of 2: node1,node2,node3,node4",
        sbatch.format(n=4, w="node1,node2,node3,node4"),
        srun.format(j="ccrhost-dcgm", n=4, w="node1,node2,node3,node4") + case(first),
        "would run: scancel JOB",
        "# DCGM diag level 2: batch 2 of 2: node5,node7",
        sbatch.format(n=2, w="node5,node7"), srun.format(j="ccrhost-dcgm", n=2, w="node5,node7") + case(second),
        "would run: scancel JOB",
        "# then, after the last batch, for each node whose verdict is FAIL (within the drain cap: past it the node "
        "is held, not drained):", *drains,
        "dry run: no job submitted, nothing drained or resumed"], run.stdout
    lab_slurm.run(lab, "scancel", other)


def test_a_node_running_a_slurm_job_with_no_gpu_process_is_skipped_as_node_busy(dcgm_lab, tmp_path):
    """Issue 46: the busy guard read only GPU compute processes, so a job between its GPU phases (here a
    sleep: no GPU process at all) got a DCGM diag under it. Now the node's own `ccrhost dcgm` (what
    slurm verify --dcgm, the sweep and remediate --dcgm-level run there) reads Slurm's jobs on the node
    too: a job other than the one asking makes it UNKNOWN node_busy, nothing runs or is stored; the
    job asking (a verify's own allocation) is no busy work."""
    lab = dcgm_lab
    ccrhost = lab_slurm.ccrhost_command()
    other = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "no-gpu", "-w", "node7", "-n", "1", "-o", "/dev/null",
                          "--wrap", "exec sleep 3600", check=True).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while lab_slurm.run(lab, "squeue", "-h", "-j", other, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, lab_slurm.node_states(lab)
        time.sleep(0.3)
    gpus = lab_ssh(lab, "node7", "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader")
    assert gpus.returncode == 0 and gpus.stdout.strip() == "", gpus.stdout  # no GPU process: only Slurm tells
    # over ssh (remediate --dcgm-level's way): slurm_conf from check.yaml, the node's host name
    run = lab_ssh(lab, "node7", f"{ccrhost} dcgm --config /etc/ccrhost/check.yaml --level 1")
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stdout.strip() == (
        f"UNKNOWN: DCGM diag level 1 not run: a Slurm job is running on the node (Slurm job {other} no-gpu (root, "
        "RUNNING)); drain the node first, or set verify_active_when_busy: true to run it anyway"), run.stdout
    assert lab_ssh(lab, "node7", "test -e /run/ccrhost/dcgm.json").returncode != 0  # nothing ran, nothing stored
    # slurm verify --dcgm in an allocation of its own that shares node7 with that job: its diag step sees
    # the other job (not its own) and skips; the node's verdict says so and nothing is drained
    mine = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "operator", "-w", "node7", "-n", "1", "-o", "/dev/null",
                         "--wrap", "exec sleep 3600", check=True).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while lab_slurm.run(lab, "squeue", "-h", "-j", mine, "-o", "%T|%r").stdout.strip() != "RUNNING|None":
        assert time.monotonic() < deadline, lab_slurm.node_states(lab)
        time.sleep(0.3)
    verify = slurm_ccrhost(lab, tmp_path, "verify", "-w", "node7", "--dcgm", "--dcgm-level", "1", job=mine)
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    busy = [r for r in hosts["node7"]["reasons"] if r["code"] == "node_busy"]
    assert len(busy) == 1 and f"Slurm job {other} no-gpu (root, RUNNING)" in busy[0]["message"], (
        hosts["node7"]["reasons"], verify.stderr[-3000:])
    assert f"Slurm job {mine} " not in busy[0]["message"]
    assert lab_ssh(lab, "node7", "test -e /run/ccrhost/dcgm.json").returncode != 0
    assert "drain" not in lab_slurm.node_states(lab)["node7"][0]
    # the other job gone, the same verify runs the diag in its own allocation: its own job is no busy work
    lab_slurm.run(lab, "scancel", other)
    deadline = time.monotonic() + 60
    while lab_slurm.run(lab, "squeue", "-h", "-j", other, "-o", "%T").stdout.strip():
        assert time.monotonic() < deadline
        time.sleep(0.3)
    verify = slurm_ccrhost(lab, tmp_path, "verify", "-w", "node7", "--dcgm", "--dcgm-level", "1", job=mine)
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert not [r for r in hosts["node7"]["reasons"] if r["code"].startswith("node_busy")], verify.stderr[-3000:]
    stored = json.loads(lab_ssh(lab, "node7", "cat /run/ccrhost/dcgm.json").stdout)["results"]["dcgm_diag/level 1"]
    assert stored["status"] == "OK", stored
    lab_slurm.run(lab, "scancel", mine)
