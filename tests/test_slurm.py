"""End to end with a real slurmctld and a slurmd in every lab node: the
health check drains and resumes, the prolog keeps jobs off bad nodes,
`ccrhost slurm verify` drains exactly the faulty nodes, deploys/slurm.py
installs what the cluster runs. One 3-node lab serves the whole module;
each test leaves it healthy for the next."""

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from conftest import heal_slurm_lab, in_node, lab_inventory, node_address, run_pyinfra, tree_snapshot

from ccrhost.lab import slurm as lab_slurm

pytestmark = pytest.mark.lab

INTERVAL = lab_slurm.HEALTHCHECK_INTERVAL
NODES = ("node1", "node2", "node3")


def slurm(lab, *args, timeout=60) -> subprocess.CompletedProcess:
    return lab_slurm.run(lab, *args, timeout=timeout)


def state(lab, node) -> tuple[str, str]:
    return lab_slurm.node_states(lab)[node]


def wait_for(lab, node, predicate, timeout=60):
    """(state, reason) once ``predicate(state, reason)`` holds, and how long that took."""
    start = time.monotonic()
    while True:
        now = state(lab, node)
        if predicate(*now):
            return now, time.monotonic() - start
        assert time.monotonic() - start < timeout, f"{node} still {now} after {timeout} s"
        time.sleep(0.1)



def health_check_seconds(lab, node) -> float:
    """Run the installed health check once; on a healthy node it changes nothing."""
    start = time.monotonic()
    run = in_node(lab, node, "/etc/ccrhost/slurm-healthcheck.sh")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr.strip() == "no drain change"
    return time.monotonic() - start


def wait_started(lab, job, timeout=30) -> None:
    """Until the job runs and its prolog has finished on every node (PrologFlags=Alloc)."""
    deadline = time.monotonic() + timeout
    while (now := slurm(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()) != "RUNNING|None":
        assert time.monotonic() < deadline, f"job {job}: {now}"
        time.sleep(0.1)


def job_state(lab, job) -> str:
    out = slurm(lab, "scontrol", "show", "job", job, "-o").stdout
    return out.split("JobState=", 1)[1].split()[0] if "JobState=" in out else "gone"


@pytest.fixture
def cluster(slurm_lab):
    """The shared cluster; afterwards: no job, no fault, every node idle."""
    lab = slurm_lab
    yield lab
    heal_slurm_lab(lab)
    lab_slurm.wait_idle(lab, lab.load(), list(NODES), timeout=60)


def verify(lab, tmp_path, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "verify", "--ccrhost", lab_slurm.ccrhost_command(),
         "--report-dir", str(tmp_path / "report"), *args],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env={**lab_slurm.client_env(lab), **(env or {})})


def test_healthy_cluster_runs_jobs_on_every_node_and_stays_idle(cluster):
    lab = cluster
    assert lab_slurm.node_states(lab) == {n: ("idle", "none") for n in NODES}
    run = slurm(lab, "srun", "-N3", "-I10", "sh", "-c",
                "echo $(hostname) $SLURMD_NODENAME $(ls /sys/class/infiniband | wc -l) $(nvidia-smi -L | wc -l)")
    assert run.returncode == 0, run.stderr
    # each job step ran in its node: its name, its emulated 8 NICs and 8 GPUs
    assert sorted(run.stdout.splitlines()) == [f"{n} {n} 8 8" for n in NODES]
    took = max(health_check_seconds(lab, n) for n in NODES)
    time.sleep(2 * INTERVAL + took)
    assert lab_slurm.node_states(lab) == {n: ("idle", "none") for n in NODES}


def test_port_down_drains_the_node_and_clearing_it_resumes_it(cluster):
    lab = cluster
    took = health_check_seconds(lab, "node2")
    lab.fault("node2", "port_down")
    (st, reason), elapsed = wait_for(lab, "node2", lambda s, r: "drain" in s)
    assert elapsed <= 2 * INTERVAL + took, f"drained after {elapsed:.1f} s, interval {INTERVAL} s"
    assert st == "drained"
    # the codes first (all `sinfo -R` shows of a reason is its first 20 characters), then the messages
    assert reason.startswith("ccrhost: port_down,port_count")
    assert ": port mlx5_0/1 is DOWN/Disabled; 7 active compute ports, expected 8" in reason

    two = slurm(lab, "srun", "-N2", "-I10", "hostname")
    assert two.returncode == 0, two.stderr
    assert sorted(two.stdout.split()) == ["node1", "node3"]
    job = slurm(lab, "sbatch", "--parsable", "-N3", "-o", "/dev/null", "--wrap", "hostname").stdout.strip()
    # slurmctld words the wait by which scheduler pass saw it last; both say
    # the job waits for the drained node. Until a pass has looked at the job
    # (bf_interval=1, on a loaded machine later) it reads "Resources".
    waiting = ("PENDING|ReqNodeNotAvail, UnavailableNodes:node2",
               "PENDING|Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions")
    deadline = time.monotonic() + 15
    while (seen := slurm(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()) == "PENDING|Resources":
        assert time.monotonic() < deadline, seen
        time.sleep(0.5)
    assert seen in waiting

    lab.clear("node2", "port_down")
    assert wait_for(lab, "node2", lambda s, r: s == "idle")[0] == ("idle", "none")
    deadline = time.monotonic() + 30
    while job_state(lab, job) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        assert time.monotonic() < deadline, job_state(lab, job)
        time.sleep(0.2)
    assert job_state(lab, job) == "COMPLETED"
    assert "NodeList=node[1-3]" in slurm(lab, "scontrol", "show", "job", job, "-o").stdout


def test_an_operators_drain_is_never_resumed_or_rewritten(cluster):
    lab = cluster
    took = health_check_seconds(lab, "node1")
    slurm(lab, "scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=hw ticket 42")
    time.sleep(2 * INTERVAL + took)  # healthy: the health check would lift a drain of its own
    assert state(lab, "node1") == ("drained", "hw ticket 42")
    log = lab.dir / "slurm/nodes/node1/slurmd.log"
    failures = log.read_text().count("health_check failed: rc:2")
    lab.fault("node1", "port_down")
    deadline = time.monotonic() + 2 * INTERVAL + took + 30
    while log.read_text().count("health_check failed: rc:2") == failures:  # it ran and saw the FAIL
        assert time.monotonic() < deadline, "the health check never ran on node1"
        time.sleep(0.1)
    assert state(lab, "node1") == ("drained", "hw ticket 42")
    reason = slurm(lab, "scontrol", "show", "node", "node1", "-o").stdout.split("Reason=", 1)[1]
    assert reason.startswith("hw ticket 42 [root@")


def test_prolog_keeps_jobs_off_a_fail_or_unknown_node_and_lets_warn_through(cluster):
    lab = cluster
    # A job holds one of node3's CPUs: the health check runs on idle nodes only,
    # so what happens next is the prolog's doing alone.
    holder = slurm(lab, "sbatch", "--parsable", "-w", "node3", "-n1", "-o", "/dev/null",
                   "--wrap", "sleep 300").stdout.strip()
    wait_started(lab, holder)

    def job_on_node3():
        return slurm(lab, "srun", "-w", "node3", "-n1", "-I10", "sh", "-c", "echo ran on $(hostname)")

    lab.fault("node3", "gpu_throttled")
    warn = job_on_node3()
    assert (warn.returncode, warn.stdout) == (0, "ran on node3\n"), warn.stderr
    # the srun's job may still be completing on node3 for a moment
    assert wait_for(lab, "node3", lambda s, r: s != "completing")[0] == ("mixed", "none")
    lab.clear("node3", "gpu_throttled")

    config = lab.root("node3") / "etc/ccrhost/check.yaml"
    saved = config.read_text()
    config.write_text(saved + "verify_min_ccr_fraction: 2\n")  # ccrhost's own settings cannot be read
    try:
        own = job_on_node3()
    finally:
        config.write_text(saved)
    # a fault of ccrhost's own (issue 46): the job runs and the node is not drained
    assert (own.returncode, own.stdout) == (0, "ran on node3\n"), own.stderr
    assert wait_for(lab, "node3", lambda s, r: s != "completing")[0] == ("mixed", "none")

    lab.fault("node3", "port_down")
    fail = job_on_node3()
    assert fail.returncode != 0 and "ran on" not in fail.stdout
    st, reason = state(lab, "node3")
    assert st == "draining"
    # the prolog's own drain names the problem; Slurm keeps it rather than 'Prolog error'
    assert reason.startswith("ccrhost: port_down,") and ": port mlx5_0/1 is DOWN/Disabled" in reason, reason
    assert job_state(lab, holder) == "RUNNING"  # a drain lets running jobs finish

    lab.clear("node3", "port_down")
    slurm(lab, "scancel", holder)
    # once idle, the health check finds the node fit and lifts ccrhost's drain
    assert wait_for(lab, "node3", lambda s, r: s == "idle")[0] == ("idle", "none")


def test_verify_in_an_allocation_drains_exactly_the_faulty_nodes(cluster, tmp_path):
    lab = cluster
    job = slurm(lab, "sbatch", "--parsable", "-N3", "--exclusive", "-o", "/dev/null",
                "--wrap", "sleep 300").stdout.strip()
    wait_started(lab, job)
    lab.fault("node2", "port_down")
    lab.fault("node3", "gpu_missing")
    run = verify(lab, tmp_path, env={"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-3]"})
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"running in the existing allocation of job {job}" in run.stderr
    assert "checked 3/3" in run.stderr
    assert job_state(lab, job) == "RUNNING"  # the caller's allocation is the caller's

    states = lab_slurm.node_states(lab)
    assert states["node1"] == ("allocated", "none")
    assert states["node2"][0] == states["node3"][0] == "draining"
    assert states["node2"][1].startswith("ccrhost: port_down,")
    assert ": port mlx5_0/1 is DOWN/Disabled" in states["node2"][1]
    # the lab's missing GPU is still on the PCI bus: it fell off too (docs/gpu-health.md)
    assert states["node3"][1].startswith("ccrhost: gpu_count,gpu_fell_off_bus")
    assert ": 7 GPUs, expected 8; GPU at 0000:" in states["node3"][1]
    assert "fell off the bus: the PCI bus lists it, nvidia-smi does not see it" in states["node3"][1]

    report = tmp_path / "report"
    hosts = json.loads((report / "ccr-report.json").read_text())["hosts"]
    assert {h: v["status"] for h, v in hosts.items()} == {"node1": "OK", "node2": "FAIL", "node3": "FAIL"}
    suite = ET.parse(report / "ccr-report.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    assert "OK: 1  WARN: 0  FAIL: 2  UNKNOWN: 0" in (report / "ccr-report.txt").read_text()
    page = (report / "ccr-report.html").read_text()
    for i, node in enumerate(NODES, start=1):
        assert f"<td>{node}</td><td>{node_address(i)}</td>" in page


def test_verify_measure_drains_the_slow_node_and_the_health_check_leaves_it(cluster, tmp_path):
    lab = cluster
    lab.fault("node3", "link_slow=80")  # invisible to the node-local check
    took = health_check_seconds(lab, "node3")
    run = verify(lab, tmp_path, "--measure", "--measure-seconds", "1", "--measure-retries", "0",
                 "--measure-ports", "1")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "submitted job" in run.stderr and "measure round 3: 1 pair(s): node2<->node3" in run.stderr
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert {h: v["status"] for h, v in hosts.items()} == {"node1": "OK", "node2": "OK", "node3": "FAIL"}
    slow = hosts["node3"]
    assert [r["code"] for r in slow["reasons"]] == ["measured_slow", "ccr_below_expected"]
    assert "(slow with node1 and with known-good node2)" in slow["reasons"][0]["message"]
    # 80 of the nominal 200 Mbit/s lab link, scaled to a 400 Gb/s port: about 150
    assert 120 < slow["ports"][0]["measured_gbps"] < 165
    assert 360 < hosts["node1"]["ports"][0]["measured_gbps"] <= 400
    # its own job is gone: cancelled on the way out, it may still be completing (CG) for a moment
    deadline = time.monotonic() + 15
    while (queue := slurm(lab, "squeue", "-h", "-o", "%i %T").stdout.split()) and queue[1::2] == ["COMPLETING"]:
        assert time.monotonic() < deadline, queue
        time.sleep(0.2)
    assert queue == []

    st, reason = state(lab, "node3")
    assert st == "drained" and reason.startswith("ccrhost: measured_slow,ccr_below_expected: ports mlx5_0/1 measured below 90%")
    assert state(lab, "node1") == state(lab, "node2") == ("idle", "none")
    lab.clear("node3", "link_slow")
    time.sleep(2 * INTERVAL + took)
    assert state(lab, "node3") == (st, reason)  # only a measurement or an operator lifts it


def test_deploy_installs_what_the_cluster_runs_and_never_slurm_conf(cluster, tmp_path):
    lab = cluster
    roots = {n: lab.root(n) for n in NODES}
    site_conf = roots["node1"] / "etc/slurm/slurm.conf"
    site_conf.parent.mkdir(parents=True, exist_ok=True)
    site_conf.write_text("ClusterName=site\nInclude /etc/slurm/ccrhost.conf\n")
    wrapper = roots["node2"] / "etc/ccrhost/slurm-healthcheck.sh"
    wrapper.write_text(wrapper.read_text() + "# a local edit\n")
    before = {n: tree_snapshot(r / "etc/ccrhost") | tree_snapshot(r / "etc/slurm") for n, r in roots.items()}
    inventory = lab_inventory(tmp_path)

    dry = run_pyinfra("--dry", "deploys/slurm.py", inventory=inventory)
    assert dry.rc == 0, dry.out
    assert f"[{node_address(2)}] would run: write /etc/ccrhost/slurm-healthcheck.sh" in dry.out
    assert "would run" not in dry.out.replace(f"[{node_address(2)}] would run", "")
    assert {n: tree_snapshot(r / "etc/ccrhost") | tree_snapshot(r / "etc/slurm") for n, r in roots.items()} == before

    (tmp_path / "bad").mkdir()
    bad = run_pyinfra("deploys/slurm.py", inventory=lab_inventory(
        tmp_path / "bad", per_node={"node3": {"slurm_healthcheck_node_state": "IDLE;reboot"}}))
    assert bad.rc == 2
    assert (f"{node_address(3)}: slurm_healthcheck_node_state = 'IDLE;reboot': a comma list of ALLOC, ANY, "
            "CYCLE, IDLE, MIXED, NONDRAINED_IDLE") in bad.out
    assert {n: tree_snapshot(r / "etc/ccrhost") | tree_snapshot(r / "etc/slurm") for n, r in roots.items()} == before

    first = run_pyinfra("deploys/slurm.py", inventory=inventory)
    assert first.rc == 0, first.out
    assert first.results()["Install the Slurm prolog and health check"] == \
        {"hosts": "3", "success": "1", "error": "-", "no_change": "2"}
    assert wrapper.read_text() == (roots["node1"] / "etc/ccrhost/slurm-healthcheck.sh").read_text()
    assert site_conf.read_text() == "ClusterName=site\nInclude /etc/slurm/ccrhost.conf\n"
    assert not list(wrapper.parent.glob("*.ccrhost-bak.*"))  # it was ccrhost's file: no backup
    again = run_pyinfra("deploys/slurm.py", inventory=inventory)
    assert again.rc == 0 and not again.changed(), again.out
    site_conf.unlink()


def test_failing_gpus_drain_by_the_health_check_and_clearing_resumes(cluster):
    """GPU health (docs/gpu-health.md) on the Slurm lab: two faults spread over two nodes, each drained by the
    periodic health check with its own reason naming the GPU and its PCI address; cleared, both come back."""
    lab = cluster
    took = max(health_check_seconds(lab, n) for n in ("node2", "node3"))
    lab.fault("node2", "xid=48:3")
    lab.fault("node3", "row_remap_failure=1")
    for node, start, text in (("node2", "ccrhost: gpu_xid_critical", ": GPU 3 (0000:"),
                              ("node3", "ccrhost: gpu_row_remap_failure", ": GPU 1 (0000:")):
        (st, reason), elapsed = wait_for(lab, node, lambda s, r: "drain" in s, timeout=2 * INTERVAL + took + 30)
        assert reason.startswith(start) and text in reason, (node, reason)
    assert " Xid 48 " in state(lab, "node2")[1]
    assert "failed a row remapping" in state(lab, "node3")[1]
    assert state(lab, "node1") == ("idle", "none")

    lab.clear("node2", "xid")
    lab.clear("node3", "row_remap_failure")
    for node in ("node2", "node3"):
        wait_for(lab, node, lambda s, r: s == "idle" and r == "none", timeout=2 * INTERVAL + took + 30)


def node_comment(lab, node) -> str:
    from ccrhost.model.drain_reason import COMMENT_FIELD

    found = COMMENT_FIELD.search(slurm(lab, "scontrol", "show", "node", node, "-o").stdout.strip())
    return found.group(1) if found else ""


def test_the_drain_cap_keeps_the_next_node_off_jobs_without_draining_it(cluster, tmp_path):
    """Issue 35: one cause on many nodes must not drain them all. With a cap
    of one node per code, two nodes that fail with port_down at once leave
    one drained; the other is kept from jobs by its prolog (a batch job is
    requeued, an srun fails) but never drained, and the cap says so in the
    node's comment, its textfile and `slurm verify`."""
    lab = cluster
    configs = {n: lab.root(n) / "etc/ccrhost/check.yaml" for n in NODES}
    saved = {n: c.read_text() for n, c in configs.items()}
    prom = "/run/ccrhost/drain-cap.prom"
    try:
        for config in configs.values():
            config.write_text(saved["node1"] + f"slurm_drain_cap_nodes: 1\nslurm_drain_cap_textfile: {prom}\n")
        took = max(health_check_seconds(lab, n) for n in ("node2", "node3"))
        lab.fault("node2", "port_down")
        lab.fault("node3", "port_down")
        # the health checks of both run at once: one drain stays, the other is held
        deadline = time.monotonic() + 4 * INTERVAL + took + 30
        while not any(node_comment(lab, n).startswith("ccrhost: held:") for n in ("node2", "node3")):
            if time.monotonic() > deadline:
                hc = in_node(lab, "node3", "/etc/ccrhost/slurm-healthcheck.sh")
                shown = slurm(lab, "scontrol", "show", "node", "node3", "-o").stdout
                raise AssertionError(f"{lab_slurm.node_states(lab)}\n{shown}\n{hc.stdout}{hc.stderr}")
            time.sleep(0.2)
        time.sleep(2 * INTERVAL + took)  # more health checks: nothing changes
        states = lab_slurm.node_states(lab)
        drained = [n for n in ("node2", "node3") if "drain" in states[n][0]]
        assert len(drained) == 1, states
        kept = ({"node2", "node3"} - set(drained)).pop()
        assert states[drained[0]][1].startswith("ccrhost: port_down,")
        assert states[kept] == ("idle", "none"), states
        assert node_comment(lab, kept).startswith("ccrhost: held: port_down")
        text = (lab.root(kept) / prom.lstrip("/")).read_text()
        assert 'ccrhost_drain_cap_held{code="port_down",level="FAIL"} 1' in text
        assert 'ccrhost_drain_cap_limit{code="port_down"} 1' in text

        # its prolog keeps jobs off it, and it stays undrained
        job = slurm(lab, "sbatch", "--parsable", "-w", kept, "-n1", "-o", str(tmp_path / "ran"),
                    "--wrap", "echo ran").stdout.strip()
        # a refused prolog requeues the job; on its way back it shows COMPLETING a moment
        deadline = time.monotonic() + 30
        while ("Restarts=0" in (shown := slurm(lab, "scontrol", "show", "job", job, "-o").stdout)
               or "JobState=COMPLETING" in shown):
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        assert job_state(lab, job) in ("PENDING", "REQUEUED"), shown
        slurm(lab, "scancel", job)
        run = slurm(lab, "srun", "-w", kept, "-n1", "-I10", "sh", "-c", "echo ran on $(hostname)")
        assert run.returncode != 0 and "ran on" not in run.stdout, run.stdout + run.stderr
        assert not (tmp_path / "ran").exists()
        # the cancelled job and the refused srun may leave the node completing (CG) for a moment
        assert wait_for(lab, kept, lambda s, r: s != "completing")[0] == ("idle", "none")

        # slurm verify reports the held node with its codes and the cap
        report = verify(lab, tmp_path, "--wait", "60")
        assert report.returncode == 2, report.stdout + report.stderr
        hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
        assert [r["code"] for r in hosts[kept]["reasons"]][-1] == "drain_capped"
        assert "port_down" in [r["code"] for r in hosts[kept]["reasons"]]
        assert "port_down" in [r["code"] for r in hosts[drained[0]]["reasons"]]
        assert hosts["node1"]["status"] == "OK"

        # fixed: the health check clears the comment and the textfile says the cap no longer holds
        lab.clear("node2", "port_down")
        lab.clear("node3", "port_down")
        deadline = time.monotonic() + 4 * INTERVAL + took + 30
        while node_comment(lab, kept).startswith("ccrhost: held:"):
            assert time.monotonic() < deadline, node_comment(lab, kept)
            time.sleep(0.2)
        assert "ccrhost_drain_cap_held 0" in (lab.root(kept) / prom.lstrip("/")).read_text()
    finally:
        for node, config in configs.items():
            config.write_text(saved[node])
            slurm(lab, "scontrol", "update", f"NodeName={node}", "Comment=")
