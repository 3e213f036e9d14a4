"""Measured bandwidth across the fleet with ib_write_bw, host pair by pair.

Runs from deploy code before operations are queued: every round starts the
servers of all its pairs at once, then all the clients, through pyinfra
facts in parallel greenlets. Slow pairs are retried (healthy nodes vary),
then split against known-good partners so that the culprit is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gevent

from ccrhost.facts.perftest import IbWriteBwClients, IbWriteBwServers
from ccrhost.fleet.pairing import cover
from ccrhost.fleet.parallel import once_per_run, parallel_facts
from ccrhost.probes.perftest import DEFAULT_PORT


@dataclass
class HostMeasurement:
    gbps: dict[str, float] = field(default_factory=dict)  # device -> measured Gb/s
    errors: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass(frozen=True)
class MeasurePlan:
    devices: dict[str, list[str]]               # host -> its active compute devices, in order
    expected: dict[str, dict[str, float]]       # host -> device -> effective link Gb/s
    address: dict[str, str]                     # host -> address its peers connect to
    seconds: int = 10
    timeout: int = 60
    retries: int = 2
    min_fraction: float = 0.9
    port: int = DEFAULT_PORT


@dataclass
class PairResult:
    server: str
    client: str
    gbps: list[tuple[str, str, float]]  # (server device, client device, Gb/s)
    errors: list[str]
    slow: bool


def run_round(state, hosts: dict, pairs: list[tuple[str, str]], plan: MeasurePlan) -> list[PairResult]:
    timeout = plan.timeout
    widths = [min(len(plan.devices[s]), len(plan.devices[c])) for s, c in pairs]
    servers = parallel_facts(state, [
        (hosts[s], IbWriteBwServers, {"devices": plan.devices[s][:n], "port": plan.port, "seconds": plan.seconds,
                                      "timeout": n * timeout + 10})
        for (s, c), n in zip(pairs, widths)
    ])
    gevent.sleep(1)  # let the servers listen
    clients = parallel_facts(state, [
        (hosts[c], IbWriteBwClients, {"devices": plan.devices[c][:n], "peer": plan.address[s], "port": plan.port,
                                      "seconds": plan.seconds, "timeout": timeout})
        for (s, c), n in zip(pairs, widths)
    ])
    return [judge_pair(s, c, n, server, client, plan) for (s, c), n, server, client in zip(pairs, widths, servers, clients)]


def judge_pair(s: str, c: str, n: int, server: dict, client: dict, plan: MeasurePlan) -> PairResult:
    """One pair's result from what its server and client reported (see
    ``ccrhost.perftest.parse_*_output``): errors, Gb/s per device pair, slow or not."""
    errors = [f"{s}: {server['error']}"] if server.get("error") else []
    gbps, slow = [], False
    if "@all" in client:
        errors.append(f"{c}: {client['@all']['error']}")
    for sdev, cdev in zip(plan.devices[s][:n], plan.devices[c][:n]):
        got = client.get(cdev, {"gbps": None, "error": f"no result for {cdev}"})
        if got.get("gbps") is None:
            if "@all" not in client and not errors:
                errors.append(f"{s}<->{c}: {got.get('error')}")
            continue
        gbps.append((sdev, cdev, got["gbps"]))
        want = min(plan.expected[s].get(sdev, 0), plan.expected[c].get(cdev, 0))
        slow |= got["gbps"] < plan.min_fraction * want
    return PairResult(s, c, gbps, errors, slow and not errors)


def _take(r: PairResult, name: str, note: str | None = None) -> HostMeasurement:
    server = name == r.server
    return HostMeasurement(
        gbps={(sdev if server else cdev): g for sdev, cdev, g in r.gbps},
        errors=list(r.errors), note=note,
    )


def measure_fleet(state, hosts: dict, plan: MeasurePlan, runner=None) -> dict[str, HostMeasurement]:
    """Measure every host in ``hosts`` (name -> pyinfra Host) against a peer.

    ``runner(pairs) -> [PairResult]`` runs one round; the default drives
    ib_write_bw through pyinfra, tests pass their own.
    """
    if runner is None:
        def runner(pairs):
            return run_round(state, hosts, pairs, plan)

    out: dict[str, HostMeasurement] = {}
    names = [n for n in hosts if plan.devices.get(n)]
    for n in hosts:
        if not plan.devices.get(n):
            out[n] = HostMeasurement(errors=["no active compute port to measure"])
    if len(names) == 1:
        out[names[0]] = HostMeasurement(errors=["no peer to measure against (one host in the run)"])
    if len(names) < 2:
        return out

    for name, (r, note) in cover(names, runner, plan.retries).items():
        out[name] = _take(r, name, note)
    return out


def plan_for(state, inventory, settings_by_host: dict, exclude=frozenset(),
             only=None) -> tuple[dict, MeasurePlan | None]:
    """Read every measuring host's RDMA ports (in parallel) and plan the test;
    hosts in ``exclude`` (GPU work running) are left out of every pair. ``only``: these hosts measure
    (an acceptance stage's), whatever their verify_measure."""
    from ccrhost.facts.rdma import RdmaDevices
    from ccrhost.model.ports import compute_ports
    from ccrhost.probes.rdma import RdmaReading

    active = set(inventory.get_active_hosts())
    # inventory order, so pairs are predictable from the inventory file
    hosts = {h.name: h for h in inventory if h in active and h.name not in exclude
             and (settings_by_host[h.name].verify_measure if only is None else h.name in only)}
    if not hosts:
        return hosts, None
    facts = parallel_facts(state, [(h, RdmaDevices, {}) for h in hosts.values()])
    devices, expected = {}, {}
    for name, fact in zip(hosts, facts):
        ports = [p for p in compute_ports(fact or RdmaReading(), settings_by_host[name].rdma_exclude_devices)
                 if p.active]
        devices[name] = list(dict.fromkeys(p.device for p in ports))
        expected[name] = {p.device: p.link_gbps for p in ports}
    first = settings_by_host[next(iter(hosts))]
    plan = MeasurePlan(
        devices=devices, expected=expected,
        address={n: h.data.get("ssh_hostname") or n for n, h in hosts.items()},
        seconds=first.verify_measure_seconds, timeout=first.verify_measure_timeout,
        retries=first.verify_measure_retries, min_fraction=first.verify_measure_min_fraction,
        port=first.verify_measure_port,
    )
    return hosts, plan


def fleet_measurements(state, inventory, settings_by_host: dict, exclude=frozenset()) -> dict[str, HostMeasurement]:
    """Measure once per run, on the first host's deploy pass; cached after.
    ``exclude``: the hosts left out (the same on every host's call)."""
    def measure():
        hosts, plan = plan_for(state, inventory, settings_by_host, exclude)
        return measure_fleet(state, hosts, plan) if hosts else {}

    return once_per_run(inventory, "measurements", measure)
