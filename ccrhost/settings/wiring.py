"""The fabric plan: which leaf each compute NIC's rail must reach, the
site's P_Key and the RoCE v2 GID index (model/wiring.py; docs/wiring.md),
and when the fleet calls a leaf suspect (fleet/wiring.py)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

# fnmatch's own characters and what switch names hold (no shell or YAML trouble)
LeafPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:;/@*?\[\]! -]{1,128}$")]
Guid = Annotated[str, StringConstraints(pattern=r"^0x[0-9A-Fa-f]{1,16}$|^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$")]


class Rail(BaseModel):
    """One rail of ``wiring_rails``: the leaf its NIC must reach."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    leaf: LeafPattern | None = Field(
        None, description="The leaf's name as the switch announces it (LLDP SysName, InfiniBand node "
        "description), an fnmatch pattern: `leaf-r1-*`.")
    leaf_guids: tuple[Guid, ...] = Field(
        (), description="Or the leaf's node GUIDs (InfiniBand, `0xe41d2d03004bef70`) or LLDP chassis MACs.")
    ports: str | None = Field(
        None, pattern=r"^[0-9]{1,3}(-[0-9]{1,3})?$", description="The leaf ports the NIC may use, `N` or `N-M`: "
        "the InfiniBand switch port number, or the number that ends an LLDP port name (`swp12`: 12).")

    @model_validator(mode="after")
    def _one_leaf(self):
        if (self.leaf is None) == (not self.leaf_guids):
            raise ValueError("give leaf (a name pattern) or leaf_guids (a list of GUIDs), one of them")
        if self.ports is not None:
            lo, _, hi = self.ports.partition("-")
            if hi and int(hi) < int(lo):
                raise ValueError(f"ports {self.ports!r}: the range's end is below its start")
        return self

    def port_range(self) -> tuple[int, int] | None:
        if self.ports is None:
            return None
        lo, _, hi = self.ports.partition("-")
        return int(lo), int(hi or lo)


_ALLOWED = {
    "leaf": "allowed: an fnmatch pattern of letters, digits and _.:;/@*?[]!- and space, 1 to 128 characters",
    "leaf_guids": "allowed: a list of GUIDs (0x and 1 to 16 hex digits) or chassis MACs (aa:bb:cc:dd:ee:ff)",
    "ports": "allowed: a port number N or a range N-M (up to three digits each)",
}


class WiringSettings(BaseModel, defer_build=True):
    # The fabric's wiring (model/wiring.py, fleet/wiring.py; docs/wiring.md)
    wiring_enable: bool = Field(
        False, description="Judge the fabric's wiring: each compute NIC's first-hop leaf (LLDP on RoCE, the "
        "subnet management query on InfiniBand) against `wiring_rails`, two rails on one leaf, the P_Key and "
        "the RoCE v2 GID index. Off until a site declares its plan.",
    )
    wiring_rails: tuple[Rail, ...] = Field(
        (), description="The fabric plan, one entry per rail: rail N is the Nth compute NIC port in device-name "
        "order, then port (mlx5_2 before mlx5_10; EFA and rdma_exclude_devices left out). Each entry names `leaf` (an "
        "fnmatch pattern) or `leaf_guids`, and optionally `ports` (`1-32`). A NIC beyond the list is judged "
        "only for a shared leaf.",
    )
    wiring_distinct_leaves: bool = Field(
        True, description="Two compute NICs of a node on one leaf FAIL (wiring_shared_leaf) unless their rails' "
        "plan entries are the same: a rail-optimised fabric puts each rail on a leaf of its own.",
    )
    wiring_pkey: str | None = Field(
        None, pattern=r"^0x[0-9A-Fa-f]{4}$", description="The site's partition key every InfiniBand compute port "
        "must carry (`0x8001`); with the top bit (0x8000) set, as a full member. Null: not judged.",
    )
    wiring_gid_index: int | None = Field(
        None, ge=0, le=255, description="The GID index NCCL and the site use (NCCL_IB_GID_INDEX): a RoCE port "
        "whose entry there is not a RoCE v2 GID FAILs (wiring_gid_missing). Null: not judged.",
    )
    wiring_valid_for: float = Field(
        86400, ge=60, le=30 * 86400, description="Seconds a stored wiring reading holds; older, the check says "
        "UNKNOWN (wiring_stale) until it is read again.",
    )
    wiring_leaf_suspect_fraction: float = Field(
        0.5, ge=0.01, le=1, description="The fleet calls a leaf suspect when at least this share of the nodes "
        "cabled to it fail one fabric code within `wiring_leaf_suspect_window_hours`.",
    )
    wiring_leaf_suspect_min_nodes: int = Field(
        2, ge=1, le=10000, description="The fewest failing nodes that make a leaf suspect, whatever their share (one node failing is "
        "that node's own fault).",
    )
    wiring_leaf_suspect_window_hours: float = Field(
        1, gt=0, le=720, description="Hours within which the failures of one fabric code count together for a suspect leaf.",
    )
    wiring_spines: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")],
                        list[LeafPattern]] = Field(
        {}, description="The spines above the leaves, for the topology.conf the fleet view writes: spine name -> "
        "fnmatch patterns of its leaves (`{spine-1: [\"leaf-r*-a\"]}`). A node's readings show its leaves, never "
        "the spines; without this every leaf goes under one root switch.",
    )

    @field_validator("wiring_rails", mode="before")
    @classmethod
    def _rails(cls, value):
        """Each rail checked here, so an error names the rail, its key, the value and what is allowed."""
        shape = "a list of rails, each {leaf: PATTERN} or {leaf_guids: [GUID, ...]}, with optional ports: N-M"
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"allowed: {shape}")
        rails = []
        for i, entry in enumerate(value):
            if isinstance(entry, Rail):
                rails.append(entry)
                continue
            if not isinstance(entry, dict):
                raise ValueError(f"rail {i} is {entry!r}; allowed: {shape}")
            unknown = sorted(set(entry) - set(Rail.model_fields))
            if unknown:
                raise ValueError(f"rail {i}: unknown key {unknown[0]!r}; allowed: {', '.join(Rail.model_fields)}")
            data = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
            try:
                rails.append(Rail(**data))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(x) for x in err["loc"] if not isinstance(x, int))
                allowed = _ALLOWED.get(where, err["msg"].removeprefix("Value error, "))
                shown = f" = {err['input']!r}" if where else ""
                raise ValueError(f"rail {i}{' ' + where if where else ''}{shown}: {allowed}") from None
        return tuple(rails)

    @field_validator("wiring_pkey")
    @classmethod
    def _pkey_not_empty(cls, value):
        if value is not None and int(value, 16) & 0x7FFF == 0:
            raise ValueError(f"{value} is no partition key: its low 15 bits are 0 (allowed: 0x0001 to 0x7fff, "
                             "with 0x8000 added for full membership)")
        return value

    @property
    def wiring_state(self) -> str | None:
        """The state file the wiring reading is stored in (the active checks' one); None when off."""
        return self.verify_allreduce_state if self.wiring_enable else None

    def wiring_policy(self):
        from ccrhost.model.wiring import RailPlan, WiringPolicy

        rails = tuple(RailPlan(r.leaf, tuple(_guid(g) for g in r.leaf_guids), r.port_range())
                      for r in self.wiring_rails)
        return WiringPolicy(self.wiring_enable, rails, self.wiring_distinct_leaves,
                            None if self.wiring_pkey is None else int(self.wiring_pkey, 16), self.wiring_gid_index)


def _guid(text: str) -> str:
    """As the probe writes them: ``0x`` and 16 lower-case digits; a MAC lower case."""
    t = text.lower()
    return "0x" + t[2:].rjust(16, "0") if re.fullmatch(r"0x[0-9a-f]+", t) else t
