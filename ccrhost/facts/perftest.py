"""ib_write_bw servers and clients, run as facts so the verification can
drive many hosts at once and read back what each measured."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.perftest import (
    MISSING,
    clients_script,
    parse_clients_output,
    parse_servers_output,
    server_runs,
)


class IbWriteBwServers(FactBase):
    """Starts one detached ``ib_write_bw`` server per device on consecutive
    ports, each bounded by ``timeout``; returns ``{"error": None | why}``."""

    default = dict

    def command(self, devices, port, seconds, timeout):
        starts = " ".join(f"(setsid {run} </dev/null >/dev/null 2>&1 &);"
                          for run in server_runs(devices, port, seconds, timeout))
        return f"{MISSING}{starts} echo '@@started'"

    def process(self, output):
        return parse_servers_output(list(output))


class IbWriteBwClients(FactBase):
    """Runs ``ib_write_bw`` against ``peer`` for each device in turn and
    returns ``{device: {"gbps": float | None, "error": str | None}}``."""

    default = dict

    def command(self, devices, peer, port, seconds, timeout):
        return clients_script(devices, peer, port, seconds, timeout)

    def process(self, output):
        return parse_clients_output(list(output))
