"""An active check's stored result: what ran, what it decided, when, and for
how long that holds. Shared by every active check (NCCL all-reduce; DCGM
diag and nvbandwidth reuse it). Pure: the runner (``ccrhost.node.active``)
measures and stores; a prolog or ``ccrhost check`` reads the stored result
and its age, and never runs the slow test itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ccrhost.model.status import OK, UNKNOWN, WARN, Reason


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
        """A stored result; one that is not one (its reasons included) raises ``ValueError``."""
        problem = entry_problem(data)
        if problem:
            raise ValueError(f"not a stored active-check result: {problem}")
        return cls(**{k: tuple(data[k]) if k == "reasons" else data[k]
                      for k in cls.__dataclass_fields__ if k in data})


def entry_problem(data) -> str | None:
    """Why ``data`` is not a stored result (None: it is one). Standard
    library only: the remote store (node/active.py ``store_script``) runs
    this very function on the node to drop what it cannot keep."""
    levels = ("OK", "WARN", "FAIL", "UNKNOWN")
    if not isinstance(data, dict):
        return f"a {type(data).__name__}, not an object"
    for key, kinds in (("check", str), ("mode", str), ("status", str), ("message", str),
                       ("measured_at", (int, float)), ("valid_for", (int, float))):
        if not isinstance(data.get(key), kinds) or isinstance(data.get(key), bool):
            return f"{key} {data.get(key)!r}"
    if data["status"] not in levels:
        return f"status {data['status']!r}"
    for key, kinds in (("code", str), ("value", (int, float)), ("runs", int), ("tail", str), ("data", dict)):
        if data.get(key) is not None and not isinstance(data[key], kinds):
            return f"{key} {data[key]!r}"
    reasons = data.get("reasons", ())
    if not isinstance(reasons, (list, tuple)):
        return f"reasons {type(reasons).__name__}, not a list"
    for r in reasons:
        if not isinstance(r, dict) or r.get("level") not in levels or not isinstance(r.get("code"), str) \
                or not isinstance(r.get("message"), str) \
                or not all(r.get(k) is None or (isinstance(r[k], int) and not isinstance(r[k], bool))
                           for k in ("gpu", "port")) \
                or not all(r.get(k) is None or isinstance(r[k], str) for k in ("nic", "action")):
            return f"a malformed reason {str(r)[:80]!r}"
    return None


@dataclass
class ActiveReading:
    """One check's stored results on one node (its state file's, or a fleet
    run's just made), keyed CHECK/MODE, and when they were read."""
    read_at: float                                           # seconds since the epoch
    results: dict[str, dict] = field(default_factory=dict)  # "check/mode" -> ActiveResult.to_dict()
    error: str | None = None                                 # the state file could not be read
    required: bool = True    # False: the node's settings do not ask for this check (verify_dcgm off), yet
                             # what another path stored is judged; only a stale pass then says nothing


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
    for a state file that cannot (the check's "unreadable" code); a stored
    entry that is not a result is dropped with a WARN note (the next store
    drops it from the file too: never sticky). One way for every active check."""
    if reading.error:
        return [Reason(UNKNOWN, code, f"{what} results: {reading.error}")], []
    good, bad = results_of(reading)
    return [Reason(WARN, "active_result_dropped", f"{what} result {key}: {why}: dropped, not judged")
            for key, why in bad], good


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
