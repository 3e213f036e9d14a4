"""Kernel modules present on a node: loaded ones (``/sys/module``) and
built-ins (``modules.builtin``)."""

from __future__ import annotations

from ccrhost.probes.sections import by_tag

COMMAND = (
    "echo @@loaded; ls -1 /sys/module 2>/dev/null; "
    'echo @@builtin; cat "/lib/modules/$(uname -r)/modules.builtin" 2>/dev/null; true'
)


def module_name(entry: str) -> str:
    """``kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko`` -> ``mlx5_ib``.

    The kernel treats ``-`` and ``_`` in module names as the same character
    and shows ``_`` under /sys/module.
    """
    base = entry.strip().rsplit("/", 1)[-1]
    for suffix in (".ko.zst", ".ko.xz", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


def parse_modules(lines: list[str]) -> dict[str, list[str]]:
    """``{"loaded": [...], "builtin": [...]}``, names as /sys/module shows them."""
    sections = by_tag(lines)
    return {key: sorted({module_name(x) for x in sections.get(key, []) if x.strip()})
            for key in ("loaded", "builtin")}
