"""A NIC's transceiver and physical link as ``mlxlink -m -c`` reports them:
module state, per-lane fault flags, DDM values against the ranges mlxlink
itself prints, and the link's bit error rates.

Pure: the probe (``ccrhost.probes.mlxlink``) fills :class:`LinkReading`; it is
stored with the NIC's firmware reading (``model.nicfw.NicFirmware.link``) and
judged by :func:`judge_link` from ``nicfw.check_nic_firmware``. Flags,
states and the DDM rule are gcm's ``check_mlxlink`` (critical: Module FW
Fault, DataPath FW Fault, Tx Fault, Rx LOS, Tx LOS, a Module State other than
"Ready state", a DataPath state other than DPActivated; warn: Rx/Tx CDR LOL,
Tx Adaptive EQ Fault, a DDM value outside its printed range). The effective
BER limit is the IBTA's 1e-12 (NVSentinel's symbol_error rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, WARN, Reason

CRITICAL_FLAGS = ("Module FW Fault", "DataPath FW Fault", "Tx Fault", "Rx LOS", "Tx LOS")
WARN_FLAGS = ("Rx CDR LOL", "Tx CDR LOL", "Tx Adaptive EQ Fault")
READY, ACTIVATED = "Ready state", "DPActivated"
EFFECTIVE_BER_MAX = 1e-12


@dataclass(frozen=True)
class Ddm:
    """``Temperature [C] : 49 [-10..80]``: the value(s) per lane and the range printed beside them."""
    values: tuple[float, ...]
    low: float | None = None
    high: float | None = None


@dataclass
class LinkReading:
    module_state: str | None = None                      # "Module State" (None: N/A or not printed)
    datapath: list[str] = field(default_factory=list)     # "DataPath state [per lane]" (N/A lanes left out)
    flags: dict[str, list[int]] = field(default_factory=dict)  # "Rx LOS [per lane]" -> [0, 0, 1, 0]
    ddm: dict[str, Ddm] = field(default_factory=dict)     # "Temperature [C]" -> Ddm
    effective_ber: float | None = None                   # "Effective Physical BER" (15E-255: none seen)
    raw_ber: float | None = None                         # "Raw Physical BER"
    fec: str | None = None                               # "FEC" (Operational Info)


def _set(link: LinkReading, name: str) -> str:
    """"" when the flag is clear, else " on lane(s) N" (" " for a flag that is not per lane)."""
    values = link.flags.get(name, ())
    lanes = [i for i, v in enumerate(values) if v]
    if not lanes:
        return ""
    if len(values) == 1:
        return " "
    return f" on lane {lanes[0]}" if len(lanes) == 1 else f" on lanes {', '.join(map(str, lanes))}"


def judge_link(where: str, link: LinkReading, raw_ber_max: float | None = None) -> list[Reason]:
    reasons = []
    if link.module_state is not None and link.module_state != READY:
        reasons.append(Reason(FAIL, "nic_module_fault", f"{where}: transceiver Module State is "
                              f"{link.module_state!r}, not {READY!r}"))
    bad = [f"lane {i}: {s}" for i, s in enumerate(link.datapath) if s != ACTIVATED]
    if bad:
        reasons.append(Reason(FAIL, "nic_module_fault", f"{where}: transceiver DataPath state not {ACTIVATED} "
                              f"({', '.join(bad)})"))
    for name in CRITICAL_FLAGS:
        if _set(link, name):
            reasons.append(Reason(FAIL, "nic_module_fault", f"{where}: transceiver {name} set{_set(link, name).rstrip()}"))
    for name in WARN_FLAGS:
        if _set(link, name):
            reasons.append(Reason(WARN, "nic_module_warning", f"{where}: transceiver {name} set{_set(link, name).rstrip()}"))
    for name, d in link.ddm.items():
        out = [v for v in d.values if (d.low is not None and v < d.low) or (d.high is not None and v > d.high)]
        if out:
            reasons.append(Reason(WARN, "nic_module_ddm", f"{where}: transceiver {name} {', '.join(f'{v:g}' for v in out)} "
                                  f"outside its range [{d.low:g}..{d.high:g}]"))
    if link.effective_ber is not None and link.effective_ber > EFFECTIVE_BER_MAX:
        reasons.append(Reason(FAIL, "nic_ber_high", f"{where}: effective physical BER {link.effective_ber:.0e} "
                              f"above {EFFECTIVE_BER_MAX:.0e} (errors FEC did not correct"
                              + (f", FEC {link.fec}" if link.fec else "") + ")"))
    if raw_ber_max is not None and link.raw_ber is not None and link.raw_ber > raw_ber_max:
        reasons.append(Reason(WARN, "nic_ber_high_raw", f"{where}: raw physical BER {link.raw_ber:.0e} above "
                              f"verify_nic_raw_ber_max {raw_ber_max:.0e}"))
    return reasons
