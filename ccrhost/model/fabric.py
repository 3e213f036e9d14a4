"""Whether the lossless fabric stays lossless on this node. Pure.

Readings come from :mod:`ccrhost.probes.fabric`; rates are changes since
the node's own last stored reading (:func:`window_from_state`), so nothing
sleeps to measure them. Counter names, units and which are errors: the
kernel's mlx5 ethtool counter documentation
(Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst)
and the RDMA ``hw_counters``; thresholds: reference gpu-fabric-health.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ccrhost.model import datapath as dp
from ccrhost.model.datapath import LinkWindow
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason

# --- what is read --------------------------------------------------------------

# ethtool -S names kept from a compute netdev (counters.rst, "Physical Port
# Counters" and "Priority Port Counters"); the driver lists the per-priority
# pause counters only for priorities with PFC enabled.
PRIO_PAUSE = re.compile(r"^(rx|tx)_prio([0-7])_pause(_duration|_transition)?$")
NETDEV_COUNTERS = ("tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_discards_phy",
                   "rx_crc_errors_phy", "rx_symbol_err_phy", "rx_out_of_buffer")
# RDMA transport errors, /sys/class/infiniband/<dev>/ports/<n>/hw_counters/<name>
TRANSPORT_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err",
                      "implied_nak_seq_err")


def kept(name: str) -> bool:
    """Whether an ``ethtool -S`` counter is one this module judges."""
    return name in NETDEV_COUNTERS or PRIO_PAUSE.match(name) is not None


@dataclass
class PauseSetting:
    """``ethtool -a <dev>``: global 802.3x pause (ethtool's netlink/pause.c
    prints "Autonegotiate:", "RX:", "TX:" with on/off)."""
    autoneg: bool | None = None
    rx: bool | None = None
    tx: bool | None = None

    @property
    def on(self) -> bool:
        return bool(self.rx or self.tx)


@dataclass
class FabricReading:
    """One node's lossless-fabric reading (the fabric probe's output)."""
    netdevs: dict[str, str] = field(default_factory=dict)       # compute netdev -> its RDMA device (device/net/*)
    pause: dict[str, PauseSetting] = field(default_factory=dict)  # netdev -> ethtool -a; absent: driver lacks it
    # the window: {"mlx5_0/1": {counter: value}} for RDMA ports (counters/, hw_counters/),
    # {"ens1f0np0": {counter: value}} for netdevs (ethtool -S), since the stored reading
    window: LinkWindow | None = None
    unreadable: dict[str, str] = field(default_factory=dict)  # what -> the text seen that could not be read
    error: str | None = None  # the whole probe could not be read: "cannot read <what>: <why>"


# --- the window, from the node's last stored reading ----------------------------

# What a stored reading may hold (anything else is corrupt: discarded, and
# the reading now replaces it): hardware counters are at most 64 bits; a
# time is epoch seconds before the year 5000; a boot id is a UUID. Counters
# are 64-bit, the GPU state keeps sums of a few dozen of them: 2**70.
COUNTER_MAX = 1 << 70
TIME_MAX = 1e11
_BOOT_ID_MAX = 64
DISCARDED = "the stored reading was corrupt or out of range"


def _number_in(value, hi) -> bool:
    # compared before any float(): float(10**400) raises
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= hi and (
        isinstance(value, int) or math.isfinite(value))


def stored_problem(previous) -> str | None:
    """Why a stored reading (as :func:`window_from_state` takes it) is no
    reading at all, or None. Short: it goes into a note."""
    if not isinstance(previous, dict):
        return f"a {type(previous).__name__}, not a mapping"
    boot = previous.get("boot_id")
    if boot is not None and not (isinstance(boot, str) and len(boot) <= _BOOT_ID_MAX):
        return "its boot_id is not a boot id"
    if not _number_in(previous.get("time"), TIME_MAX):
        return "its time is not a time"
    counters = previous.get("counters")
    if not isinstance(counters, dict):
        return "it has no counters"
    for key, values in counters.items():
        if not isinstance(key, str) or not isinstance(values, dict):
            return "its counters are not per device"
        for name, value in values.items():
            if not isinstance(name, str) or not (isinstance(value, int) and _number_in(value, COUNTER_MAX)):
                return f"counter {str(name)[:40]!r} of {key[:40]!r} is not a count"
    return None


def window_from_state(previous: dict | None, counters: dict, boot: str | None, now: float,
                      max_age: float | None = None, uptime: float | None = None) -> LinkWindow:
    """The window since the node's last stored reading. ``previous``: that
    reading as ``{"boot_id", "time", "counters": {key: {name: int}}}`` (None:
    none kept); ``counters``: the reading now, same shape. Counters start at
    zero with every boot and driver load, so a reading from another boot is
    no baseline; one older than ``max_age`` seconds (0: rates are not judged)
    would average a burst away, so it is none either.

    Without a baseline the counters are totals since they started, so with
    ``uptime`` (/proc/uptime, seconds since boot) the window is the time
    since boot: never shorter than the counters' life (a driver loaded since
    boot started them later), so a rate over it never overstates. Only
    without ``uptime`` do rates start from now."""
    none = "no earlier reading of the counters: rates are judged from the next reading on"
    why = None
    if max_age == 0:
        return LinkWindow({}, counters, None, "verify_window_max_age is 0: rates are never judged")
    problem = stored_problem(previous) if previous is not None else None
    if previous is None:
        why = none
    elif problem:
        why = (f"{DISCARDED} ({problem}): discarded and replaced by this reading; rates are judged from the "
               "next reading on")
    elif previous.get("boot_id") != boot:
        why = "first reading since boot: rates are judged from the next reading on"
    else:
        then = previous.get("time")
        seconds = now - then if isinstance(then, (int, float)) and not isinstance(then, bool) else None
        if seconds is None or seconds < 0 or not math.isfinite(seconds):
            why = f"the stored reading's time {then!r} is not before now: rates are judged from the next reading on"
        elif max_age is not None and seconds > max_age:
            why = (f"the stored reading is {seconds:.0f} s old, over the {max_age:g} s limit "
                   "(verify_window_max_age): rates start from now")
    if why is None:
        before = {key: dict(values) for key, values in previous["counters"].items()}
        return LinkWindow(before, counters, round(seconds, 1))
    if uptime is not None and math.isfinite(uptime) and uptime > 0:
        window = since_boot(counters, uptime)
        if problem:
            window.note = f"{DISCARDED} ({problem}): discarded and replaced by this reading; {SINCE_BOOT}"
        return window
    return LinkWindow({}, counters, None, why)


SINCE_BOOT = "rates are judged since boot"


def since_boot(counters: dict, uptime: float) -> LinkWindow:
    """The window from boot to now: every counter started at zero."""
    zero = {key: dict.fromkeys(values, 0) for key, values in counters.items()}
    return LinkWindow(zero, counters, round(uptime, 1), since_boot=True)


# --- judging --------------------------------------------------------------------

# NVSentinel's NIC health monitor: any rise of rnr_nak_retry_err is fatal,
# symbol errors above 120 an hour are fatal; every other error counter
# counters.rst lists as an Error WARNs on any rise.
DEFAULT_WARN_PER_HOUR = {name: 0.0 for name in (*TRANSPORT_COUNTERS, "rx_discards_phy", "rx_crc_errors_phy",
                                                  "rx_symbol_err_phy", "rx_out_of_buffer",
                                                  "tx_pause_storm_warning_events")}
DEFAULT_FAIL_PER_HOUR = {"rnr_nak_retry_err": 0.0, "rx_symbol_err_phy": 120.0, "rx_crc_errors_phy": 120.0,
                         "tx_pause_storm_error_events": 0.0}
@dataclass(frozen=True)
class FabricPolicy:
    """Thresholds; defaults and their sources in ``ccrhost.settings``."""
    pause_share: float = 0.1                   # verify_pause_share_max
    pfc: bool = False                           # PFC is configured on the compute netdevs (qos_pfc)
    # counter -> WARN / FAIL above this rise per hour (verify_fabric_warn_per_hour / _fail_per_hour)
    warn_per_hour: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WARN_PER_HOUR))
    fail_per_hour: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FAIL_PER_HOUR))
    window_s: float = 3600                     # verify_window_max_age: the window a link threshold counts within
    flap_lookback_s: float = 86400             # verify_link_flap_lookback_hours (Azure's link-flap check: 24 h)
    flap_max: int = 4                          # verify_link_flap_max (Azure fails a device at 5 in 24 h)


@dataclass
class LinkDown:
    """One ``Link down`` line of the kernel log (mlx5e's netdev_info in
    en_main.c mlx5e_update_carrier: ``mlx5_core 0000:01:00.0 enp1s0f0np0:
    Link down``), read with the XIDs (probes/gpu_health.py, one read)."""
    netdev: str              # the netdev the line names
    pci: str                 # its PCI function, as logged
    age_s: float | None      # seconds before the reading (None: the line had no time)


# counter -> its group, which names its reason codes (check_fabric)
RATE_GROUPS = {
    **{name: "transport" for name in TRANSPORT_COUNTERS},
    "rx_discards_phy": "drops", "rx_out_of_buffer": "drops",
    "rx_crc_errors_phy": "phy", "rx_symbol_err_phy": "phy",
    "tx_pause_storm_warning_events": "storm", "tx_pause_storm_error_events": "storm",
}
RATE_COUNTERS = tuple(RATE_GROUPS)


def rise(before: int | None, after: int | None) -> int | None:
    """A counter's rise; one that went down was cleared (a driver reload):
    what it shows now is the rise."""
    if before is None or after is None:
        return None
    return after - before if after >= before else after


def pause_shares(window: LinkWindow) -> dict[tuple[str, str, int], float]:
    """``{(netdev, "rx"|"tx", priority): share of the window paused}`` from
    the ``..._prioN_pause_duration`` counters (microseconds, counters.rst)."""
    out = {}
    if not window.seconds:
        return out
    for key in sorted(set(window.before) & set(window.after), key=natural_key):
        for name, after in window.after[key].items():
            m = PRIO_PAUSE.match(name)
            if not m or m.group(3) != "_duration":
                continue
            delta = rise(window.before[key].get(name), after)
            if delta is not None:
                out[(key, m.group(1), int(m.group(2)))] = delta / 1e6 / window.seconds
    return out


def check_fabric(reading: FabricReading | None, policy: FabricPolicy = FabricPolicy(),
                 link: dp.LinkThresholds = dp.LinkThresholds(),
                 link_downs: list[LinkDown] | None = None) -> list[Reason]:
    """Global pause beside PFC, the compute netdevs' ``Link down`` lines in
    the kernel log (``link_downs``), then over the window: the RDMA ports'
    error counters (``link``: as before, link_downed rising FAILS), pause
    storms, pause share, drops, physical and transport errors by rate."""
    if reading is None:
        return []
    if reading.error:
        return [Reason(UNKNOWN, "fabric_unreadable", reading.error)]
    reasons = [Reason(UNKNOWN, "fabric_unreadable", f"cannot read {what}: {text}")
               for what, text in sorted(reading.unreadable.items())]
    if policy.pfc:
        on = [dev for dev, p in sorted(reading.pause.items(), key=lambda kv: natural_key(kv[0])) if p.on]
        for dev in on:
            p = reading.pause[dev]
            reasons.append(Reason(FAIL, "global_pause_on",
                                  f"global pause on beside PFC on {dev} (ethtool -a: RX {'on' if p.rx else 'off'}, "
                                  f"TX {'on' if p.tx else 'off'}): 802.3x pause stops every priority", nic=dev))
    reasons += logged_flaps(reading, link_downs or [], policy)
    w = reading.window
    if w is not None and w.warning:
        reasons.append(Reason(WARN, "link_state_unwritable", w.warning))
    if w is None or not w.seconds:
        return reasons
    reasons += dp.check_link_health(w.before, w.after, link, w.seconds, policy.window_s if w.since_boot else None)
    since = " since boot" if w.since_boot else ""
    for (dev, way, prio), share in pause_shares(w).items():
        if share > policy.pause_share:
            if way == "tx":
                reasons.append(Reason(FAIL, "pfc_pause_share",
                                      f"{dev} sent PFC pause on priority {prio} {share:.0%} of the last "
                                      f"{w.seconds:g} s{since} (limit {policy.pause_share:.0%}): it stalls the fabric", nic=dev))
            else:
                reasons.append(Reason(WARN, "pfc_paused",
                                      f"{dev} was paused on priority {prio} {share:.0%} of the last "
                                      f"{w.seconds:g} s{since} (limit {policy.pause_share:.0%}): the fabric is "
                                      "congested", nic=dev))
    for key in sorted(set(w.before) & set(w.after), key=natural_key):
        for name in RATE_COUNTERS:
            judged = _rated(w, key, name, policy)
            if judged is None:
                continue
            fail, text = judged
            group = RATE_GROUPS[name]
            nic = key.split("/")[0]  # a port's counters are its NIC's trouble (the codes' scope)
            if group == "transport":
                reasons.append(Reason(FAIL, "rdma_transport_failing", text, nic=nic) if fail
                               else Reason(WARN, "rdma_transport_errors", text, nic=nic))
            elif group == "drops":
                reasons.append(Reason(FAIL, "netdev_rx_drops_high", text, nic=nic) if fail
                               else Reason(WARN, "netdev_rx_drops", text, nic=nic))
            elif group == "phy":
                reasons.append(Reason(FAIL, "netdev_phy_errors_high", text, nic=nic) if fail
                               else Reason(WARN, "netdev_phy_errors", text, nic=nic))
            else:
                reasons.append(Reason(FAIL, "pause_storm", text, nic=nic) if fail
                               else Reason(WARN, "pause_storm_warning", text, nic=nic))
    return reasons


def _rated(w: LinkWindow, key: str, name: str, policy: FabricPolicy) -> tuple[bool, str] | None:
    """One counter's rise over the window against its per-hour limits:
    (whether it FAILS, the message), None when within them."""
    delta = rise(w.before[key].get(name), w.after[key].get(name))
    if not delta or not w.seconds:
        return None
    per_hour = delta / (w.seconds / 3600)
    where = f"port {key}" if "/" in key else key
    fail, warn = policy.fail_per_hour.get(name), policy.warn_per_hour.get(name)
    since = " since boot" if w.since_boot else ""
    text = f"{where} {name} rose by {delta} in {w.seconds:g} s{since} ({per_hour:.3g}/h"
    if fail is not None and per_hour > fail:
        return True, f"{text}, above {fail:g}/h)"
    if warn is not None and per_hour > warn:
        return False, f"{text}, above {warn:g}/h)"
    return None


def logged_flaps(reading: FabricReading, downs: list[LinkDown], policy: FabricPolicy) -> list[Reason]:
    """FAIL a compute netdev whose link went down more than ``flap_max``
    times within the lookback (Azure's check counts the same lines per
    device over 24 h): the evidence a first reading has, since boot."""
    count: dict[str, int] = {}
    for d in downs:
        if d.netdev in reading.netdevs and (d.age_s is None or d.age_s <= policy.flap_lookback_s):
            count[d.netdev] = count.get(d.netdev, 0) + 1
    return [Reason(FAIL, "link_flap", f"{netdev} ({reading.netdevs[netdev]}) logged 'Link down' {n} times in the "
                                      f"last {policy.flap_lookback_s / 3600:g} h (kernel log; limit "
                                      f"{policy.flap_max}): the link is flapping")
            for netdev, n in sorted(count.items(), key=lambda kv: natural_key(kv[0])) if n > policy.flap_max]
