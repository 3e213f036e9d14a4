"""Verdict levels, their Nagios exit codes, and the fleet-median outlier rule.

Every report, check and monitor uses these four strings and these codes:
0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN (Nagios plugin convention, which NHC and
Slurm health checks follow).
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.levels import FAIL, OK, UNKNOWN, WARN  # every caller imports them from here

EXIT_CODES = {OK: 0, WARN: 1, FAIL: 2, UNKNOWN: 3}
# An unmeasurable node outranks a warning: its CCR is not known at all.
RANK = {OK: 0, WARN: 1, UNKNOWN: 2, FAIL: 3}


@dataclass(frozen=True)
class Reason:
    level: str
    code: str
    message: str
    # the part it is about, where the code's scope (model/reasons.py) is one
    # part: a GPU's index, a NIC's RDMA device (or netdev), a port's number
    gpu: int | None = None
    nic: str | None = None
    port: int | None = None
    # this reason's own action where it is not its code's: an XID's comes
    # from NVIDIA's catalogue row (model/xids.py), Xid 154's from its text
    action: str | None = None

    def to_dict(self) -> dict:
        out = {"level": self.level, "code": self.code, "message": self.message}
        out.update((k, v) for k, v in (("gpu", self.gpu), ("nic", self.nic), ("port", self.port),
                                       ("action", self.action)) if v is not None)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Reason:
        """A reason as :meth:`to_dict` wrote it (a node's JSON)."""
        action = data.get("action")
        if action is not None:  # the report writes every reason's action: keep it only where it is the reason's own
            from ccrhost.model.reasons import REGISTRY

            doc = REGISTRY.get(data["code"])
            action = None if doc is not None and doc.action == action else action
        return cls(data["level"], data["code"], data["message"], data.get("gpu"), data.get("nic"), data.get("port"),
                   action)


def worst(statuses) -> str:
    return max(statuses, key=RANK.__getitem__, default=OK)


def below_median(values: dict[str, float], tolerance: float, minimum: int = 3) -> dict[str, tuple[float, float]]:
    """Hosts whose value is more than ``tolerance`` (0.1 = 10%) below the
    fleet median: ``{host: (value, median)}``. Fewer than ``minimum`` hosts
    have no meaningful median, so nothing is flagged."""
    if len(values) < minimum:
        return {}
    import statistics  # here: every `ccrhost check` loads this module, few need a median

    median = statistics.median(values.values())
    if not median:
        return {}
    return {h: (v, median) for h, v in values.items() if v < (1 - tolerance) * median}
