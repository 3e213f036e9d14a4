"""The Ansible side of the bench: ansible-core in the bench's own venv, an
inventory of the running lab, one measured playbook run, and the node state
both tools are compared on.

ansible-core is not a ccrhost dependency: the bench installs the pinned
version from PyPI into bench/.ansible-venv (git-ignored) on first use.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PLAYBOOK_DIR = REPO / "bench" / "ansible"
PLAYBOOK = PLAYBOOK_DIR / "rdma.yml"
VENV = REPO / "bench" / ".ansible-venv"
REQUIREMENT = "ansible-core==2.19.14"

# The modules the playbook loads and ccrhost's default list (settings/datapath.py).
MODULES = ("ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


class AnsibleUnavailable(RuntimeError):
    """ansible-core could not be installed into the bench's venv."""


def ensure_ansible() -> Path:
    """The venv's ansible-playbook, installing ``REQUIREMENT`` first if needed."""
    playbook_bin = VENV / "bin" / "ansible-playbook"
    marker = VENV / "installed-requirement"
    if playbook_bin.exists() and marker.exists() and marker.read_text().strip() == REQUIREMENT:
        return playbook_bin
    steps = ([sys.executable, "-m", "venv", "--clear", str(VENV)],
             [str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", REQUIREMENT])
    for step in steps:
        try:
            proc = subprocess.run(step, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AnsibleUnavailable(f"{' '.join(step)}: {exc}") from None
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
            raise AnsibleUnavailable(f"{' '.join(step)} exited {proc.returncode}: {' | '.join(tail)}")
    marker.write_text(REQUIREMENT + "\n")
    return playbook_bin


def write_inventory(lab, path: Path) -> Path:
    """The running lab as an Ansible inventory: same addresses, the lab's
    client key and known_hosts (checked strictly), root."""
    state = lab.load()
    inventory = {"lab": {
        "hosts": {n.name: {"ansible_host": n.address} for n in state.nodes},
        "vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(lab.dir / "client_key"),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab.dir / 'known_hosts'} "
                                       "-o StrictHostKeyChecking=yes",
        },
    }}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def _ssh_masters(control_dir: Path) -> list[int]:
    """The ControlPersist masters of this run (``ssh: <control path> [mux]``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("ssh: ") and str(control_dir) in cmdline and "[mux]" in cmdline:
            pids.append(int(entry))
    return pids


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def close_masters(control_dir: Path) -> float:
    """Stop this run's SSH masters; returns the CPU they used. They detach
    from ansible-playbook, so its rusage never counts them, yet every
    command's encryption on the controller side happens in them."""
    cpu = 0.0
    pids = _ssh_masters(control_dir)
    for pid in pids:
        cpu += _cpu_seconds(pid)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")
                and open(f"/proc/{p}/stat").read().rsplit(") ", 1)[1][0] != "Z"]
        time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return cpu


def run_playbook(lab, inventory: Path, workdir: Path, log: Path) -> dict:
    """One ansible-playbook run, measured like ``run_pyinfra``: wall,
    controller CPU (ansible-playbook, its forks and ssh clients, and the
    SSH masters), peak RSS, the lab's sshd CPU, commands per host from the
    lab's ForceCommand log, and PLAY RECAP's changed/failed per host."""
    playbook_bin = ensure_ansible()
    state = lab.load()
    names = [n.name for n in state.nodes]
    control_dir = workdir / "cp"
    control_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(PLAYBOOK_DIR / "ansible.cfg"),
        "ANSIBLE_HOME": str(workdir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    cmds_before = {n: lab.remote_commands(n) for n in names}
    cpu_before = sum(lab.sshd_cpu_seconds(n) for n in names)
    with open(log, "w") as out:
        start = time.monotonic()
        proc = subprocess.Popen([str(playbook_bin), "-i", str(inventory), str(PLAYBOOK)], cwd=PLAYBOOK_DIR,
                                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
    masters_cpu = close_masters(control_dir)
    time.sleep(0.2)  # let each node's sshd reap the sessions the masters held
    per_host = [lab.remote_commands(n) - cmds_before[n] for n in names]
    recap = parse_recap(log.read_text())
    return {
        "wall_s": wall,
        "controller_cpu_s": usage.ru_utime + usage.ru_stime + masters_cpu,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "lab_cpu_s": sum(lab.sshd_cpu_seconds(n) for n in names) - cpu_before,
        "commands_per_host": sorted(per_host)[len(per_host) // 2],
        "commands_spread": (min(per_host), max(per_host)),
        "changed": max((r["changed"] for r in recap.values()), default=None),
        "failed_hosts": sorted(h for h, r in recap.items() if r["failed"] or r["unreachable"]),
        "recap_hosts": len(recap),
        "rc": os.waitstatus_to_exitcode(status),
        "log": str(log),
    }


def parse_recap(text: str) -> dict[str, dict]:
    """PLAY RECAP lines: ``node1 : ok=12 changed=9 unreachable=0 failed=0 ...``."""
    out = {}
    for line in text.splitlines():
        match = RECAP.match(line.strip())
        if match:
            host, ok, changed, unreachable, failed = match.groups()
            out[host] = {"ok": int(ok), "changed": int(changed), "unreachable": int(unreachable),
                         "failed": int(failed)}
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _settings_lines(path: Path) -> list[str] | None:
    """A config file's settings: its lines without comments and blanks."""
    text = _read(path)
    if text is None:
        return None
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _owner_mode(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return f"{st.st_uid}:{st.st_gid} {st.st_mode & 0o7777:o}"


def node_state(lab, name: str) -> dict[str, object]:
    """What both tools set, read from a lab node's filesystem (``Lab.root``)
    and its emulated DCB state (``Lab.dcb_state``):
    loaded modules, the boot-time module list, rdma_cm's RoCE mode and ToS
    per port, ECN enable, trust, the DSCP map and PFC per netdev, the boot
    script and unit (present, owner and mode: each tool renders its own),
    the NCCL settings and shell profile. Files are compared by their
    settings, since each tool writes its own header and block markers."""
    root = lab.root(name)
    state: dict[str, object] = {}
    for module in MODULES:
        state[f"module {module}"] = _read(root / "sys/module" / module / "initstate")
    conf = root / "etc/modules-load.d/ccrhost-rdma.conf"
    state["modules-load.d"] = _settings_lines(conf)
    state["modules-load.d owner mode"] = _owner_mode(conf)
    cm = root / "sys/kernel/config/rdma_cm"
    for attr in sorted(cm.glob("*/ports/*/default_roce_*")):
        state[str(attr.relative_to(root))] = _read(attr)
    for attr in sorted((root / "sys/class/net").glob("*/ecn/roce_[rn]p/enable/*")):
        state[str(attr.relative_to(root))] = _read(attr)
    for port in sorted((root / "sys/class/net").glob("*/ecn")):
        netdev = port.parent.name
        qos = lab.dcb_state(name, netdev)
        app = qos["app"] if qos else {}
        state[f"{netdev} trust"] = ("dscp" if app else "pcp") if qos else None
        for dscp in (26, 48):
            state[f"{netdev} DSCP {dscp} priority"] = app.get(str(dscp))
        state[f"{netdev} PFC"] = qos and qos["pfc"]
    for path in ("etc/ccrhost/boot-apply.sh", "etc/systemd/system/ccrhost-boot.service"):
        state[f"{path} owner mode"] = _owner_mode(root / path)
    nccl = root / "etc/nccl.conf"
    state["nccl.conf"] = _settings_lines(nccl)
    state["nccl.conf owner mode"] = _owner_mode(nccl)
    profile = root / "etc/profile.d/ccrhost-nccl.sh"
    state["NCCL shell profile"] = _settings_lines(profile)
    state["NCCL shell profile owner mode"] = _owner_mode(profile)
    return state


def differences(ccrhost: dict, ansible: dict) -> list[str]:
    """Each key where the two end states differ, with both values."""
    return [f"{key}: ccrhost {ccrhost.get(key)!r}, Ansible {ansible.get(key)!r}"
            for key in sorted(set(ccrhost) | set(ansible)) if ccrhost.get(key) != ansible.get(key)]
