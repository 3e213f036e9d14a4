"""ib_write_bw servers and clients, run as facts so the verification can
drive many hosts at once and read back what each measured."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from ccrhost.probes.perftest import (
    client_command,
    gdr_command,
    parse_client_runs,
    parse_gdr_runs,
    server_command,
)

_MISSING = "if ! command -v ib_write_bw >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "


class IbWriteBwServers(FactBase):
    """Starts one detached ``ib_write_bw`` server per device on consecutive
    ports, each bounded by ``timeout``; returns ``{"error": None | why}``."""

    default = dict

    def command(self, devices, port, seconds, timeout):
        starts = " ".join(
            f"(setsid timeout {int(timeout)} {server_command(dev, port + i, seconds)} </dev/null >/dev/null 2>&1 &);"
            for i, dev in enumerate(devices)
        )
        return f"{_MISSING}{starts} echo '@@started'"

    def process(self, output):
        if "@@missing" in output:
            return {"error": "ib_write_bw not found (install perftest)"}
        return {"error": None}


class IbWriteBwClients(FactBase):
    """Runs ``ib_write_bw`` against ``peer`` for each device in turn and
    returns ``{device: {"gbps": float | None, "error": str | None}}``."""

    default = dict

    def command(self, devices, peer, port, seconds, timeout):
        runs = " ".join(
            f"echo {shlex.quote('@@dev ' + dev)}; timeout {int(timeout)} "
            f"{client_command(dev, peer, port + i, seconds)} 2>&1; echo \"@@rc $?\";"
            for i, dev in enumerate(devices)
        )
        return f"{_MISSING}{runs} true"

    def process(self, output):
        return parse_client_runs(output)


class GpuDirectRuns(FactBase):
    """Runs ib_write_bw through GPU memory on each GPU-NIC pair of the node
    (loopback, NUMA-pinned; see ``probes.perftest.gdr_command``) and returns
    ``(why unmeasurable | None, {pair: Gb/s}, [errors])``."""

    def default(self):
        return ("no output from the GPUDirect measurement", {}, [])

    def command(self, pairs, port, seconds, timeout, dmabuf):
        return gdr_command(pairs, port, seconds, timeout, dmabuf)

    def process(self, output):
        return parse_gdr_runs(output)
