"""ib_write_bw servers and clients, run as facts so the verification can
drive many hosts at once and read back what each measured."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from ccrhost.probes.perftest import (
    PerftestFormatError,
    client_command,
    parse_ib_write_bw,
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
        if "@@missing" in output:
            return {"@all": {"gbps": None, "error": "ib_write_bw not found (install perftest)"}}
        results, dev, text = {}, None, []
        for line in output:
            if line.startswith("@@dev "):
                dev, text = line[6:], []
            elif line.startswith("@@rc ") and dev is not None:
                rc = int(line[5:])
                body = "\n".join(text)
                if rc == 124:
                    results[dev] = {"gbps": None, "error": f"ib_write_bw on {dev} timed out"}
                    continue
                try:
                    results[dev] = {"gbps": parse_ib_write_bw(body).average_gbps, "error": None}
                except PerftestFormatError:
                    last = next((x.strip() for x in reversed(text) if x.strip()), f"exit {rc}")
                    results[dev] = {"gbps": None, "error": f"ib_write_bw on {dev} failed: {last}"}
                dev = None
            else:
                text.append(line)
        return results
