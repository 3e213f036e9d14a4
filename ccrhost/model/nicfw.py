"""A ConnectX NIC's non-volatile firmware settings (``mlxconfig -e q``)
against a declared profile.

Pure: the probe (``ccrhost.probes.nicfw``) parses the tool's table into
:class:`FwParam` records; the runner (``ccrhost.node.nicfw``) stores them per
NIC as an active-check result (``ccrhost.model.active``) with their time,
because the tool takes seconds per device; :func:`check_nic_firmware`,
called once from ``verdict.evaluate``, judges the stored readings and their
age on every path. The profile's parameters and sources: the platform
files' ``nic_firmware`` (ccrhost/platforms/connectx.yaml; docs/nic-firmware.md,
shared/reference/active-checks.md §3 (NVIDIA's NIC configuration operator,
pkg/host/configvalidation.go and pkg/consts/consts.go).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.optics import Ddm, LinkReading, judge_link
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason

CHECK = "nic_fw"  # the active-check name its results are stored under (ActiveResult.check)


@dataclass(frozen=True)
class FwValue:
    """One cell of the table: ``True(1)``, ``_256KB(1)``, ``255``, ``Array[0..7]``."""
    text: str                  # as printed
    alias: str | None = None   # the name before "(N)": "True", "_256KB"; None for a bare number
    number: int | None = None  # the N of "Alias(N)", or the bare number; None for an array or text


@dataclass(frozen=True)
class FwParam:
    """One row after ``Configurations:`` (mlxcfg_ui.cpp queryDevCfg)."""
    name: str                      # "MAX_ACC_OUT_READ", "CNP_DSCP_P1"
    next_boot: FwValue             # "Next Boot": what the firmware loads at the next reset
    default: FwValue | None = None  # "Default" (with -e)
    current: FwValue | None = None  # "Current" (with -e); None: the query printed no such column
    marked: bool = False           # the leading "*": next value differs from default/current


@dataclass(frozen=True)
class NicFirmware:
    """What one NIC's query gave, as stored (``ActiveResult.data``)."""
    device: str                                   # RDMA device, /sys/class/infiniband/<device>
    bdf: str | None                               # its PCI function, the tool's -d argument
    tool: str | None = None                       # "mlxconfig" or "mstconfig"
    params: dict[str, FwParam] = field(default_factory=dict)
    error: str | None = None                      # why it could not be read (tool missing, refused, timed out)
    missing: bool = False                         # no mlxconfig or mstconfig on the node
    link: LinkReading | None = None               # mlxlink -m -c (model/optics.py), where it was read
    link_error: str | None = None                 # why mlxlink gave no reading (not installed, failed, timed out)


# -- the declared profile ------------------------------------------------------

@dataclass(frozen=True)
class Want:
    """One parameter's wanted value(s) and the level of a Current that differs."""
    values: tuple[int, ...]
    level: str = FAIL
    ethernet_only: bool = False  # RoCE congestion parameters: not judged on an InfiniBand port
    source: str = ""


def default_profile(cnp_dscp: int = 48, cnp_prio: int = 6, max_acc_out_read: tuple[int, ...] | None = None,
                    link_type: int | None = None, ats: bool | None = None, params: dict | None = None) -> dict[str, Want]:
    """The profile's parameters (``_P1``: named for the NIC's first port;
    a second port's PF is judged by ``_P2``, :func:`port_of`): ``params``, a
    platform file's ``nic_firmware`` (the built-in connectx one when None),
    with the settings that override it (``None``: the platform's); the CNP
    values are ccrhost's own QoS settings (qos_cnp_dscp, qos_cnp_priority) so
    the firmware's CNPs match what the QoS stage maps."""
    if params is None:
        from ccrhost.model.platform import resolve

        params = resolve("connectx").nic_firmware
    wants = {name: Want(tuple(p["values"]), p["level"], bool(p.get("ethernet_only")), p["source"])
             for name, p in params.items()}
    op = "Mellanox/nic-configuration-operator pkg/host/configvalidation.go"
    if max_acc_out_read is not None:
        wants["MAX_ACC_OUT_READ"] = Want(tuple(max_acc_out_read), FAIL, source="setting verify_nic_max_acc_out_read")
    if ats is not None:
        wants["ATS_ENABLED"] = Want((1,) if ats else (0,), WARN, source="setting verify_nic_ats_enabled")
    wants["CNP_DSCP_P1"] = Want((cnp_dscp,), WARN, True, source="qos_cnp_dscp (ccrhost's QoS)")
    wants["CNP_802P_PRIO_P1"] = Want((cnp_prio,), WARN, True, source="qos_cnp_priority (ccrhost's QoS)")
    if link_type is not None:
        wants["LINK_TYPE_P1"] = Want((link_type,), FAIL, source=f"{op} (linkType: 1 IB, 2 ETH)")
    return wants


@dataclass(frozen=True)
class NicFwPolicy:
    enabled: bool = False                 # verify_nic_firmware: the mlxconfig audit
    wants: dict[str, Want] = field(default_factory=dict)
    optics: bool = False                  # verify_nic_optics: mlxlink's module and BER
    raw_ber_max: float | None = None      # verify_nic_raw_ber_max


@dataclass
class NicFwReading:
    """The stored per-NIC results (``ActiveResult`` dicts, by RDMA device) and when they were read."""
    read_at: float
    results: dict[str, dict] = field(default_factory=dict)
    error: str | None = None  # the state file could not be read


def _shown(v: FwValue | None) -> str:
    return v.text if v is not None else "?"


def judge_nic(nic: NicFirmware, policy: NicFwPolicy, ethernet: bool) -> list[Reason]:
    """The reasons of one NIC's readings: its firmware against the profile, its module and link."""
    where = f"NIC {nic.device}" + (f" ({nic.bdf})" if nic.bdf else "")
    reasons = _judge_firmware(where, nic, policy.wants, ethernet) if policy.enabled else []
    if policy.optics:
        if nic.link is None:
            reasons.append(Reason(UNKNOWN, "nic_link_unreadable", f"{where}: transceiver and BER not read: "
                                  f"{nic.link_error or 'no mlxlink reading stored'}"))
        else:
            reasons += judge_link(where, nic.link, policy.raw_ber_max)
    return reasons


def _judge_firmware(where: str, nic: NicFirmware, wants: dict[str, Want], ethernet: bool) -> list[Reason]:
    if nic.missing:
        return [Reason(UNKNOWN, "nic_fw_tool_missing",
                       f"{where}: neither mlxconfig (MFT) nor mstconfig (mstflint) is installed: its firmware "
                       "settings are not known")]
    if nic.error:
        return [Reason(UNKNOWN, "nic_fw_unreadable", f"{where}: firmware settings not read: {nic.error}")]
    reasons = []
    for name, want, p, hidden in _rows(nic, wants, ethernet):
        if hidden:
            advanced = _now(nic.params["ADVANCED_PCI_SETTINGS"])
            reasons.append(Reason(FAIL, "nic_fw_pci_hidden",
                                  f"{where}: MAX_ACC_OUT_READ is hidden because ADVANCED_PCI_SETTINGS is "
                                  f"{_shown(advanced)}: its read-request setting cannot be checked or set"))
        if p is None:
            continue  # a parameter this device does not have is not judged
        now = _now(p)
        wanted = " or ".join(str(v) for v in want.values)
        if now.number not in want.values:
            if want.level == FAIL:
                reasons.append(Reason(FAIL, "nic_fw_wrong", f"{where}: {name} is {now.text}, the profile wants "
                                      f"{wanted}"))
            else:
                reasons.append(Reason(WARN, "nic_fw_differs", f"{where}: {name} is {now.text}, the profile "
                                      f"wants {wanted}"))
        if p.current is not None and p.next_boot.text != p.current.text:
            reasons.append(Reason(WARN, "nic_fw_pending",
                                  f"{where}: firmware setting pending reboot: {name} is {p.current.text}, "
                                  f"{p.next_boot.text} at the next boot"))
    return reasons


def port_of(bdf: str | None) -> int:
    """The NIC port an RDMA device's PCI function drives: function N is port
    N + 1 (a dual-port ConnectX has one PF per port; the NIC configuration
    operator sets ``_P2`` "if second PCI function is present",
    network-operator-docs configuration-details.rst). Port 1 when unknown."""
    function = (bdf or "").rpartition(".")[2]
    return int(function) + 1 if function.isascii() and function.isdigit() and len(function) == 1 else 1


def port_name(name: str, port: int) -> str:
    """A profile parameter (named for port 1, ``CNP_DSCP_P1``) as ``port`` has it."""
    return f"{name[:-3]}_P{port}" if port != 1 and name.endswith("_P1") else name


def _rows(nic: NicFirmware, wants: dict[str, Want], ethernet: bool):
    """(name, want, the NIC's row or None, hidden) for each wanted parameter
    that applies to this port (a per-port one by this port's name: the
    query lists every port's); ``hidden``: MAX_ACC_OUT_READ left out because
    ADVANCED_PCI_SETTINGS is off (mlxconfig lists it only once that is on,
    the operator's configvalidation.go)."""
    port = port_of(nic.bdf)
    for name, want in wants.items():
        if want.ethernet_only and not ethernet:
            continue
        name = port_name(name, port)
        p = nic.params.get(name)
        advanced = nic.params.get("ADVANCED_PCI_SETTINGS")
        hidden = (p is None and name == "MAX_ACC_OUT_READ" and advanced is not None
                  and _now(advanced).number == 0)
        yield name, want, p, hidden


def _now(p: FwParam) -> FwValue:
    # a query without -e prints only Next Boot: that is all it says of the setting
    return p.current if p.current is not None else p.next_boot


def nic_from_dict(data: dict) -> NicFirmware:
    """A stored :class:`NicFirmware` (``plain`` dicts); raises ``ValueError`` when it is not one."""
    try:
        def value(v):
            return None if v is None else FwValue(str(v["text"]), v.get("alias"), v.get("number"))
        params = {name: FwParam(name, value(p["next_boot"]), value(p.get("default")), value(p.get("current")),
                                bool(p.get("marked")))
                  for name, p in (data.get("params") or {}).items()}
        link = data.get("link")
        if link is not None:
            link = LinkReading(link.get("module_state"), list(link.get("datapath") or []),
                               {k: [int(x) for x in v] for k, v in (link.get("flags") or {}).items()},
                               {k: Ddm(tuple(float(x) for x in v["values"]), v.get("low"), v.get("high"))
                                for k, v in (link.get("ddm") or {}).items()},
                               link.get("effective_ber"), link.get("raw_ber"), link.get("fec"))
        return NicFirmware(str(data["device"]), data.get("bdf"), data.get("tool"), params, data.get("error"),
                           bool(data.get("missing")), link, data.get("link_error"))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a stored NIC firmware reading: {exc}") from None


def check_nic_firmware(reading: NicFwReading | None, policy: NicFwPolicy, ethernet: dict[str, bool]) -> list[Reason]:
    """Reasons from the stored readings (``ethernet``: RDMA device -> whether
    its port is Ethernet): a result past its validity is UNKNOWN as stale,
    never its old reading; a compute NIC with no stored result is UNKNOWN."""
    from ccrhost.model.active import ActiveResult, stale_message

    if reading is None or not (policy.enabled or policy.optics):
        return []
    if reading.error:
        return [Reason(UNKNOWN, "nic_fw_unreadable", f"NIC firmware results: {reading.error}")]
    reasons = []
    for device in sorted(ethernet):
        data = reading.results.get(device)
        if data is None:
            reasons.append(Reason(UNKNOWN, "nic_fw_never_read",
                                  f"NIC {device}: no stored NIC tools' reading (mlxconfig, mlxlink; the deploy, the health check or "
                                  "`ccrhost check --refresh-nic` reads it)"))
            continue
        try:
            result = ActiveResult.from_dict(data)
            nic = nic_from_dict(result.data or {})
        except ValueError as exc:
            reasons.append(Reason(UNKNOWN, "nic_fw_unreadable", f"NIC {device}: {exc}"))
            continue
        if result.stale(reading.read_at):
            reasons.append(Reason(UNKNOWN, "nic_fw_stale", stale_message(
                f"NIC {device}", result, reading.read_at, "the stored NIC tools' reading", "read it again")))
            continue
        reasons += judge_nic(nic, policy, ethernet[device])
    return reasons


def plan(nic: NicFirmware, wants: dict[str, Want], ethernet: bool) -> dict[str, int]:
    """What ``mlxconfig set`` must write so the next boot loads the profile:
    each wanted parameter whose Next Boot differs (the first allowed value),
    and MAX_ACC_OUT_READ with ADVANCED_PCI_SETTINGS where it is hidden.
    Nothing for a NIC that could not be read; a parameter the NIC does not
    list is never written."""
    if nic.missing or nic.error:
        return {}
    out = {}
    for name, want, p, hidden in _rows(nic, wants, ethernet):
        if hidden and "ADVANCED_PCI_SETTINGS" in wants and nic.params["ADVANCED_PCI_SETTINGS"].next_boot.number == 0:
            # hidden now: written together with ADVANCED_PCI_SETTINGS (once that is written, the next run
            # cannot see it before the reboot that lists it, and writes nothing more)
            out[name] = want.values[0]
        if p is None:
            continue
        if p.next_boot.number not in want.values:
            out[name] = want.values[0]
    return out


def reboot_owed(nic: NicFirmware, planned: dict[str, int]) -> list[str]:
    """The parameters whose running value the next boot changes: written now, or pending already."""
    pending = [p.name for p in nic.params.values() if p.current is not None and p.current.text != p.next_boot.text]
    return sorted(set(pending) | set(planned))
