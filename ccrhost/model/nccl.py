"""NCCL settings derived from a node's facts and its inventory data. Pure.

/etc/nccl.conf is parsed by NCCL itself (src/misc/param.cc): one
``KEY=VALUE`` per line, no quoting, no trimming, ``#`` comments; the first
definition of a key wins, and the environment wins over every file.
"""

from __future__ import annotations

import json
import shlex

from ccrhost.model.managed import NCCL_CONF, NCCL_PROFILE
from ccrhost.model.ports import compute_ports, natural_key
from ccrhost.model.qos import tos_byte
from ccrhost.model.rdma import RdmaPort, RdmaReading
from ccrhost.render import render

BEGIN = "# BEGIN ccrhost managed block: rerun the deploy instead of editing"
END = "# END ccrhost managed block"
CONF_PATH, PROFILE_PATH = NCCL_CONF, NCCL_PROFILE
ROCE_ONLY = ("NCCL_IB_TC", "NCCL_IB_FIFO_TC", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ADDR_FAMILY",
             "NCCL_IB_ADDR_RANGE", "NCCL_IB_GID_INDEX")


class NcclError(ValueError):
    """A host whose facts cannot give a consistent NCCL configuration."""


def _v2_ipv4_index(port: RdmaPort) -> int | None:
    return next((g.index for g in port.gids if g.type == "RoCE v2" and g.ipv4), None)


def derive(rdma: RdmaReading, settings) -> dict[str, str]:
    """The NCCL_* variables for one node, in the order they are written."""
    compute = [p for p in compute_ports(rdma, settings.rdma_exclude_devices) if p.active]
    compute.sort(key=lambda p: (natural_key(p.device), p.port))
    if not compute and settings.nccl_ib_hca is None:
        raise NcclError("no active compute RDMA port to give NCCL (all down, absent or excluded)")
    out: dict[str, str] = {}
    # An AWS EFA device reports link_layer "Unknown" (and is always ACTIVE):
    # NCCL reaches it through the aws-ofi-nccl plugin, never its IB verbs
    # transport, so it is no NCCL_IB_HCA entry (reference gpu-fabric-health.md;
    # Port.efa, model/rdma.py).
    verbs = [p for p in compute if not p.efa]
    if settings.nccl_ib_hca or verbs:
        # "=" asks NCCL for exact names, so mlx5_1 does not also match mlx5_10.
        out["NCCL_IB_HCA"] = settings.nccl_ib_hca or "=" + ",".join(f"{p.device}:{p.port}" for p in verbs)

    roce = [p for p in compute if p.link_layer == "Ethernet"]
    if roce:
        out["NCCL_IB_TC"] = str(settings.roce_tos)
        fifo_dscp = settings.nccl_fifo_dscp if settings.nccl_fifo_dscp is not None else settings.roce_dscp
        out["NCCL_IB_FIFO_TC"] = str(tos_byte(fifo_dscp, settings.roce_ecn_bits))
        out["NCCL_IB_ROCE_VERSION_NUM"] = str(settings.roce_version)
        out["NCCL_IB_ADDR_FAMILY"] = settings.nccl_ib_addr_family
        if settings.nccl_ib_addr_range:
            out["NCCL_IB_ADDR_RANGE"] = settings.nccl_ib_addr_range
        if settings.nccl_ib_gid_index is not None:
            found = {p.name: _v2_ipv4_index(rdma.devices[p.device].ports[p.port]) for p in roce}
            wanted = settings.nccl_ib_gid_index
            wrong = {name: index for name, index in found.items() if index != wanted}
            if wrong:
                detail = ", ".join(f"{n} at {'none' if i is None else i}" for n, i in sorted(wrong.items()))
                raise NcclError(
                    f"nccl_ib_gid_index {wanted} does not hold the RoCE v2 IPv4 GID on every compute port "
                    f"({detail}); leave it unset so NCCL selects the GID per port"
                )
            out["NCCL_IB_GID_INDEX"] = str(wanted)

    ifname = settings.nccl_socket_ifname or rdma.node.default_route_dev
    if ifname:
        out["NCCL_SOCKET_IFNAME"] = ifname if settings.nccl_socket_ifname else "=" + ifname
    for key, name in (("nccl_net_gdr_level", "NCCL_NET_GDR_LEVEL"),
                      ("nccl_ib_qps_per_connection", "NCCL_IB_QPS_PER_CONNECTION"),
                      ("nccl_ib_timeout", "NCCL_IB_TIMEOUT"), ("nccl_ib_retry_cnt", "NCCL_IB_RETRY_CNT"),
                      ("nccl_cross_nic", "NCCL_CROSS_NIC")):
        value = getattr(settings, key)
        if value is not None:
            out[name] = str(value)
    for name, value in sorted((settings.nccl_extra or {}).items()):
        if name in out:
            raise NcclError(f"nccl_extra sets {name}, which ccrhost derives; use its own key instead")
        out[name] = value
    if not roce:
        for name in ROCE_ONLY:
            out.pop(name, None)
    return out


def render_block(env: dict[str, str]) -> str:
    return render("nccl.conf.j2", begin=BEGIN, end=END, env=env)


def render_profile(env: dict[str, str]) -> str:
    return render("ccrhost-nccl.sh.j2", env=env, quote=shlex.quote)


def render_json(env: dict[str, str]) -> str:
    return json.dumps(env, indent=2) + "\n"


class BlockError(ValueError):
    """The file's ccrhost markers do not pair up: rewriting it could lose site lines."""


def _lines(text: str | None) -> list[str]:
    """The file's lines as NCCL splits them (on LF only), each with its end."""
    parts = (text or "").split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _bare(line: str) -> str:
    return line.rstrip("\n").removesuffix("\r")  # a CRLF file's markers are markers too


def merge_block(existing: str | None, block: str) -> str:
    """``existing`` with our block replaced (or appended); every other line
    kept byte for byte. A BEGIN marker with no END after it is refused:
    the lines after it could be the site's."""
    out, inside, placed, opened = [], False, False, 0
    for number, line in enumerate(_lines(existing), 1):
        if not inside and _bare(line) == BEGIN:
            inside, opened = True, number
            if not placed:
                out.append(block)
                placed = True
            continue
        if inside:
            inside = _bare(line) != END
            continue
        out.append(line)
    if inside:
        raise BlockError(f"line {opened} opens ccrhost's block ({BEGIN!r}) but no {END!r} line closes it; "
                         "fix the file (the lines after it may be the site's) and rerun")
    if not placed:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(block)
    return "".join(out)


def site_text(existing: str | None) -> str:
    """What the site wrote: the file without ccrhost's block."""
    out, inside = [], False
    for line in _lines(existing):
        if not inside and _bare(line) == BEGIN:
            inside = True
        elif inside:
            inside = _bare(line) != END
        else:
            out.append(line)
    return "".join(out)


def site_overrides(existing: str | None, env: dict[str, str]) -> list[str]:
    """Keys the site sets outside our block, before it: NCCL keeps the first."""
    seen = []
    for raw in _lines(existing):
        line = _bare(raw)
        if line == BEGIN:
            break
        key = line.split("=", 1)[0]
        if not line.startswith("#") and "=" in line and key in env:
            seen.append(key)
    return seen
