"""A node's history of failures: a node that keeps failing is replaced, not
repaired again (NVSentinel: three events in an hour escalate; Meta's lemon
nodes; NHC's -p keeps a node offline for good).

The node keeps a bounded list of failure episodes in its state directory
(``verify_history``, read and written by ``ccrhost check``). An episode opens
with a FAIL verdict after a check that did not fail, so a failure seen by
every health-check run while the node stays drained counts once, and a fault
that comes back after each repair counts each time. A reboot closes the open
episode: a fault still there after the boot (the repair a reboot is) is a
return, so a node that fails after every reboot reaches ``replace``. Pure: the check reads
the file, :func:`check_history` judges, :func:`record` gives the next file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, Reason


@dataclass
class Episode:
    time: float                                        # when the failing check ran (epoch seconds)
    codes: list[str]                                   # its FAIL reason codes
    action: str                                        # its action (model/actions.py)
    gpus: list[str] = field(default_factory=list)      # serials of the GPUs its reasons name (nvidia-smi -q "Serial Number")
    nics: list[str] = field(default_factory=list)      # serials of the NICs its FAIL reasons name (PCI VPD "[SN]")


@dataclass
class History:
    episodes: list[Episode] = field(default_factory=list)  # oldest first, at most verify_history_entries
    failing: bool = False       # the last check failed: its episode is still open
    now: float = 0.0            # when this check reads it
    error: str | None = None    # why the stored history could not be read (then it starts afresh)
    boot: str | None = None     # the boot (boot_id) of the last check that kept it; None: not known


@dataclass(frozen=True)
class HistoryPolicy:
    replace_after: int = 3            # verify_replace_failures: episodes in the window that mean "replace" (0: never)
    window_s: float = 7 * 86400       # verify_replace_window_hours, in seconds
    entries: int = 50                 # verify_history_entries: the bound on the stored list


def from_dict(data: dict) -> History:
    """The history :func:`record` gave, as the check stored it (JSON); a
    document that is not one raises ``ValueError``."""
    if not isinstance(data, dict) or not isinstance(data.get("episodes"), list):
        raise ValueError("no episodes list")

    def texts(value, what):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{what} is not a list of strings")
        return list(value)

    episodes = []
    for e in data["episodes"]:
        if not isinstance(e.get("time"), (int, float)) or not isinstance(e.get("action"), str):
            raise ValueError(f"episode {e!r} has no time or action")
        episodes.append(Episode(float(e["time"]), texts(e.get("codes"), "codes"), e["action"],
                                texts(e.get("gpus", []), "gpus"), texts(e.get("nics", []), "nics")))
    boot = data.get("boot")
    return History(episodes, bool(data.get("failing")), boot=boot if isinstance(boot, str) else None)


def after_boot(history: History, boot: str | None) -> History:
    """``history`` as a check in boot ``boot`` reads it: an episode left open
    by another boot is closed (the reboot was a repair; a fault still there
    returned). A history that names no boot (an older ccrhost's) stays as it
    is: its episode may be this boot's."""
    if history.failing and boot is not None and history.boot is not None and history.boot != boot:
        history.failing = False
    history.boot = boot
    return history


def opened_now(history: History | None) -> bool:
    """Whether the check that kept ``history`` opened its newest episode
    (a failure started, or returned after a reboot)."""
    return (history is not None and history.failing and bool(history.episodes)
            and history.episodes[-1].time == history.now)


def serials(reasons: list[Reason], gpu_serials: dict[int, str]) -> list[str]:
    """The serials of the GPUs ``reasons`` name, in order, once each."""
    out: list[str] = []
    for r in reasons:
        serial = gpu_serials.get(r.gpu) if r.gpu is not None else None
        if serial and serial not in out:
            out.append(serial)
    return out


def failing_nics(reasons: list[Reason]) -> list[str]:
    """The NICs (RDMA device or netdev) the FAIL reasons name, in order, once each."""
    return list(dict.fromkeys(r.nic for r in reasons if r.level == FAIL and r.nic is not None))


def check_history(history: History, status: str, reasons: list[Reason], gpu_serials: dict[int, str],
                  policy: HistoryPolicy) -> list[Reason]:
    """``node_repeat_failures`` when this FAIL verdict (``status`` and
    ``reasons`` without it) makes ``replace_after`` episodes within the
    window, naming the GPU serials the episodes had in common or, if none,
    all of them."""
    if status != FAIL or not policy.replace_after:
        return []
    recent = [e for e in history.episodes if history.now - e.time <= policy.window_s]
    if not history.failing:  # this check opens a new episode
        recent.append(Episode(history.now, [], "", serials(reasons, gpu_serials)))
    if len(recent) < policy.replace_after:
        return []
    common = [s for s in recent[-1].gpus if all(s in e.gpus for e in recent)]
    named = common or sorted({s for e in recent for s in e.gpus})
    which = (f"; GPU serial{'s' if len(named) > 1 else ''} {', '.join(named)}"
             + (" each time" if common else "")) if named else ""
    hours = policy.window_s / 3600
    return [Reason(FAIL, "node_repeat_failures",
                   f"failed {len(recent)} times within {hours:g} h (verify_replace_failures "
                   f"{policy.replace_after}){which}: replace, do not repair again")]


def record(history: History, status: str, reasons: list[Reason], action: str, gpu_serials: dict[int, str],
           policy: HistoryPolicy, nic_serials: dict[str, str] | None = None) -> History:
    """The history after a check with ``status``: a new episode when a
    failure starts, bounded to the newest ``policy.entries``.
    ``nic_serials``: NIC -> board serial, for the NICs that could be read."""
    episodes = list(history.episodes)
    if status == FAIL and not history.failing:
        nics = [nic_serials[n] for n in failing_nics(reasons) if (nic_serials or {}).get(n)]
        episodes.append(Episode(history.now, sorted({r.code for r in reasons if r.level == FAIL}), action,
                                serials(reasons, gpu_serials), list(dict.fromkeys(nics))))
    return History(episodes[-policy.entries:] if policy.entries else [], status == FAIL, history.now,
                   boot=history.boot)


def lemons(histories: dict[str, History]) -> dict[str, set[str]]:
    """GPU serial -> the nodes whose histories show it failing, for each
    serial that failed on more than one node (a board moved and failed
    again: the lemon)."""
    seen: dict[str, set[str]] = {}
    for node, history in histories.items():
        for episode in history.episodes:
            for serial in episode.gpus:
                seen.setdefault(serial, set()).add(node)
    return {s: nodes for s, nodes in seen.items() if len(nodes) > 1}
