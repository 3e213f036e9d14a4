"""Inventory data the deploys read: the keys, their defaults, and validation.

Every host's data is validated before any host is touched. A key that
starts with one of ccrhost's prefixes but is not known (``roce_dcsp``) is an
error, not silently ignored: a typo would otherwise leave the default in
force on a whole cluster.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

# Keys with these prefixes belong to ccrhost; anything else in host data
# (ssh_*, the site's own keys) is left alone.
OWNED_PREFIXES = ("ccrhost_", "rdma_", "roce_", "qos_", "pfc_", "ecn_", "dcqcn_", "nccl_", "verify_", "ccr_", "gpu_")

ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]

DEFAULT_MODULES = ("ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm")


class HostSettings(BaseModel):
    """The validated settings for one host. Field docs are the README's key table."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    rdma_modules: tuple[ModuleName, ...] = Field(
        DEFAULT_MODULES, description="Kernel modules to load now and at every boot."
    )
    rdma_require_devices: bool = Field(
        True, description="Fail the host when it has no RDMA device at all."
    )
    roce_version: Literal[1, 2] = Field(2, description="rdma_cm default RoCE mode (2 = `RoCE v2`).")
    roce_dscp: int = Field(26, ge=0, le=63, description="DSCP of RoCE traffic.")
    roce_ecn_bits: int = Field(
        2, ge=0, le=3, description="ECN bits of the ToS byte (2 = ECT(0), so DSCP 26 gives ToS 106)."
    )
    roce_force_traffic_class: bool = Field(
        False,
        description="Also write the OFED-only tc/<port>/traffic_class. It overrides the "
        "traffic class of every application on the port, hence opt-in.",
    )

    @property
    def roce_tos(self) -> int:
        """The ToS byte: DSCP in the upper six bits, ECN in the lower two."""
        return self.roce_dscp << 2 | self.roce_ecn_bits

    @property
    def roce_mode(self) -> str:
        return "RoCE v2" if self.roce_version == 2 else "IB/RoCE v1"


@dataclass(frozen=True)
class DataError:
    where: str  # host name (or "inventory")
    key: str
    value: Any
    allowed: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key} = {self.value!r}: {self.allowed}"


class InventoryDataError(Exception):
    def __init__(self, errors: list[DataError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _bounds(key: str) -> str | None:
    field = HostSettings.model_fields.get(key)
    lo = hi = None
    for item in getattr(field, "metadata", []):
        lo = getattr(item, "ge", lo)
        hi = getattr(item, "le", hi)
    if lo is not None and hi is not None:
        return f"allowed: integers {lo} to {hi}"
    return None


def _describe(key: str, error: dict) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return _bounds(key) or error["msg"]
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    return error["msg"]


def owned_keys(data: dict) -> dict:
    return {k: v for k, v in data.items() if k.startswith(OWNED_PREFIXES)}


def validate_host(name: str, data: dict) -> HostSettings:
    """Validate one host's data; raise InventoryDataError with every problem."""
    mine = owned_keys(data)
    known = set(HostSettings.model_fields)
    errors = []
    for key in sorted(set(mine) - known):
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key"
        errors.append(DataError(name, key, mine.pop(key), hint))
    # YAML/py data gives lists; the model stores tuples.
    if isinstance(mine.get("rdma_modules"), list):
        mine["rdma_modules"] = tuple(mine["rdma_modules"])
    try:
        settings = HostSettings(**mine)
    except ValidationError as exc:
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            value = mine.get(key)
            if len(err["loc"]) > 1:
                key = f"{key}[{err['loc'][1]}]"
                value = err.get("input")
            errors.append(DataError(name, key, value, _describe(str(err['loc'][0]), err)))
        settings = None
    if errors:
        raise InventoryDataError(errors)
    return settings


def validate_all(hosts: dict[str, dict]) -> dict[str, HostSettings]:
    """Validate every host; report all problems of all hosts at once."""
    if not hosts:
        raise InventoryDataError([DataError("inventory", "hosts", [], "at least one host is required")])
    settings, errors = {}, []
    for name, data in hosts.items():
        try:
            settings[name] = validate_host(name, data)
        except InventoryDataError as exc:
            errors.extend(exc.errors)
    if errors:
        raise InventoryDataError(errors)
    return settings
