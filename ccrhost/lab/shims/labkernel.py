"""What the emulated kernel does when a shimmed tool asks it something.

Shared by the shims in this folder; standard library only, because the
shims run inside lab nodes for every remote command that calls them.
"""

import marshal
import os
import sys

# The node's record (ccrhost.lab.fleet writes node.json and this twin).
# Shims read marshal, built in, because importing json costs each shim run
# about 7 ms, half of what the run takes otherwise.
NODE_FILE = "/run/ccrhost-lab/node.marshal"


_node = None


def node() -> dict:
    global _node
    if _node is None:  # once per run: a shim run is short, and a fault changes between runs
        with open(NODE_FILE, "rb") as f:
            _node = marshal.load(f)
    return _node


def die(message: str, code: int = 1):
    sys.stderr.write(message + "\n")
    sys.exit(code)


GARBLE_FILE = "/run/ccrhost-lab/garble.json"


def garble_rules(tool: str) -> list[tuple[str, str]]:
    """(find, replace) rules for a tool's output: the node's garble_tool
    faults, then the ones a test wrote to GARBLE_FILE while the node runs
    (a reboot clears them). An empty find replaces the whole output."""
    rules = []
    for fault in node()["faults"]:
        kind, _, value = fault.partition("=")
        name, _, rule = value.partition(":")
        if kind == "garble_tool" and name == tool:
            find, _, replace = rule.partition("=>")
            rules.append((find, replace))
    try:
        with open(GARBLE_FILE) as f:
            import json  # here: the file exists only while a test garbles a tool

            rules += [(r["find"], r["replace"]) for r in json.load(f) if r["tool"] == tool]
    except FileNotFoundError:
        pass
    return rules


def output(tool: str, text: str) -> None:
    """Print a tool's stdout, corrupted the way the node's garble rules say:
    odd output from a driver or tool version ccrhost has not seen."""
    for find, replace in garble_rules(tool):
        text = text.replace(find, replace) if find else replace
    sys.stdout.write(text)


def module_loaded(name: str) -> bool:
    return os.path.exists(f"/sys/module/{name}/initstate")


def configfs_mounted() -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == "/sys/kernel/config" for line in f if len(line.split()) > 1)


def hot_unplug() -> None:
    """The rdma_vanish fault: the first QoS write or configfs mkdir finds the
    device gone, as after a hot-unplug between fact gathering and the write."""
    n = node()
    for fault in n["faults"]:
        if not fault.startswith("rdma_vanish="):
            continue
        dev = fault.split("=", 1)[1]
        link = f"/sys/class/infiniband/{dev}"
        if os.path.islink(link):
            nic = next(x for x in n["nics"] if x["name"] == dev)
            target = os.path.realpath(link)
            os.unlink(link)
            import subprocess  # here: every shim run loads this module, and subprocess costs each ~5 ms

            subprocess.run(["rm", "-rf", target, os.path.realpath(f"/sys/class/net/{nic['netdev']}")])
            os.unlink(f"/sys/class/net/{nic['netdev']}")


def register_rdma_cm() -> None:
    """rdma_cm adds its configfs subsystem when both it and configfs are there."""
    if module_loaded("rdma_cm") and configfs_mounted():
        os.makedirs("/sys/kernel/config/rdma_cm", exist_ok=True)


# --- DCB (dcbnl) state of a netdev: what mlx5 keeps in the kernel and the
# firmware. Both mlnx_qos and dcb act on it; a reboot clears it.

DEFAULT_CABLE_LEN = 7          # mlx5e default cable length, metres
PORT_BUFFER = 4151520          # CX-7 max_buffer_size in the reference's sample
DEFAULT_BUFFERS = [262016, 0, 0, 0, 0, 0, 0, 0]


def netdev_exists(ifname: str) -> bool:
    return os.path.isdir(f"/sys/class/net/{ifname}")


def efa_netdev(ifname: str) -> bool:
    """The ENA netdev beside an EFA device: its driver has no DCB
    (dcbnl_ops) and no pause parameters, and no mlx5 counters."""
    return any(n["netdev"] == ifname and n.get("driver") == "efa" for n in node()["nics"])


def dcb_path(node_dir: str, ifname: str) -> str:
    """Where the emulated driver keeps a netdev's DCB state: marshal, like
    the node record (``Lab.dcb_state`` reads it from outside the node)."""
    return os.path.join(node_dir, "kernel", "dcb", f"{ifname}.marshal")


def dcb_state(ifname: str) -> dict:
    try:
        with open(dcb_path(node()["dir"], ifname), "rb") as f:
            return marshal.load(f)
    except FileNotFoundError:
        boot = node().get("qos_boot", {}).get(ifname)  # the profile's power-on state
        if boot:
            return {k: v for k, v in boot.items() if k != "port_buffer"}
        return {"pfc": [0] * 8, "delay": DEFAULT_CABLE_LEN, "app": {}, "buffer_size": list(DEFAULT_BUFFERS),
                "prio2buffer": [0] * 8, "macsec_bypass": "off"}


def port_buffer(ifname: str) -> int:
    """The port's whole receive buffer (CX-7's unless the profile says)."""
    return node().get("qos_boot", {}).get(ifname, {}).get("port_buffer", PORT_BUFFER)


def port_speed_mtu(ifname: str) -> tuple[int, int]:
    nic = next((n for n in node()["nics"] if n["netdev"] == ifname), None)
    speed = 40
    if nic:
        with open(f"/sys/class/infiniband/{nic['name']}/ports/1/rate") as f:
            speed = int(f.read().split()[0])
    with open(f"/sys/class/net/{ifname}/mtu") as f:
        return speed, int(f.read())


def xoff(cable_len: int, speed: int, mtu: int) -> int:
    """mlx5 port_buffer.c calculate_xoff()."""
    return (301 + 216 * cable_len // 100) * max(speed, 40) // 1000 + 272 * mtu // 100


def lossless_error(ifname: str, st: dict) -> str | None:
    speed, mtu = port_speed_mtu(ifname)
    need = xoff(st["delay"], speed, mtu) + mtu
    for buf in sorted({st["prio2buffer"][p] for p in range(8) if st["pfc"][p]}):
        if st["buffer_size"][buf] < need:
            return f"buffer_size[{buf}]={st['buffer_size'][buf]} is not enough for lossless buffer"
    if sum(st["buffer_size"]) > port_buffer(ifname):
        return f"total buffer size {sum(st['buffer_size'])} exceeds the port buffer {port_buffer(ifname)}"
    return None


def save_dcb(ifname: str, st: dict) -> None:
    """Commit a DCB change the way the driver does: refuse a lossless buffer
    too small for its xoff, else store it and refresh OFED's qos/ files."""
    error = lossless_error(ifname, st)
    if error:
        die(f"{error}\nError: Invalid argument")
    path = dcb_path(node()["dir"], ifname)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        marshal.dump(st, f)
    qos = f"/sys/class/net/{ifname}/qos"
    if os.path.isdir(qos):
        speed, mtu = port_speed_mtu(ifname)
        lossless = {st["prio2buffer"][p] for p in range(8) if st["pfc"][p]}
        headroom = xoff(st["delay"], speed, mtu)
        rows = []
        for i, size in enumerate(st["buffer_size"]):
            x_off = size - headroom if i in lossless and size else 0
            x_on = x_off - mtu if x_off else 0
            rows.append(f"{i}\t{size}\t{x_off}\t\t{x_on}\n")
        with open(f"{qos}/buffer_size", "w") as f:
            total = port_buffer(ifname)
            f.write(f"Port buffer size = {total}\nSpare buffer size = {total - sum(st['buffer_size'])}\n"
                    "Buffer\tSize\txoff_threshold\txon_threshold\n" + "".join(rows))
        with open(f"{qos}/prio2buffer", "w") as f:
            f.write("Priority\tBuffer\n" + "".join(f"{p}\t\t{b}\n" for p, b in enumerate(st["prio2buffer"])))


def link_share() -> float:
    """This node's lab link against the nominal rate: ``link_slow=<Mbit/s>``
    shapes it slower (the bandwidth shims' figures follow it)."""
    nominal = node()["link_mbit"]
    slow = [f.partition("=")[2] for f in node()["faults"] if f.partition("=")[0] == "link_slow"]
    return min(float(slow[0]) / nominal, 1.0) if slow and slow[0].isdigit() else 1.0


def count_bytes(dev: str, direction: str, nbytes: float) -> None:
    """Advance a port's data counters (4-byte words) as the hardware does;
    the 32-bit counter wraps, the _64 one does not."""
    base = f"/sys/class/infiniband/{dev}/ports/1/counters/port_{direction}_data"
    words = int(nbytes // 4)
    for path, wrap in ((base, 2**32), (base + "_64", None)):
        try:
            with open(path) as f:
                value = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        value += words
        with open(path, "w") as f:
            f.write(f"{value % wrap if wrap else value}\n")


# --- GPU health faults (nvidia-smi, dmesg, journalctl) -------------------------
# Each takes [INDEX] (default GPU 0; gpu_fell_off: the last); xid CODE[:INDEX];
# nvlink_down INDEX[:LINK] (default link 0); fabric_not_ready without a value: every GPU.

RESET_FILE = "/run/ccrhost-lab/gpu_reset"  # faults a GPU reset cleared (nvidia-smi -r); a boot empties /run
HOLDERS_FILE = "/run/ccrhost-lab/gpu_holders"  # "INDEX PID" lines: a process that holds a GPU open
# What a GPU reset clears: a pending row remap and retired pages take effect,
# the volatile ECC counts start again (nvidia-smi(1) -r; NVIDIA's XID catalogue
# "reset the GPU" resolution).
RESET_CLEARS = ("row_remap_pending", "ecc_uncorrectable")


def reset_faults() -> set[str]:
    try:
        with open(RESET_FILE) as f:
            return set(f.read().split())
    except FileNotFoundError:
        return set()


def holders() -> dict[int, list[int]]:
    """GPU index -> the live PIDs that hold it."""
    out: dict[int, list[int]] = {}
    try:
        with open(HOLDERS_FILE) as f:
            rows = [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return out
    for index, pid in rows:
        if os.path.exists(f"/proc/{pid}"):
            out.setdefault(int(index), []).append(int(pid))
    return out


def gpu_health() -> dict:
    """``{kind: {index: value}}`` for the node's GPU health faults (less
    those a GPU reset cleared)."""
    count = node()["gpus"]["count"]
    out: dict = {}
    cleared = reset_faults()
    for fault in node()["faults"]:
        if fault in cleared:
            continue
        kind, eq, value = fault.partition("=")
        if kind == "xid":  # CODE[:INDEX[:GI[:CI]]]
            code, index, *mig = value.split(":") + ([] if ":" in value else ["0"])
            out.setdefault(kind, {}).setdefault(int(index or 0), []).append((int(code), *map(int, mig)))
        elif kind == "gpu_serial":
            index, _, serial = value.partition(":")
            out.setdefault(kind, {})[int(index)] = serial
        elif kind == "nvlink_down":
            index, _, link = value.partition(":")
            out.setdefault(kind, {}).setdefault(int(index or 0), set()).add(int(link or 0))
        elif kind == "fabric_not_ready" and not eq:
            out[kind] = dict.fromkeys(range(count), True)
        elif kind in ("gpu_fell_off", "row_remap_pending", "row_remap_failure", "ecc_uncorrectable",
                      "fabric_not_ready", "pcie_replay"):
            default = count - 1 if kind == "gpu_fell_off" else 0
            out.setdefault(kind, {})[int(value) if value else default] = True
    return out


def gpu_uuid(i: int, health: dict | None = None) -> str:
    """GPU ``i``'s UUID: the node's own (lab/boot.py), or, for a board moved
    into the slot (gpu_serial fault), that board's, made from its serial, as
    a board carries its UUID with it."""
    moved = (gpu_health() if health is None else health).get("gpu_serial", {})
    if i not in moved:
        return node()["gpu_uuids"][i]
    import uuid  # only for a moved board: every probe runs nvidia-smi

    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"board-{moved[i]}"))


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def gpu_bus(i: int) -> str:
    """GPU ``i``'s PCI function as the driver logs it: ``0000:18:00``."""
    bdfs = node().get("gpu_bdfs", [])
    return (bdfs[i] if i < len(bdfs) else f"0000:{0x18 + i * 0x10:02x}:00.0").lower()[:10]


def xid_lines() -> list[tuple[float, str]]:
    """(seconds before now, kernel log text) of the node's XIDs, in the
    NVIDIA driver's format (``NVRM: Xid (PCI:0000:cb:00): 13, pid=..., name=..., text``)."""
    faults = gpu_health()
    lines = []
    for i in faults.get("gpu_fell_off", {}):
        lines.append((2.0, f"NVRM: Xid (PCI:{gpu_bus(i)}): 79, pid='<unknown>', name=<unknown>, "
                           "GPU has fallen off the bus."))
    for i, codes in faults.get("xid", {}).items():
        for code, *mig in codes:
            # krcReportXid's attributions: "PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]"
            attr = "".join(f" {name}:{n:02d}" for name, n in zip(("GPU-I", "GPU-CI"), mig))
            lines.append((1.0, f"NVRM: Xid (PCI:{gpu_bus(i)}{attr}): {code}, pid=4242, name=python, "
                               f"lab fault xid={code}"))
    return lines


# --- the link_flap fault: a link that has flapped every SECONDS since boot ------
# Lab nodes share the host's kernel, so their boot is the host's (/proc/uptime).

RING_FLAPS = 256  # the ring buffer keeps the latest messages only: the last flaps' lines


def flaps_since_boot(period: float, now: float | None = None) -> int:
    """How many times a link flapping every ``period`` seconds since boot went down."""
    return int((uptime() if now is None else now) // period)


def link_lines() -> list[tuple[float, str]]:
    """(seconds before now, kernel log text) of the flapping links' last
    flaps, as mlx5e logs a carrier change (en_main.c mlx5e_update_carrier:
    netdev_info "Link down" / "Link up": ``mlx5_core 0000:01:00.0
    enp1s0f0np0: Link down``). An InfiniBand port's netdev (IPoIB) logs no
    such line: its flaps show in link_downed alone."""
    now = uptime()
    nics = {n["name"]: n for n in node()["nics"]}
    lines = []
    for dev, period in node().get("link_flap", []):
        nic = nics.get(dev)
        if not nic or not nic.get("ethernet") or not nic.get("pci"):
            continue
        last = flaps_since_boot(period, now)
        for k in range(max(1, last - RING_FLAPS + 1), last + 1):
            at = k * period
            prefix = f"mlx5_core {nic['pci']} {nic['netdev']}: "
            lines.append((now - at, prefix + "Link down"))
            up = at + min(0.5, period / 2)
            if up <= now:
                lines.append((now - up, prefix + "Link up"))
    return lines


# mlx5_core's fatal lines as NVSentinel's test holds them (mlx5_core_err: "<func>:<line>:(pid N): text")
MLX5_FATAL = {
    "cmd_exec_timeout": "wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource",
    "health_poll_failed": "poll_health:852:(pid 0): device's health compromised - reached miss count",
    "unrecoverable_err": "print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware error",
}


def mlx5_lines() -> list[tuple[float, str]]:
    """(seconds before now, text) of the mlx5_fatal faults: ``[DEV[:KIND]]``."""
    nics = [n for n in node()["nics"] if n.get("pci")]
    lines = []
    for fault in node()["faults"]:
        kind, _, value = fault.partition("=")
        if kind != "mlx5_fatal" or not nics:
            continue
        dev, _, what = value.partition(":")
        nic = next((n for n in nics if n["name"] == dev), None) if dev else nics[0]
        if nic is not None:
            lines.append((3.0, f"mlx5_core {nic['pci']}: {MLX5_FATAL.get(what or 'health_poll_failed', what)}"))
    return lines


def host_lines() -> list[tuple[float, str]]:
    """(seconds before now, text) of the host's fatal lines: the kernel_soft_lockup fault
    (kernel/watchdog.c, pr_fmt "watchdog: ")."""
    if "kernel_soft_lockup" in node()["faults"]:
        return [(5.0, "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:1234]")]
    return []


def kernel_lines() -> list[tuple[float, str]]:
    """Everything the node's kernel logged, oldest first."""
    return sorted(xid_lines() + link_lines() + mlx5_lines() + host_lines(), key=lambda x: -x[0])
