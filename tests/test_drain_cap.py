"""The drain cap (issue 35): one reason code drains at most so many nodes
within a window; past it the node is not drained, the prolog keeps the job
off it (--hold) and exits 0, and the cap says so. The count is read from
Slurm (sinfo), here a stand-in; the lab test is in test_slurm.py."""

import os
import stat
import subprocess
import sys
import time

from test_checks import H100, healthy, port

from ccrhost.model import drain_reason as drain_text
from ccrhost.model.drain_cap import DrainCap, Drained, decide
from ccrhost.model.verdict import evaluate
from ccrhost.node import drain as node_drain

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW = time.time()


def stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW - seconds_ago))


def failing():
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    return evaluate(healthy(ports=ports), H100)


def test_the_limit_is_the_smaller_of_count_and_share_never_under_one():
    cap = DrainCap(nodes=5, share=0.1, unknown_share=0.05)
    assert cap.limit("FAIL", 1000) == 5 and cap.limit("FAIL", 30) == 3
    assert cap.limit("UNKNOWN", 30) == 1 and cap.limit("UNKNOWN", 1000) == 5
    assert cap.limit("FAIL", 3) == 1  # a small partition still drains its one bad node
    assert DrainCap(nodes=None, share=None, unknown_share=None).limit("FAIL", 100) is None


def test_a_code_with_room_drains_and_old_drains_do_not_count():
    cap = DrainCap(nodes=2, share=None, unknown_share=None, window=600)
    others = [Drained("n1", ("port_down",), NOW - 60), Drained("n2", ("port_down",), NOW - 7200)]
    assert not decide("n9", [("port_down", "FAIL")], others, 100, cap, NOW).held  # n2's drain is old
    others.append(Drained("n3", ("port_down", "port_count"), NOW - 10))
    full = decide("n9", [("port_down", "FAIL")], others, 100, cap, NOW)
    assert full.held and full.counts[0].rank == 3
    # another code of its own still has room: a node with a second fault drains
    assert not decide("n9", [("port_down", "FAIL"), ("gpu_count", "FAIL")], others, 100, cap, NOW).held


def test_unknown_codes_are_capped_first():
    cap = DrainCap(nodes=None, share=0.5, unknown_share=0.25)
    others = [Drained("n1", ("gpu_unreadable",), NOW), Drained("n2", ("port_down",), NOW)]
    assert decide("n4", [("gpu_unreadable", "UNKNOWN")], others, 4, cap, NOW).held
    assert not decide("n4", [("port_down", "FAIL")], others, 4, cap, NOW).held


def test_after_its_own_drain_a_node_stays_only_among_the_first_by_time_then_name():
    cap = DrainCap(nodes=1, share=None, unknown_share=None)
    same = [Drained("n1", ("port_down",), NOW), Drained("n2", ("port_down",), NOW)]
    assert not decide("n1", [("port_down", "FAIL")], same, 10, cap, NOW).held
    assert decide("n2", [("port_down", "FAIL")], same, 10, cap, NOW).held
    earlier = [Drained("n1", ("port_down",), NOW), Drained("n2", ("port_down",), NOW - 5)]
    assert decide("n1", [("port_down", "FAIL")], earlier, 10, cap, NOW).held


def fake_slurm(tmp_path, sinfo_rows, after_rows=None):
    """scontrol (show node: no reason; anything else is logged) and sinfo
    (the rows; after a drain, ``after_rows``), in one folder."""
    log = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "rows").write_text("".join(r + "\n" for r in sinfo_rows))
    (tmp_path / "after").write_text("".join(r + "\n" for r in (after_rows or sinfo_rows)))
    tools = {
        "scontrol": f"""if [ "$1" = show ]; then echo "NodeName=$3 Arch=x86_64 State=IDLE Reason=(null) Comment=(null)"
else echo "$@" >> {log}; fi
""",
        "sinfo": f"""if grep -q State=DRAIN {log} 2>/dev/null; then cat {tmp_path / 'after'}; else cat {tmp_path / 'rows'}; fi
""",
        "scancel": f'echo scancel "$@" >> {log}\n',
    }
    for name, body in tools.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + body)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bin_dir, log


def test_past_the_cap_the_node_is_not_drained_and_says_so(tmp_path):
    reason = drain_text.drain_reason(failing())
    bin_dir, log = fake_slurm(tmp_path, [f"gpu01|gpu|{stamp(60)}|{reason}", "gpu02|gpu|Unknown|none",
                                         "gpu03|gpu|Unknown|none", "gpu99|other|Unknown|none"])
    prom = tmp_path / "cap.prom"
    cap = DrainCap(nodes=1, share=None, unknown_share=None, textfile=str(prom))
    note = node_drain.drain(failing(), node="gpu02", scontrol=str(bin_dir / "scontrol"), cap=cap)
    assert note.held is not None and "gpu02 not drained: DRAIN CAP HELD for port_down,port_count" in note
    calls = log.read_text()
    assert "State=DRAIN" not in calls
    assert calls.startswith("update NodeName=gpu02 Comment=ccrhost: held: port_down,port_count")
    assert 'ccrhost_drain_cap_held{code="port_down",level="FAIL"} 1\n' in prom.read_text()
    assert 'ccrhost_drain_cap_drained{code="port_down"} 1\n' in prom.read_text()
    # with room (another partition's drains do not count), it drains as before
    (tmp_path / "room").mkdir()
    bin_dir2, _ = fake_slurm(tmp_path / "room", [f"gpu01|other|{stamp(60)}|{reason}", "gpu02|gpu|Unknown|none"])
    note = node_drain.drain(failing(), node="gpu02", scontrol=str(bin_dir2 / "scontrol"), cap=cap)
    assert note.startswith("drained gpu02: ccrhost: port_down") and note.held is None


def test_nodes_that_drained_at_once_lift_all_but_the_first(tmp_path):
    reason = drain_text.drain_reason(failing())
    now = stamp(0)
    # before: nobody drained; after its own drain: gpu01 drained in the same second, and sorts first
    bin_dir, log = fake_slurm(tmp_path, ["gpu01|gpu|Unknown|none", "gpu02|gpu|Unknown|none"],
                              [f"gpu01|gpu|{now}|{reason}", f"gpu02|gpu|{now}|{reason}"])
    cap = DrainCap(nodes=1, share=None, unknown_share=None)
    note = node_drain.drain(failing(), node="gpu02", scontrol=str(bin_dir / "scontrol"), cap=cap)
    assert note.held is not None and "drained, then lifted again" in note
    calls = log.read_text().splitlines()
    assert calls[0].startswith("update NodeName=gpu02 State=DRAIN Reason=ccrhost: port_down")
    assert calls[1] == "update NodeName=gpu02 State=RESUME"
    assert calls[2].startswith("update NodeName=gpu02 Comment=ccrhost: held: port_down")


def run_prolog_check(tmp_path, bin_dir, *flags, config="verify_min_ccr_fraction: 2\n"):
    """The prolog's check on gpu03 for job 42; by default with settings it cannot judge with (UNKNOWN
    check_config, as on every node where a bad check.yaml was pushed). On this machine a good config
    is FAIL: no RDMA device, no GPU."""
    path = tmp_path / "check.yaml"
    path.write_text(config)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
           "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu03", "CCRHOST_CHECK_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "ccrhost", "check", "--config", str(path), "--format", "nhc",
                           "--drain", "--drain-unknown", *flags], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=60)


# host_health_enable: the test machine is no GPU node; its systemd, EDAC and memlock are not the subject
GOOD = "verify_profile: hgx-h100-8x400\nhost_health_enable: false\n"


def test_the_prologs_hold_requeues_the_job_and_exits_0_past_the_cap(tmp_path):
    # port_count on two nodes of three already: past the cap, the third is held, not drained
    other = "ccrhost: no_rdma,port_count,gpu_unreadable: no RDMA device [action investigate]"
    rows = [f"gpu01|gpu|{stamp(30)}|{other}", f"gpu02|gpu|{stamp(20)}|{other}", "gpu03|gpu|Unknown|none"]
    bin_dir, log = fake_slurm(tmp_path, rows)
    out = run_prolog_check(tmp_path, bin_dir, "--hold", config=GOOD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DRAIN CAP HELD for no_rdma,port_count,gpu_unreadable" in out.stderr
    assert "ccrhost check: requeued job 42; exit 0 so that slurmd does not drain the node" in out.stderr
    calls = log.read_text()
    assert "State=DRAIN" not in calls and "requeue 42\n" in calls
    # a dry run (observe mode) reads Slurm as ever, says what it would do, and runs none of it
    log.unlink()
    prom, line = tmp_path / "slurm.prom", tmp_path / "slurm.log"
    out = run_prolog_check(tmp_path, bin_dir, "--hold", "--dry-run", "--log", str(line), "--textfile", str(prom),
                           config=GOOD)
    assert not log.exists(), log.read_text()
    assert "ccrhost check: dry run, nothing changed: would hold job 42: would run: scontrol requeue 42" in out.stderr
    assert "dry run, nothing changed: gpu03 not drained: DRAIN CAP HELD" in out.stderr
    assert "ccrhost_slurm_would_hold 1\n" in prom.read_text() and "ccrhost_slurm_observe 1\n" in prom.read_text()
    assert " gpu03 prolog job 42 mode=observe FAIL " in line.read_text()


def test_a_bad_config_pushed_everywhere_holds_drains_and_fails_no_job(tmp_path):
    other = "ccrhost: check_config: UNKNOWN: --config: verify_min_ccr_fraction = 2"
    rows = [f"gpu01|gpu|{stamp(30)}|{other}", f"gpu02|gpu|{stamp(20)}|{other}", "gpu03|gpu|Unknown|none"]
    bin_dir, log = fake_slurm(tmp_path, rows)
    prom = tmp_path / "slurm.prom"
    out = run_prolog_check(tmp_path, bin_dir, "--hold", "--textfile", str(prom))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("ERROR: ccrhost: Health check failed: UNKNOWN: check_config: ")
    assert ("ccrhost check: UNKNOWN for ccrhost's own configuration or installation (check_config); exit 0 so that "
            "the job runs and slurmd does not drain the node") in out.stderr
    assert not log.exists()  # not one scontrol write: no drain, no comment, no requeue
    assert 'ccrhost_slurm_own_fault{code="check_config"} 1\n' in prom.read_text()
    assert "ccrhost_slurm_observe 0\n" in prom.read_text()  # enforce mode: still no job held
    # without --hold it is the same: nothing written, the job runs
    out = run_prolog_check(tmp_path, bin_dir)
    assert out.returncode == 0 and not log.exists()


def test_a_job_that_cannot_be_requeued_is_cancelled(tmp_path):
    bin_dir, log = fake_slurm(tmp_path, [])
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(scontrol.read_text().replace("else echo", 'elif [ "$1" = requeue ]; then echo '
                                                     '"Requested operation is presently disabled" >&2; exit 1\n'
                                                     "else echo"))
    assert node_drain.hold_job("42", str(scontrol)).startswith("cancelled job 42 (it cannot be requeued: ")
    assert log.read_text() == "scancel 42\n"


# `scontrol show node -o` as Slurm 22.05.8 prints it on the lab (Comment only when set; Reason last)
SHOWN_HELD = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=4.30 "
              "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=198.18.200.11 NodeHostName=node1 "
              "Version=22.05.8 OS=Linux 6.18.44-fc-v1272 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 "
              "FreeMem=20568 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
              "MCS_label=N/A Partitions=lab  BootTime=2026-12-05T07:02:51 SlurmdStartTime=2026-12-05T08:39:06 "
              "LastBusyTime=2026-12-05T08:39:06 CfgTRES=cpu=2,mem=100M,billing=2 AllocTRES= CapWatts=n/a "
              "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
              "Comment=ccrhost: held: port_down,port_count: drain cap reached: port_down: 1 other node(s) drained")
SHOWN_DRAINED = ("NodeName=node3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
                 "ExtSensorsTemp=n/s Reason=ccrhost: port_down,port_count: port mlx5_0/1 is DOWN/Disabled "
                 "[root@2026-12-05T08:35:42]")


def test_the_held_comment_reads_back_and_slurm_verify_reports_the_cap():
    from ccrhost.fleet.slurm_check import drained_verdict
    from ccrhost.fleet.slurm_client import SlurmNode, held_nodes

    held = held_nodes(SHOWN_HELD + "\n" + SHOWN_DRAINED + "\n")
    assert held == {"node1": "ccrhost: held: port_down,port_count: drain cap reached: port_down: 1 other node(s) "
                             "drained"}
    node = SlurmNode("node1", "198.18.200.11", "idle", None, held["node1"])
    assert not node.usable  # its prolog keeps every job off: verify does not wait on it
    verdict = drained_verdict(node)
    assert verdict.status == "FAIL"
    assert [(r.level, r.code) for r in verdict.reasons] == [("FAIL", "port_down"), ("FAIL", "port_count"),
                                                            ("WARN", "drain_capped")]


def test_reason_and_comment_as_slurm_shows_them(tmp_path):
    tool = tmp_path / "scontrol"
    for shown, want in ((SHOWN_HELD, (None, SHOWN_HELD.split("Comment=", 1)[1])),
                        (SHOWN_DRAINED, ("ccrhost: port_down,port_count: port mlx5_0/1 is DOWN/Disabled", None))):
        tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{shown}\nEOF\n")
        tool.chmod(0o755)
        assert node_drain.show_node("node1", str(tool)) == want


def test_only_a_fault_of_ccrhosts_own_alone_is_one():
    from ccrhost.model.status import UNKNOWN, Reason
    from ccrhost.node import check as node_check
    from ccrhost.node.observe import own_fault

    assert own_fault(node_check.unknown("check_config", "--config: bad")) == ["check_config"]
    # a FAIL of the node's beside it (scontrol failed under --drain): the node's, acted on as ever
    assert own_fault(node_check.unknown("check_error", "--drain: scontrol failed", failing())) == []
    other = node_check.unknown("check_error", "internal error")
    other.reasons.append(Reason(UNKNOWN, "gpu_unreadable", "cannot read GPUs"))
    assert own_fault(other) == []
