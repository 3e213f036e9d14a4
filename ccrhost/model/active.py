"""An active check's stored result: what ran, what it decided, when, and for
how long that holds. Shared by every active check (NCCL all-reduce; DCGM
diag and nvbandwidth reuse it). Pure: the runner (``ccrhost.node.active``)
measures and stores; a prolog or ``ccrhost check`` reads the stored result
and its age, and never runs the slow test itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ccrhost.model.status import EXIT_CODES, OK, UNKNOWN, Reason


@dataclass(frozen=True)
class ActiveResult:
    check: str                  # "allreduce", "dcgm_diag", ...
    mode: str                   # the check's variant ("nvlink", "pair", "level 2", ...)
    status: str                 # OK, WARN, FAIL, UNKNOWN: the verdict function's, as it gave it
    code: str | None            # the reason code when not OK
    message: str
    measured_at: float          # seconds since the epoch, when the (last) run ended
    valid_for: float            # seconds the result holds; after that it is stale
    value: float | None = None  # the figure judged (busbw GB/s, ...)
    runs: int = 1               # launches made (retries included)
    tail: str = ""              # the output's last lines, for a person reading the state file
    reasons: tuple = ()         # every reason the run gave ({level, code, message}), where one is not enough
    data: dict | None = None    # the parsed reading, where the verdict is made when it is judged (NIC firmware)

    def age(self, now: float) -> float:
        return now - self.measured_at

    def stale(self, now: float) -> bool:
        # a clock that went backwards is not a fresh result either
        return not 0 <= self.age(now) <= self.valid_for

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ActiveResult:
        """A stored result; one that is not one raises ``ValueError``."""
        try:
            result = cls(**{k: tuple(data[k]) if k == "reasons" else data[k]
                            for k in cls.__dataclass_fields__ if k in data})
        except TypeError as exc:
            raise ValueError(f"not a stored active-check result: {exc}") from None
        if result.status not in EXIT_CODES or not isinstance(result.measured_at, (int, float)) \
                or not isinstance(result.valid_for, (int, float)):
            raise ValueError(f"not a stored active-check result: status {result.status!r}")
        return result


@dataclass
class ActiveReading:
    """One check's stored results on one node (its state file's, or a fleet
    run's just made), keyed CHECK/MODE, and when they were read."""
    read_at: float                                           # seconds since the epoch
    results: dict[str, dict] = field(default_factory=dict)  # "check/mode" -> ActiveResult.to_dict()
    error: str | None = None                                 # the state file could not be read


def results_of(reading: ActiveReading) -> tuple[list[tuple[str, ActiveResult]], list[tuple[str, str]]]:
    """The reading's results by key, in key order, and the keys whose stored
    result is not one (with why): each check turns those into its own
    "unreadable" reason."""
    good, bad = [], []
    for key, data in sorted(reading.results.items()):
        try:
            good.append((key, ActiveResult.from_dict(data)))
        except ValueError as exc:
            bad.append((key, str(exc)))
    return good, bad


def stale_message(what: str, result: ActiveResult, now: float, stored: str = "the stored result",
                  again: str = "run it again") -> str:
    """The message of a stored result past its validity (each check's ``..._stale`` code)."""
    return f"{what}: {stored} is {result.age(now):.0f} s old, valid for {result.valid_for:g} s: {again}"


def readable_results(reading: ActiveReading, code: str, what: str) -> tuple[list, list[tuple[str, ActiveResult]]]:
    """The reading's results that can be read, and an UNKNOWN ``code`` reason
    for a state file or each stored entry that cannot (the check's
    "unreadable" code): one way for every active check."""
    if reading.error:
        return [Reason(UNKNOWN, code, f"{what} results: {reading.error}")], []
    good, bad = results_of(reading)
    return [Reason(UNKNOWN, code, f"{what} result {key}: {why}") for key, why in bad], good


def fresh_reasons(result: ActiveResult, now: float, code: str, what: str) -> list:
    """A stored result's reasons while it holds; past its validity an UNKNOWN
    ``code`` (the check's "stale" code), never its old pass."""
    if result.stale(now):
        return [Reason(UNKNOWN, code, stale_message(what, result, now))]
    return stored_reasons(result)


def stored_reasons(result: ActiveResult) -> list:
    """A fresh stored result's reasons, as the verdict gave them when the
    result was made (never judged again): none for OK."""
    if result.status == OK:
        return []
    return [Reason.from_dict(r) for r in result.reasons or
            ({"level": result.status, "code": result.code, "message": result.message},)]
