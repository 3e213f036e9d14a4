"""The NVLink tray of a rack-scale system (GB200/GB300 NVL72, issue 49):
pure judges of its IMEX domain, its GPUs' fabric membership and health,
and its NVLinks against the platform's figures.

The readings come from probes/imex.py (``nvidia-imex-ctl -N``, the IMEX
unit, the channel device) and the GPU health probe (probes/gpu_health.py:
the ``Fabric`` section of ``nvidia-smi -q`` or ``nvmlDeviceGetGpuFabricInfoV``,
and the NVLinks). What could not be read is UNKNOWN with its own code,
never a pass. The verdict judges a tray with these where ``imex_enable`` is on
(``model.verdict.tray_reasons``), on every path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.gpu_health import GpuHealth
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason

# The connectivity table's cells, as nvidia-imex-ctl's own legend prints them
# (AWS PCS user guide, capacity-blocks-nvidia-imex; tests/fixtures/imex/).
CONNECTED = "C"
CELLS = {
    "I": "Invalid - Node wasn't reachable, no connection status available",
    "N": "Never Connected",
    "R": "Recovering - Connection was lost, but clean up has not yet been triggered.",
    "D": "Disconnected - Connection was lost, and clean up has been triggreed.",
    "A": "Authenticating - If GSSAPI enabled, client has initiated mutual authentication.",
    "!V!": "Version mismatch, communication disabled.",
    "!M!": "Node map mismatch, communication disabled.",
    CONNECTED: "Connected - Ready for operation",
}
NODE_READY = "READY"
DOMAIN_UP = "UP"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"  # a GPU in no cluster (Azure/azhpc-images PR #506)


@dataclass
class ImexNode:
    """One line of ``Nodes:``: ``Node #0   - 172.31.48.81    - READY                - Version: 570.172``."""
    index: int
    address: str
    status: str
    version: str | None = None  # older daemons print no version

    def text(self) -> str:
        return f"node #{self.index} ({self.address})"


@dataclass
class ImexDomain:
    """``nvidia-imex-ctl -N``: the node list, the connectivity table and the domain's state."""
    nodes: list[ImexNode] = field(default_factory=list)
    table: dict[str, str] = field(default_factory=dict)  # "from,to" -> cell (a JSON object's keys are strings)
    state: str | None = None          # "Domain State: UP"
    error: str | None = None          # why it could not be read (the tool's own words)

    def cell(self, i: int, j: int) -> str | None:
        return self.table.get(f"{i},{j}")

    def set_cell(self, i: int, j: int, cell: str) -> None:
        self.table[f"{i},{j}"] = cell

    def links(self) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, _, b in (k.partition(",") for k in self.table)]


@dataclass
class ImexReading:
    unit: str | None = None           # systemctl is-active <imex_unit>: active, inactive, failed, ...
    channel: bool | None = None       # the channel device is a character device; None: not looked at
    addresses: tuple[str, ...] = ()   # this node's own addresses (hostname -I): its row of the table
    domain: ImexDomain = field(default_factory=ImexDomain)
    error: str | None = None          # the whole probe's output could not be read


@dataclass(frozen=True)
class ImexPolicy:
    enabled: bool = False
    unit: str = "nvidia-imex"
    channel: str = "/dev/nvidia-caps-imex-channels/channel0"


@dataclass(frozen=True)
class NvlinkFigures:
    """The platform's NVLink figures (hardware.nvlinks_per_gpu, hardware.nvlink_gbs) and where they come from."""
    per_gpu: int | None = None
    gbs: float | None = None          # per link, as nvidia-smi nvlink -s prints it (53.125 GB/s on GB200)
    platform: str = ""

    @classmethod
    def of(cls, platform) -> NvlinkFigures:
        if platform is None:
            return cls()
        hw = platform.hardware
        return cls(hw.get("nvlinks_per_gpu"), hw.get("nvlink_gbs"), platform.name)


# --- the IMEX domain ----------------------------------------------------------------

def _cell_text(cell: str) -> str:
    return f"{cell} ({CELLS[cell].split(' - ')[0].rstrip('.')})"


def check_imex(reading: ImexReading, policy: ImexPolicy) -> list[Reason]:
    """The IMEX unit, the channel device and the domain as this node sees it.
    Only this node's row and column of the table are its own: a link between
    two other trays is theirs to report (the rack check names the odd one out).
    Where this node's address is not known, every cell is judged."""
    if reading.error:
        return [Reason(UNKNOWN, "imex_unreadable", f"the IMEX probe's output could not be read: {reading.error}")]
    reasons: list[Reason] = []
    if reading.unit is None:
        reasons.append(Reason(UNKNOWN, "imex_unreadable", f"the {policy.unit} unit's state could not be read"))
    elif reading.unit != "active":
        reasons.append(Reason(FAIL, "imex_unit_inactive", f"the {policy.unit} unit is {reading.unit}, not active"))
    if reading.channel is False:
        reasons.append(Reason(FAIL, "imex_channel_missing",
                              f"{policy.channel} is not a character device: no job can import GPU memory over "
                              "NVLink (nvidia-caps-imex-channels not created)"))
    domain = reading.domain
    if domain.error:
        reasons.append(Reason(UNKNOWN, "imex_unreadable", f"nvidia-imex-ctl -N: {domain.error}"))
        return reasons
    if domain.state is None:
        reasons.append(Reason(UNKNOWN, "imex_unreadable", "nvidia-imex-ctl -N printed no Domain State line"))
        return reasons
    by_index = {n.index: n for n in domain.nodes}
    own = {n.index for n in domain.nodes if n.address in reading.addresses}
    if reading.addresses and not own:
        reasons.append(Reason(FAIL, "imex_nodemap_mismatch",
                              f"none of this node's addresses ({', '.join(reading.addresses)}) is in the IMEX "
                              f"node map ({', '.join(n.address for n in domain.nodes) or 'empty'})"))
        return reasons
    unknown = sorted({c for c in domain.table.values() if c not in CELLS})
    if unknown:
        reasons.append(Reason(UNKNOWN, "imex_unreadable",
                              f"nvidia-imex-ctl -N: connectivity cells {', '.join(unknown)} are none of its legend's"))
    mine = own or set(by_index)  # this node's row and column; every node where it is not known
    for n in domain.nodes:
        if n.index in mine and n.status != NODE_READY:
            reasons.append(Reason(FAIL, "imex_node_not_ready", f"IMEX {n.text()} is {n.status}, not READY"))
    versions = [n.version for n in domain.nodes if n.version]
    told = False
    if len(set(versions)) > 1:
        common = max(set(versions), key=versions.count)
        odd = [n for n in domain.nodes if n.version and n.version != common]
        if not own or any(n.index in own for n in odd) or versions.count(common) * 2 <= len(versions):
            reasons.append(Reason(FAIL, "imex_version_mismatch",
                                  "IMEX versions differ: " + ", ".join(f"{n.text()} {n.version}" for n in odd)
                                  + f" (the others {common})"))
            told = True
    table = _table(domain, by_index, own, {"V"} if told else set())
    if domain.state != DOMAIN_UP:
        # one state for the whole domain: a lost peer degrades it for every tray (nvidia-imex-ctl -N: the lost
        # node UNAVAILABLE, "Domain State: DEGRADED"). This tray's fault only where it is not READY, or its
        # own row and column fail it; else the peers' (their own checks say why)
        mine = bool(own) and all(by_index[i].status == NODE_READY for i in own) and not any(
            r.level == FAIL for r in table + reasons)
        if not mine or domain.state == "DOWN":
            reasons.append(Reason(FAIL, "imex_domain_down", f"IMEX Domain State: {domain.state}, not UP"))
        elif not any(r.code == "imex_peer_down" for r in table):
            table.append(Reason(WARN, "imex_peer_down", f"IMEX Domain State: {domain.state}: this tray is READY "
                                "and reaches every peer; another tray's own check says why"))
    return reasons + table


def _table(domain: ImexDomain, by_index: dict[int, ImexNode], own: set[int], said: set[str]) -> list[Reason]:
    """The connectivity cells of this node's row and column (every cell where it is not known).
    A peer at odds with most of the domain (cut off, or !M!/!V! with most) is that peer's fault
    (WARN here, its own check FAILs); a cell between this node and a peer the rest still reach
    is this node's FAIL."""
    def bad(i, j):
        cell = domain.cell(i, j)
        return cell is not None and cell != CONNECTED and cell in CELLS

    def cut_off(p):
        others = [q for q in by_index if q != p]
        return bool(others) and sum(bad(q, p) or bad(p, q) for q in others) * 2 > len(others)

    def name(i):
        return by_index[i].text() if i in by_index else f"node #{i}"

    reasons: list[Reason] = []
    pairs = sorted({tuple(sorted(k)) for k in domain.links() if bad(*k) and (not own or set(k) & own)})
    said = set(said)  # the kinds already told (the node list's versions): one reason per fault
    lost: list[str] = []
    down: list[str] = []
    for i, j in pairs:
        cells = [c for c in (domain.cell(i, j), domain.cell(j, i)) if c and c != CONNECTED]
        where = f"IMEX connectivity {name(i)} - {name(j)}: " + " / ".join(dict.fromkeys(map(_cell_text, cells)))
        peer = j if i in own else i if j in own else None
        other = i if peer == j else j
        if peer is not None and peer != other and cut_off(peer) and not cut_off(other):
            # the peer is at odds with most of the domain (cut off, another node map or version): its fault
            down.append(f"{where[len('IMEX connectivity '):]}")
            continue
        if "!M!" in cells:
            if "M" not in said:
                said.add("M")
                reasons.append(Reason(FAIL, "imex_nodemap_mismatch",
                                      f"{where}: nodes_config.cfg differs between the nodes; IMEX blocks "
                                      "communication to them until it is fixed"))
            continue
        if "!V!" in cells:
            if "V" not in said:
                said.add("V")
                reasons.append(Reason(FAIL, "imex_version_mismatch", where))
            continue
        lost.append(f"{where[len('IMEX connectivity '):]}")
    # one reason per kind, naming the first peers: a tray cut off from 17 peers is one fault
    if lost:
        reasons.append(Reason(FAIL, "imex_peer_disconnected", f"IMEX connectivity: {len(lost)} pair(s) not "
                              f"connected: {_first(lost)}"))
    if down:
        reasons.append(Reason(WARN, "imex_peer_down", f"IMEX connectivity: {_first(down)}: cut off from most of the "
                              "domain (the peer's own check says why)"))
    return reasons


def _first(items: list[str], n: int = 4) -> str:
    return "; ".join(items[:n]) + (f"; and {len(items) - n} more" if len(items) > n else "")


# --- the GPUs' fabric ------------------------------------------------------------------

# nvml.h / nvidia-ml-py pynvml.py NVML_GPU_FABRIC_HEALTH_MASK_*: (shift, width) of each field; a
# field's value 1 is TRUE (0 not supported, 2 false); INCORRECT_CONFIGURATION 1 is NONE, 2.. a cause
HEALTH_FIELDS = {
    "degraded_bw": (0, 0x3), "route_recovery": (2, 0x3), "route_unhealthy": (4, 0x3),
    "access_timeout_recovery": (6, 0x3), "incorrect_configuration": (8, 0xf),
    # the fault is the value 2 for these two: PARTITION_ASSIGNED_FALSE, GFM_STATE_DISCONNECTED
    "partition_assigned": (12, 0x3), "gfm_state": (14, 0x3),
}
FAULT_IS_TWO = ("partition_assigned", "gfm_state")
INCORRECT_CONFIGURATION = {  # NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*
    2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
    5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location", 8: "GPU state invalid",
}
# nvidia-smi -q prints the same fields under Fabric/Health: the row, and the value that is the fault
SMI_HEALTH = {
    "degraded_bw": ("Bandwidth", "Degraded"), "route_recovery": ("Route Recovery in progress", "True"),
    "route_unhealthy": ("Route Unhealthy", "True"), "access_timeout_recovery": ("Access Timeout Recovery", "True"),
}


def health_faults(mask: int) -> dict[str, str]:
    """The faults a ``healthMask`` sets: field -> what it says (only the fields whose value is a fault)."""
    out = {}
    for name, (shift, width) in HEALTH_FIELDS.items():
        value = (mask >> shift) & width
        if name == "incorrect_configuration":
            if value >= 2:
                out[name] = INCORRECT_CONFIGURATION.get(value, f"cause {value}")
        elif name in FAULT_IS_TWO:
            if value == 2:
                out[name] = "false" if name == "partition_assigned" else "disconnected"
        elif value == 1:
            out[name] = "true"
    return out


def _health_reason(name: str, where: str, detail: str, gpu: int) -> Reason:
    """Each health field its own code and level (literals, for tests/test_reasons.py's scan)."""
    if name == "degraded_bw":
        return Reason(FAIL, "gpu_fabric_degraded_bw", f"{where} NVLink fabric bandwidth degraded", gpu=gpu)
    if name == "route_recovery":
        return Reason(WARN, "gpu_fabric_route_recovery", f"{where} NVLink fabric route recovery in progress", gpu=gpu)
    if name == "route_unhealthy":
        return Reason(FAIL, "gpu_fabric_route_unhealthy", f"{where} NVLink fabric route unhealthy", gpu=gpu)
    if name == "access_timeout_recovery":
        return Reason(WARN, "gpu_fabric_access_timeout", f"{where} NVLink fabric access timeout recovery", gpu=gpu)
    if name == "partition_assigned":
        return Reason(FAIL, "gpu_fabric_no_partition", f"{where} is assigned to no NVLink partition", gpu=gpu)
    if name == "gfm_state":
        return Reason(WARN, "gpu_fabric_gfm_disconnected", f"{where}: the global fabric manager is disconnected "
                      "(the fabric runs on, but no route can be recovered)", gpu=gpu)
    return Reason(FAIL, "gpu_fabric_incorrect_config", f"{where} NVLink fabric incorrect configuration: {detail}",
                  gpu=gpu)


def _where(g: GpuHealth) -> str:
    return f"GPU {g.index} ({g.pci or 'PCI address not read'})"


def check_gpu_fabric(gpus: list[GpuHealth]) -> list[Reason]:
    """Every GPU of the tray in one non-zero cluster UUID and one clique, and each fault of
    its fabric health its own reason. Fabric state and status are the GPU health judge's
    (gpu_fabric_not_ready); this one does not repeat them."""
    if not gpus:
        return [Reason(UNKNOWN, "gpu_fabric_unreadable", "no GPU was read: the fabric membership is not known")]
    reasons: list[Reason] = []
    unread = [g for g in gpus if g.cluster_uuid is None or g.clique_id is None]
    if unread:
        reasons.append(Reason(UNKNOWN, "gpu_fabric_unreadable",
                              "no fabric cluster UUID or clique ID read for " + ", ".join(map(_where, unread))))
    for g in gpus:
        registering = g.fabric_state not in (None, "Completed") or g.fabric_status not in (None, "Success")
        if registering:
            continue  # not registered yet (or failed to): GPU health's gpu_fabric_not_ready says so
        if g.cluster_uuid is not None and g.clique_id is not None and (g.cluster_uuid == ZERO_UUID or g.clique_id == 0):
            reasons.append(Reason(FAIL, "gpu_fabric_no_clique",
                                  f"{_where(g)} is in no NVLink domain: ClusterUUID {g.cluster_uuid}, "
                                  f"CliqueId {g.clique_id}", gpu=g.index))
    members = [g for g in gpus if g.cluster_uuid not in (None, ZERO_UUID) and g.clique_id not in (None, 0)]
    groups: dict[tuple[str, int], list[GpuHealth]] = {}
    for g in members:
        groups.setdefault((g.cluster_uuid, g.clique_id), []).append(g)
    if len(groups) > 1:
        reasons.append(Reason(FAIL, "gpu_fabric_split", "the tray's GPUs are in more than one NVLink domain: " + "; ".join(
            f"ClusterUUID {u} clique {c}: GPU {', '.join(str(g.index) for g in gs)}"
            for (u, c), gs in sorted(groups.items()))))
    for g in gpus:
        faults = health_faults(g.health_mask) if g.health_mask is not None else dict(g.health or {})
        for name in HEALTH_FIELDS:
            if name in faults:
                reasons.append(_health_reason(name, _where(g), faults[name], g.index))
        odd = (g.health or {}).get("unreadable")
        if odd:
            reasons.append(Reason(UNKNOWN, "gpu_fabric_unreadable", f"{_where(g)} fabric health: {odd}", gpu=g.index))
    return reasons


def check_nvlinks(gpus: list[GpuHealth], figures: NvlinkFigures) -> list[Reason]:
    """Each GPU's NVLinks up against the platform's count, and each up link's speed against its
    per-link figure. A figure the platform lacks is not judged (its notes say why); links not
    read are the GPU health judge's. Links down are gpu_nvlink_down's where the GPU model is in
    its table; here the count is the platform's."""
    reasons: list[Reason] = []
    src = f"platform {figures.platform}" if figures.platform else "the platform"
    for g in gpus:
        if g.nvlinks is None:
            continue
        up = [n for n in g.nvlinks if n.up]
        # a link listed inactive is GPU health's gpu_nvlink_down: counted here only are links not listed at all
        listed_down = any(n.up is False for n in g.nvlinks)
        if figures.per_gpu and not any(n.up is None for n in g.nvlinks) and not listed_down and len(up) < figures.per_gpu:
            reasons.append(Reason(FAIL, "gpu_nvlink_count_low",
                                  f"{_where(g)}: {len(up)} NVLinks up, below {figures.per_gpu} "
                                  f"(hardware.nvlinks_per_gpu of {src})", gpu=g.index))
        if figures.gbs:
            unread = [n.link for n in up if n.speed_gbs is None]
            slow = [n for n in up if n.speed_gbs is not None and n.speed_gbs < figures.gbs]
            if slow:
                reasons.append(Reason(FAIL, "gpu_nvlink_slow",
                                      f"{_where(g)}: NVLink " + ", ".join(f"{n.link} at {n.speed_gbs:g} GB/s"
                                                                          for n in slow)
                                      + f", below {figures.gbs:g} GB/s (hardware.nvlink_gbs of {src})", gpu=g.index))
            elif unread:
                reasons.append(Reason(UNKNOWN, "gpu_nvlink_speed_unread",
                                      f"{_where(g)}: the speed of NVLink {', '.join(map(str, unread))} was not read "
                                      f"(hardware.nvlink_gbs of {src} is {figures.gbs:g} GB/s)", gpu=g.index))
    return reasons
