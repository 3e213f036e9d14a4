"""The boot script: every interpolated value is one single-quoted shell word."""

import shlex
import subprocess

from ccrhost.model.boot import render_boot
from ccrhost.probes.qos import QosInterface
from ccrhost.probes.rdma import RdmaDevice, RdmaPort, RdmaReading
from ccrhost.settings import validate_host

# names a node could report (sysfs and iproute2 allow far more than a shell does)
DEV = "mlx5_0';touch /tmp/ccrhost-pwned;'"
IFACE = 'e$(touch /tmp/ccrhost-pwned)"`id`'


def rendered():
    rdma = RdmaReading({DEV: RdmaDevice(netdevs=[IFACE], ports={1: RdmaPort(
        state="ACTIVE", phys_state="LinkUp", rate_gbps=400.0, link_layer="Ethernet", netdev=IFACE)})})
    netdevs = {IFACE: {"rate_gbps": 400.0, "ports": [(DEV, 1)]}}
    ecn = {f"{p}/enable/{i}": 0 for p in ("roce_rp", "roce_np") for i in range(8)}
    state = {IFACE: QosInterface(backend="ofed", trust="pcp", pfc=[0] * 8, ecn=ecn)}
    return render_boot(validate_host("n", {}), rdma, netdevs, state)[0]


def test_boot_script_with_hostile_names_parses_and_quotes_each_value():
    script = rendered()
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    q = shlex.quote
    cm = f"/sys/kernel/config/rdma_cm/{DEV}"
    for line in [
        f"for port in {q(DEV + '/ports/1')}; do",
        f"[ -d {q(cm)} ] || mkdir {q(cm)} || failed=1",
        f"printf '%s\\n' 'RoCE v2' > {q(cm + '/ports/1/default_roce_mode')} || failed=1",
        f"printf '%s\\n' 106 > {q(cm + '/ports/1/default_roce_tos')} || failed=1",
        f"if listed {q(IFACE)}; then",
        f"    mlnx_qos -i {q(IFACE)} --trust dscp || {{ log {q('failed: mlnx_qos -i ' + q(IFACE) + ' --trust dscp')}; "
        "failed=1; }",
    ]:
        assert line in script.splitlines(), line


def regions(line: str) -> dict[str, str]:
    """The characters of a shell line by quoting: bare, '...', "..." (a
    backslash outside single quotes escapes the next character)."""
    out, state, i = {"bare": "", "single": "", "double": ""}, "bare", 0
    while i < len(line):
        c = line[i]
        if state == "single":
            state = "bare" if c == "'" else state
            out["single"] += "" if c == "'" else c
        elif c == "\\":
            out[state] += line[i:i + 2]
            i += 1
        elif state == "double":
            state = "bare" if c == '"' else state
            out["double"] += "" if c == '"' else c
        elif c in "'\"":
            state = "single" if c == "'" else "double"
        else:
            out["bare"] += c
        i += 1
    assert state == "bare", line
    return out


def test_no_value_of_the_node_is_bare_or_inside_double_quotes():
    script = rendered()
    assert script.count("pwned") > 40
    for line in script.splitlines():
        if line.startswith("#"):
            continue
        parts = regions(line)
        for where in ("bare", "double"):
            assert "pwned" not in parts[where] and "`" not in parts[where], (where, line)
