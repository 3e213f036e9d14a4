"""QoS planning: commands per backend, the mlx5 buffer arithmetic, no-ops."""

from dataclasses import replace

from ccrhost.model import qos
from ccrhost.probes.qos import QosInterface
from ccrhost.settings import validate_host


def wanted(**data):
    return validate_host("n1", data).qos_wanted()


def fresh_ofed():
    ecn = {f"{p}/enable/{i}": 0 for p in ("roce_rp", "roce_np") for i in range(8)}
    ecn.update({"roce_np/cnp_dscp": 48, "roce_np/cnp_802p_prio": 6})
    return QosInterface(**{"backend": "ofed", "mtu": 4200, "trust": "pcp", "dscp2prio": {}, "pfc": [0] * 8, "cable_len": 7,
            "buffer_size": [262016] + [0] * 7, "prio2buffer": [0] * 8, "port_buffer": 4151520, "ecn": ecn})


def lines(cmds):
    return [qos.shell_line(c) for c in cmds]


def test_xoff_matches_the_driver_formula():
    # (301 + 216 * 7 / 100) * 400 / 1000 + 272 * 4200 / 100, in integers
    assert qos.xoff_bytes(7, 400, 4200) == 126 + 11424
    assert qos.xoff_bytes(30, 400, 4200) == 146 + 11424
    assert qos.xoff_bytes(7, 25, 1500) == qos.xoff_bytes(7, 40, 1500)  # the driver floors speed at 40G


def test_ofed_plan_from_fresh_port():
    cmds, notes = qos.plan_interface("ens1np0", "ofed", wanted(), fresh_ofed())
    # two runs of the tool: it refuses --trust with --dscp2prio in one run
    assert lines(cmds) == [
        "mlnx_qos -i ens1np0 --trust dscp",
        "mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0 --dscp2prio set,26,3 --dscp2prio set,48,6",
        "printf '%s\\n' 1 > /sys/class/net/ens1np0/ecn/roce_rp/enable/3",
        "printf '%s\\n' 1 > /sys/class/net/ens1np0/ecn/roce_np/enable/3",
    ]
    assert notes == []


def test_ofed_plan_is_empty_when_the_port_matches():
    cur = fresh_ofed()
    cur = replace(cur, trust="dscp", dscp2prio={26: 3, 48: 6}, pfc=[0, 0, 0, 1, 0, 0, 0, 0])
    cur.ecn.update({"roce_rp/enable/3": 1, "roce_np/enable/3": 1})
    assert qos.plan_interface("ens1np0", "ofed", wanted(), cur) == ([], [])
    forced, _ = qos.plan_interface("ens1np0", "ofed", wanted(), cur, force=True)
    assert len(forced) == 2 + 16 + 2  # trust; PFC and two maps; 16 ECN enables; two CNP values


def test_upstream_plan_and_firmware_notes():
    cur = QosInterface(**{"backend": "upstream", "dscp2prio": {26: 0}, "pfc": [0] * 8, "cable_len": 7, "ecn": None})
    cmds, notes = qos.plan_interface("enp26s0np0", "upstream", wanted(qos_cable_len=30, dcqcn_params={"rpg_ai_rate": 5}), cur)
    assert lines(cmds) == [
        "dcb app replace dev enp26s0np0 dscp-prio 26:3 48:6",
        "dcb pfc set dev enp26s0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off delay 30",
    ]
    assert notes[0].startswith("no ecn/ tree and no debugfs cc_params: np_cnp_dscp, np_cnp_prio, rp_ai_rate need firmware")
    assert "ROCE_CC_PRIO_MASK_P1" in notes[1]


def test_upstream_debugfs_cc_params():
    cur = QosInterface(**{"backend": "upstream", "dscp2prio": {26: 3, 48: 6}, "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn": None,
           "cc_params_dir": "/sys/kernel/debug/mlx5/0000:1a:00.0/cc_params",
           "cc_params": {"np_cnp_dscp": 48, "np_cnp_prio": 0, "rp_ai_rate": 5}})
    cmds, notes = qos.plan_interface("enp26s0np0", "upstream", wanted(dcqcn_params={"rpg_ai_rate": 5}), cur)
    assert lines(cmds) == ["printf '%s\\n' 6 > /sys/kernel/debug/mlx5/0000:1a:00.0/cc_params/np_cnp_prio"]
    assert len(notes) == 1  # only the per-priority enable needs firmware


def test_buffer_too_small_for_pfc_is_refused_before_writing():
    w = wanted(qos_cable_len=30, qos_buffer_size=[130944, 8000, 0, 0, 0, 0, 0, 0], qos_prio2buffer=[0, 0, 0, 1, 0, 0, 0, 0])
    problems = qos.buffer_problems(w, fresh_ofed(), 400, 4200)
    assert problems == ["buffer 1 is 8000 bytes but carries PFC priorities and needs at least "
                        "xoff + MTU = 11570 + 4200 = 15770 (cable 30 m, 400 Gb/s)"]


def test_buffers_over_the_port_buffer():
    w = wanted(qos_buffer_size=[4000000, 200000, 0, 0, 0, 0, 0, 0], qos_prio2buffer=[0, 0, 0, 1, 0, 0, 0, 0])
    assert qos.buffer_problems(w, fresh_ofed(), 400, 4200) == [
        "buffers total 4200000 bytes, more than the port's 4151520"]


def test_headroom_read_back():
    buffers = [{"buffer": 0, "size": 130944, "xoff": 0, "xon": 0}, {"buffer": 1, "size": 131072, "xoff": 119502, "xon": 115302}]
    assert qos.headroom_problems(buffers, {1}, 10000) == []
    assert qos.headroom_problems(buffers, {1}, 20000) == [
        "buffer 1: headroom 11570 bytes (size 131072, xoff 119502) is below qos_min_headroom 20000"]


def run_unit(tmp_path, steps, iface="ens3np0", finished=("ens1np0", "ens2np0")):
    import subprocess

    marker = tmp_path / "finished"
    script = qos.unit_script(iface, steps, list(finished), on_failure=f"echo recorded > {marker}")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    return proc, marker


def test_a_failed_setting_restores_the_interface_and_names_the_setting(tmp_path):
    files = {name: tmp_path / name for name in ("trust", "pfc", "enable3")}
    for f in files.values():
        f.write_text("old\n")
    (tmp_path / "ro").mkdir()
    steps = [
        # a tool command that changes two things and may half-apply
        qos.Step(["sh", "-c", f"printf new > {files['trust']}; printf new > {files['pfc']}"],
                 (["sh", "-c", f"printf old > {files['trust']}; printf old > {files['pfc']}"],), "set trust and PFC"),
        qos._step(qos.Write(str(files["enable3"]), "1"), [qos.Write(str(files["enable3"]), "old")]),
        # fails: a write under a directory that is not there
        qos._step(qos.Write(str(tmp_path / "ro/missing/enable4"), "1"), [qos.Write(str(tmp_path / "x"), "0")]),
        qos._step(qos.Write(str(tmp_path / "never"), "1"), []),
    ]
    proc, marker = run_unit(tmp_path, steps)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        f"ccrhost: ens3np0: setting failed: write 1 to {tmp_path}/ro/missing/enable4; its previous QoS restored; "
        "ens1np0, ens2np0 done and re-applied at boot")
    assert {n: f.read_text().strip() for n, f in files.items()} == {"trust": "old", "pfc": "old", "enable3": "old"}
    assert not (tmp_path / "x").exists()  # the failed single write changed nothing: nothing to restore
    assert not (tmp_path / "never").exists()  # settings after the failure never run
    assert marker.read_text() == "recorded\n"


def test_a_half_applied_tool_command_is_restored_and_an_unread_value_is_named(tmp_path):
    target = tmp_path / "buffers"
    target.write_text("old")
    steps = [qos.Step(["sh", "-c", f"printf half > {target}; exit 1"], (["sh", "-c", f"printf old > {target}"],),
                      "mlnx_qos -i x --buffer_size 1,2", True),
             qos._step(qos.Write(str(tmp_path / "a"), "1"), [], unknown="ecn/roce_np/cnp_dscp")]
    proc, _ = run_unit(tmp_path, steps, finished=())
    assert proc.returncode == 1 and target.read_text() == "old"
    assert proc.stderr.strip().endswith("setting failed: mlnx_qos -i x --buffer_size 1,2; its previous QoS restored; "
                                        "no interface finished before it")


def test_a_unit_that_succeeds_is_silent_and_names_are_never_expanded(tmp_path):
    steps = [qos._step(qos.Write(str(tmp_path / "ok"), "1"), [])]
    proc, marker = run_unit(tmp_path, steps)
    assert proc.returncode == 0 and proc.stderr == "" and not marker.exists()
    hostile = "x$(touch pwned)`touch pwned2`"
    bad = [qos._step(qos.Write(str(tmp_path / "no/such"), "1"), [])]
    proc, _ = run_unit(tmp_path, bad, iface=hostile, finished=(hostile,))
    assert proc.returncode == 1 and hostile in proc.stderr
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_each_setting_restores_the_value_read_before():
    cur = replace(fresh_ofed(), dscp2prio={48: 1}, trust="dscp")
    steps, _ = qos.plan_steps("ens1np0", "ofed", wanted(qos_cable_len=30), cur)
    restore = {s.what: [qos.shell_line(r) for r in s.restore] for s in steps}
    # one run of the tool, restored option by option in the reverse of the order it applied them
    assert restore["mlnx_qos -i ens1np0 --cable_len 30 --pfc 0,0,0,1,0,0,0,0 --dscp2prio set,26,3 "
                   "--dscp2prio set,48,6"] == [
        "mlnx_qos -i ens1np0 --dscp2prio set,48,1", "mlnx_qos -i ens1np0 --dscp2prio del,26,3",
        "mlnx_qos -i ens1np0 --pfc 0,0,0,0,0,0,0,0", "mlnx_qos -i ens1np0 --cable_len 7"]
    assert restore["write 1 to /sys/class/net/ens1np0/ecn/roce_rp/enable/3"] == [
        "printf '%s\\n' 0 > /sys/class/net/ens1np0/ecn/roce_rp/enable/3"]
    up = QosInterface(backend="upstream", dscp2prio={26: 0}, pfc=[0] * 8, cable_len=7, buffer_size=[262016] + [0] * 7,
                      prio2buffer=[0] * 8)
    steps, _ = qos.plan_steps("enp26s0np0", "upstream", wanted(qos_cable_len=30), up)
    assert [[qos.shell_line(r) for r in s.restore] for s in steps] == [
        ["dcb app del dev enp26s0np0 dscp-prio 48:6", "dcb app replace dev enp26s0np0 dscp-prio 26:0"],
        ["dcb pfc set dev enp26s0np0 prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:off 7:off delay 7"],
    ]
    unread = replace(fresh_ofed(), pfc=None)
    pfc = next(s for s in qos.plan_steps("ens1np0", "ofed", wanted(), unread)[0] if "--pfc" in s.what)
    assert pfc.unknown == "PFC" and not any("--pfc" in r for r in pfc.restore)


def test_mlnx_qos_runs_keep_the_order_the_settings_need():
    # New buffers: PFC only after them (the driver checks each lossless
    # buffer against its xoff at every setting), and the sizes and the
    # priority map in runs of their own (OFED's sysfs backend writes only
    # the sizes when given both).
    w = wanted(qos_cable_len=30, qos_buffer_size=[130944, 131072, 0, 0, 0, 0, 0, 0],
               qos_prio2buffer=[0, 0, 0, 1, 0, 0, 0, 0])
    steps, _ = qos.plan_steps("ens1np0", "ofed", w, fresh_ofed())
    assert [s.what for s in steps if s.what.startswith("mlnx_qos")] == [
        "mlnx_qos -i ens1np0 --trust dscp",
        "mlnx_qos -i ens1np0 --cable_len 30 --dscp2prio set,26,3 --dscp2prio set,48,6 "
        "--buffer_size 130944,131072,0,0,0,0,0,0",
        "mlnx_qos -i ens1np0 --prio2buffer 0,0,0,1,0,0,0,0",
        "mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0",
    ]
    unread = replace(fresh_ofed(), pfc=None, cable_len=None)
    run = qos.plan_steps("ens1np0", "ofed", wanted(qos_cable_len=30), unread)[0][1]
    assert run.unknown == "cable length, PFC"
