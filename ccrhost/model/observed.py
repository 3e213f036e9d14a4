"""One platform-file key as a node reads it (model/contract.py captures and
diffs these; model/contract_settings.py reads the settings section's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Observed:
    """One key as a node reads it: each part's value (a GPU, a NIC port;
    "" for a node-wide key), where it was read, and why it could not be."""
    source: str
    parts: dict[str, object] = field(default_factory=dict)
    error: str | None = None
    # A key judged otherwise than by equality (a minimum, a subset, a tolerance): (the expected value,
    # the platform's whole section) -> what the node read that differs, or None where it matches.
    compare: Callable[[object, dict], object] | None = field(default=None, compare=False)

    def value(self):
        """The captured value: the one every part reads, else the most common (the file says which differ)."""
        if not self.parts:
            return None
        values = list(self.parts.values())
        return max(values, key=lambda v: sum(hashable(v) == hashable(w) for w in values))


def hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, hashable(x)) for k, x in v.items()))
    return tuple(hashable(x) for x in v) if isinstance(v, list) else v
