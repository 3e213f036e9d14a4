"""Records as plain values: what :func:`dataclasses.asdict` returns,
faster.

asdict deep-copies every leaf and looks each class's fields up again for
every record; the readings hold only str, int, float, bool and None
leaves, and a fleet report turns thousands of them per host into JSON.
"""

from __future__ import annotations

import copy
import dataclasses

_LEAVES = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}


def plain(value):
    """``value`` with every dataclass record a dict, as ``asdict`` gives it
    (tuples stay tuples, lists lists, dict keys converted too)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    names = _FIELDS.get(kind)
    if names is None and dataclasses.is_dataclass(kind):
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    if names is not None:
        return {name: plain(getattr(value, name)) for name in names}
    if kind is list:
        return [plain(v) for v in value]
    if kind is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if kind is tuple:
        return tuple(plain(v) for v in value)
    return copy.deepcopy(value)  # anything else, as asdict does it (namedtuples, subclasses)
