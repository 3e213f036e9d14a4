"""After a GPU reset the node is judged only on what the driver logged since
(issue 45 case 11): remediate reset the GPU, and the check after it still
failed on the XID the reset had repaired, so every run reset it again."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

from test_gpu_health import gpu, h100

from ccrhost.model.gpu_health import GpuHealthPolicy, GpuHealthReading, Xid, check_gpu_health
from ccrhost.node import check as node_check
from ccrhost.node.gpu_reset import reset_gpu, resets_path

GPU2 = "0000:38:00"  # gpu(2)'s PCI address, as the kernel log names it


def xid_reasons(reading):
    return [(r.code, r.gpu) for r in check_gpu_health(reading, [h100(i) for i in range(3)], GpuHealthPolicy())]


def test_an_xid_logged_before_the_gpus_reset_is_not_judged_after_it():
    xids = [Xid(48, GPU2, 600, "double bit"), Xid(48, "0000:18:00", 600, "double bit")]
    reading = GpuHealthReading(gpus=[gpu(0), gpu(1), gpu(2)], xids=xids)
    assert xid_reasons(reading) == [("gpu_xid_critical", 2), ("gpu_xid_critical", 0)]
    reading.resets = {GPU2: 300.0}  # GPU 2 was reset 5 min ago, after its XID: GPU 0 was not
    assert xid_reasons(reading) == [("gpu_xid_critical", 0)]
    reading.resets = {GPU2: 900.0}  # reset before the XID: the fault came back
    assert xid_reasons(reading) == [("gpu_xid_critical", 2), ("gpu_xid_critical", 0)]
    # a reset repairs nothing that asks for a reboot: Xid 79 counts for the whole boot
    reading = GpuHealthReading(gpus=[gpu(2)], xids=[Xid(79, GPU2, 600, "fallen off")], resets={GPU2: 300.0})
    assert xid_reasons(reading) == [("gpu_fell_off_bus", 2)]


class Smi:
    def __init__(self, rc=0, out="GPU 00000000:38:00.0 was successfully reset.\nAll done.\n"):
        self.rc, self.out, self.args = rc, out, []

    def __call__(self, args, **kw):
        self.args.append(args)
        return subprocess.CompletedProcess(args, self.rc, self.out, "")


def test_the_reset_keeps_its_time_and_the_next_check_judges_only_lines_after_it(tmp_path):
    state = str(tmp_path / "gpu-counters.json")
    boot = node_check.boot_id()
    smi = Smi()
    assert reset_gpu(state, 2, run=smi, now=1000.0) == (0, smi.out.strip())
    assert smi.args == [["nvidia-smi", "-r", "-i", "2"]]
    assert json.loads(open(resets_path(state)).read()) == {"boot_id": boot, "resets": {"2": 1000.0}}
    # a failed reset keeps nothing
    assert reset_gpu(state, 3, run=Smi(255, "Unable to reset this GPU"), now=1010.0)[0] == 255
    assert json.loads(open(resets_path(state)).read())["resets"] == {"2": 1000.0}

    def health():  # an Xid 48 on GPU 2 logged 10 min before the check at 1300, so before the reset at 1000
        return GpuHealthReading(gpus=[gpu(0), gpu(1), gpu(2)], xids=[Xid(48, GPU2, 600, "double bit")])

    settings = SimpleNamespace(verify_gpu_state=state, verify_window_max_age=3600)
    reading = node_check.local_gpu_health(settings, health, now=1300.0)
    assert reading.resets == {GPU2: 300.0} and xid_reasons(reading) == []
    # another boot's resets are no reset of this one
    with open(resets_path(state), "w") as f:
        json.dump({"boot_id": "another boot", "resets": {"2": 1000.0}}, f)
    reading = node_check.local_gpu_health(settings, health, now=1300.0)
    assert reading.resets == {} and xid_reasons(reading) == [("gpu_xid_critical", 2)]


def test_the_reset_gpu_command_runs_nvidia_smi_and_keeps_the_time_at_the_settings_path(tmp_path, monkeypatch):
    import os

    from click.testing import CliRunner

    from ccrhost.cli import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "GPU 00000000:38:00.0 was successfully reset."\n'
                                        'echo "All done."\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    state = tmp_path / "gpu-counters.json"
    config = tmp_path / "check.yaml"
    config.write_text(f"verify_gpu_state: {state}\n")
    result = CliRunner().invoke(main, ["reset-gpu", "--config", str(config), "2"])
    assert result.exit_code == 0 and result.output == "GPU 00000000:38:00.0 was successfully reset.\nAll done.\n"
    assert list(json.loads(open(resets_path(str(state))).read())["resets"]) == ["2"]
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "Unable to reset this GPU" >&2\nexit 255\n')
    result = CliRunner().invoke(main, ["reset-gpu", "--config", str(config), "3"])
    assert result.exit_code == 255 and "Unable to reset this GPU" in result.output
    assert list(json.loads(open(resets_path(str(state))).read())["resets"]) == ["2"]
