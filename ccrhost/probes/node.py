"""The whole node in one command: every probe a deploy needs, back to back.

Each probe's snippet runs in its own subshell under a ``@@@ <probe>`` marker
and prints its own ``@@`` sections; each is parsed on its own, so output one
parser cannot read spoils that probe alone, and the stages that need it fail
the host with the reason while the others still have their readings.
"""

from __future__ import annotations

import base64
import binascii
import gzip
from dataclasses import dataclass, field

from ccrhost.probes import baseline, fabric, files, gpu, gpu_health, host_health, kernel, pci, qos, rdma
from ccrhost.probes.sections import split

PROBE_MARK = "@@@"
PACKED_MARK = "@@@@packed"
# where the fabric probe keeps its last reading unless the settings say
# otherwise (verify_link_state's default)
DEFAULT_STATE = "/run/ccrhost/counters"


@dataclass
class NodeSnapshot:
    rdma: rdma.RdmaReading = field(default_factory=rdma.RdmaReading)  # probes/rdma.py: sysfs, configfs, ip
    modules: kernel.Modules = field(default_factory=kernel.Modules)    # probes/kernel.py
    qos: qos.QosReading = field(default_factory=qos.QosReading)        # probes/qos.py, every RoCE netdev
    files: dict[str, files.FileState | None] = field(default_factory=dict)  # probes/files.py, managed files
    gpus: gpu.GpuProbe = field(default_factory=gpu.GpuProbe)           # probes/gpu.py (nvidia-smi)
    # probes/pci.py: GPU/NIC PCI paths, ACS, Device Control, peer memory, versions, error counters
    pci: pci.PciSnapshot = field(default_factory=lambda: pci.parse_pci_dump([]))
    # probes/gpu_health.py: nvidia-smi -q and nvlink, the kernel log's XIDs, the PCI bus's GPUs
    gpu_health: gpu_health.GpuHealthReading = field(default_factory=gpu_health.GpuHealthReading)
    # probes/fabric.py: the node's stored counter reading and the one now
    fabric: fabric.FabricDump | None = None
    # probes/baseline.py: CPUs, memory, swap, hugepages, mounts, modules, cmdline, sysctls, versions
    baseline: baseline.BaselineReading = field(default_factory=baseline.BaselineReading)
    # probes/host_health.py: systemd units, time sync, EDAC, memlock, an idle node's GPU use
    host_health: host_health.HostHealthReading | None = None  # None: not read
    errors: dict[str, str] = field(default_factory=dict)  # probe -> why its output could not be read


# probe name -> (what it reads, for messages; parser)
_PARSERS = {
    "rdma": (rdma.SOURCE, rdma.parse_rdma_dump),
    "modules": ("/sys/module and modules.builtin", kernel.parse_modules),
    "qos": ("mlnx_qos / dcb and the ecn, qos and cc_params trees", qos.parse_qos_dump),
    "files": ("the managed files", files.parse_states),
    "gpus": ("nvidia-smi", gpu.parse_command_output),
    "pci": ("the GPUs' and NICs' PCI functions (setpci/lspci, sysfs)", pci.parse_pci_dump),
    "gpu_health": ("nvidia-smi -q / nvlink and the kernel log", gpu_health.parse_command_output),
    "fabric": ("the lossless-fabric counters (ethtool, hw_counters)", fabric.parse_fabric_dump),
    "baseline": (baseline.WHAT, baseline.parse_baseline_dump),
    "host_health": (host_health.WHAT, host_health.parse_command_output),
}


PROBES = tuple(_PARSERS)


def command(paths, wants: str, probes=PROBES, state: str = DEFAULT_STATE, keep: bool = False,
            ask: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()), host=None) -> str:
    """One shell command printing every probe (or those in ``probes``);
    ``paths``: managed files, ``wants``: the boot unit's enable link;
    ``state``: the fabric probe's stored reading, replaced by the one now
    with ``keep`` (rates are changes since it: no second reading, no sleep);
    ``ask``: the sysctls and mount points the host baseline reads
    (``BaselinePolicy.ask``).
    ``host``: the host health probe's arguments (``probes.host_health.args``);
    None: the checks are off, the section says so and reads nothing.

    The output travels as one line: gzip (where the node has it) then
    base64. pyinfra hands every output line through a thread queue, and at
    fleet scale the controller's cost per line, not the node, was the
    bound: some 800 lines a node become one.
    """
    snippets = {
        "rdma": rdma.COMMAND,
        "modules": kernel.COMMAND,
        "qos": qos.command_roce(wants),
        "files": files.command(paths),
        "gpus": gpu.COMMAND,
        "pci": pci.COMMAND,
        "gpu_health": gpu_health.COMMAND,
        "fabric": fabric.command(state, keep),
        "baseline": baseline.command(*ask),
        "host_health": host_health.command(*host) if host else f"echo {host_health.OFF}",
    }
    chosen = [(name, snippet) for name, snippet in snippets.items() if name in probes]
    # Each probe a function (a subshell, as before); all of them at once,
    # each into a file of a temporary folder, printed in order after the
    # last: the node answers in the time of its slowest probe, not their sum.
    # Where no folder can be made they run one after another, the same output.
    defs = "".join(f"_p{i}() ( {snippet}\n)\n" for i, (_, snippet) in enumerate(chosen))
    each = [f"{{ echo '{PROBE_MARK} {name}'; _p{i}; }}" for i, (name, _) in enumerate(chosen)]
    outputs = " ".join(f'"$t/{i}"' for i in range(len(chosen)))
    body = (f"{defs}t=$(mktemp -d 2>/dev/null) || t=\n"
            "if [ -n \"$t\" ]; then\n"
            + "".join(f'{run} > "$t/{i}" &\n' for i, run in enumerate(each))
            + f"wait; cat {outputs}; rm -rf \"$t\"\nelse\n"
            + "".join(f"{run}\n" for run in each)
            + "fi")
    return (f"if command -v gzip >/dev/null 2>&1; then z='gzip -1'; m=gz; else z=cat; m=raw; fi; "
            f"echo \"{PACKED_MARK} $m\"; {{ {body}\n}} 2>/dev/null | $z | base64 -w0; echo")


def unpack(lines: list[str]) -> list[str]:
    """The probes' own lines from :func:`command`'s packed output (plain
    lines, as a local run or an older command prints them, pass through)."""
    if len(lines) < 2 or not lines[0].startswith(PACKED_MARK):
        return lines
    try:
        data = base64.b64decode(lines[1].strip(), validate=True)
        if lines[0].split()[-1] == "gz":
            data = gzip.decompress(data)
    except (ValueError, binascii.Error, OSError, EOFError) as exc:
        raise SnapshotFormatError(f"the packed node output does not decode: {exc}") from None
    return data.decode("utf-8", "replace").splitlines()


class SnapshotFormatError(ValueError):
    pass


# A fleet's nodes mostly print the same QoS and PCI sections (same boards,
# same settings): each distinct text of these two is parsed once per run,
# and the nodes that printed it share the record, which no stage changes.
# They were a third of the controller's parsing per host.
_SHARED = ("qos", "pci")
_parsed: dict[tuple[str, tuple[str, ...]], object] = {}
_PARSED_MAX = 64


def _parse(tag: str, lines: list[str]):
    parse = _PARSERS[tag][1]
    if tag not in _SHARED:
        return parse(lines)
    key = (tag, tuple(lines))
    if key not in _parsed:
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[key] = parse(lines)  # a parse error is raised each time, never kept
    return _parsed[key]


def parse_snapshot(lines: list[str], probes=PROBES) -> NodeSnapshot:
    """Never raises: a probe whose output cannot be parsed is recorded in
    ``errors`` and keeps its empty default. ``probes``: the ones the
    command printed (:func:`command`); the others keep their defaults."""
    snap = NodeSnapshot()
    try:
        lines = unpack(lines)
    except SnapshotFormatError as exc:
        snap.errors = {name: str(exc) for name in probes}
        return snap
    seen = set()
    for section in split(lines, PROBE_MARK):
        if section.tag not in _PARSERS:
            continue
        seen.add(section.tag)
        source = _PARSERS[section.tag][0]
        try:
            setattr(snap, section.tag, _parse(section.tag, section.lines))
        except Exception as exc:  # any parser, any input: that probe's failure, never the run's
            snap.errors[section.tag] = f"cannot read {source}: {exc}"
    for name in set(probes) - seen:
        snap.errors[name] = f"no output from the {name} probe"
    return snap


def merge(old: NodeSnapshot, new: NodeSnapshot, probes) -> NodeSnapshot:
    """``new``, a read of ``probes`` only, completed with ``old``'s other
    probes (their readings and errors)."""
    for name in PROBES:
        if name not in probes:
            setattr(new, name, getattr(old, name))
            if name in old.errors:
                new.errors[name] = old.errors[name]
    return new
