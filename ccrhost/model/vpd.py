"""A PCI function's Vital Product Data: the board's own part and serial
numbers (PCI spec, VPD; filled by :mod:`ccrhost.probes.vpd`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Vpd:
    product: str | None = None      # tag 0x82, the identifier string (lspci -vv "Product Name")
    read_only: dict[str, str] = field(default_factory=dict)  # tag 0x90 (VPD-R) keyword -> text: PN, EC, SN, V0...
    checksum_ok: bool | None = None  # VPD-R's RV byte makes every byte up to it sum to 0; None: no RV read

    @property
    def serial(self) -> str | None:
        """The board serial (``[SN] Serial number``), None where there is none."""
        return self.read_only.get("SN") or None
