"""Kernel modules present on a node: loaded ones (``/sys/module``) and
built-ins (``modules.builtin``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.probes.sections import by_tag

COMMAND = (
    # the release once, with a builtin where /proc has it
    "{ read -r K < /proc/sys/kernel/osrelease; } 2>/dev/null || K=$(uname -r); "
    "echo @@loaded; ls -1 /sys/module 2>/dev/null; "
    'echo @@builtin; cat "/lib/modules/$K/modules.builtin" 2>/dev/null; '
    # a container without the host's /lib/modules has no tree for the host's kernel
    'echo @@tree; [ -d "/lib/modules/$K" ] || echo "$K"; true'
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


@dataclass(frozen=True)
class Modules:
    loaded: list[str] = field(default_factory=list)   # ls /sys/module (loaded, and built-ins with parameters)
    builtin: list[str] = field(default_factory=list)  # /lib/modules/$(uname -r)/modules.builtin
    no_tree: str | None = None  # uname -r when /lib/modules/<it> is missing: modprobe cannot load anything

    def present(self, name: str) -> bool:
        """Loaded or built in; ``-`` and ``_`` are the same to the kernel."""
        name = name.replace("-", "_")
        return name in self.loaded or name in self.builtin


def parse_modules(lines: list[str]) -> Modules:
    """Names as /sys/module shows them, sorted."""
    sections = by_tag(lines)
    release = next((x.strip() for x in sections.get("tree", []) if x.strip()), None)
    return Modules(*(sorted({module_name(x) for x in sections.get(key, []) if x.strip()})
                     for key in ("loaded", "builtin")), no_tree=release)


def no_tree_message(release: str) -> str:
    """Why nothing can be loaded here; in a container, what to mount."""
    return (f"/lib/modules/{release} does not exist here, so modprobe cannot load a module for this kernel "
            "(in a container, mount the host's /lib/modules)")


# What modprobe could load, with each module's dependencies (kmod's
# modules.dep: ``kernel/.../mlx5_ib.ko.zst: kernel/.../ib_uverbs.ko.zst ...``).
DEP_COMMAND = 'cat "/lib/modules/$(uname -r)/modules.dep" 2>/dev/null; true'


def parse_modules_dep(lines: list[str]) -> dict[str, list[str]]:
    """``{module: [dependencies]}``, names as /sys/module shows them."""
    deps: dict[str, list[str]] = {}
    for line in lines:
        target, sep, rest = line.partition(":")
        if not sep or not target.strip():
            continue
        deps[module_name(target)] = [module_name(p) for p in rest.split()]
    return deps
