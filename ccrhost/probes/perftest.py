"""perftest's ib_write_bw: the command line and its report.

The report has several header variants (``BW average[Gb/sec]`` with
``--report_gbits``, ``[MB/sec]`` without, ``[MiB/sec]`` in newer releases)
and may carry a warning line such as "Conflicting CPU frequency values
detected" between the header and the data row.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ccrhost import numbers
from ccrhost.probes.sections import split

DEFAULT_PORT = 18515
_UNIT_GBPS = {"Gb/sec": 1.0, "MB/sec": 8 * 2**20 / 1e9, "MiB/sec": 8 * 2**20 / 1e9}
# What a result cell that tries to be a number looks like (what float() took,
# Unicode digits included): such a cell is refused by numbers.decimal as
# no measurement; any other cell is a warning line, skipped.
_NUMBERISH = re.compile(r"[+-]?(?:[\d._]+(?:[eE][+-]?\d+)?|nan|inf(?:inity)?)", re.IGNORECASE)
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]")


class PerftestFormatError(ValueError):
    """ib_write_bw's report is not in its format."""


class NotAMeasurement(PerftestFormatError):
    """A result row whose bandwidth is nan, inf or negative."""


@dataclass(frozen=True)
class BwResult:
    msg_bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float


def parse_ib_write_bw(text: str) -> BwResult:
    unit = None
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header:
            unit = header.group(2)
            if unit not in _UNIT_GBPS:
                raise PerftestFormatError(f"line {line.strip()!r}: unknown bandwidth unit {unit!r}")
            continue
        if unit is None:
            continue
        fields = line.split()
        if len(fields) < 4 or numbers.integer(fields[0], 0) is None or numbers.integer(fields[1], 0) is None:
            continue
        if not (_NUMBERISH.fullmatch(fields[2]) and _NUMBERISH.fullmatch(fields[3])):
            continue  # a warning line that happens to start with numbers
        peak, avg = numbers.decimal(fields[2], 0), numbers.decimal(fields[3], 0)
        if peak is None or avg is None:
            # nan, inf or a negative rate is no measurement
            raise NotAMeasurement(f"result row {line.strip()!r}: bandwidth is not a finite number >= 0")
        scale = _UNIT_GBPS[unit]
        return BwResult(numbers.integer(fields[0], 0), numbers.integer(fields[1], 0), peak * scale, avg * scale)
    raise PerftestFormatError("no ib_write_bw result row found" if unit else "no ib_write_bw report header found")


def _args(device: str, port: int, seconds: int) -> list[str]:
    return ["ib_write_bw", "-d", device, "-p", str(port), "-D", str(seconds), "-F", "--report_gbits"]


def client_command(device: str, peer: str, port: int, seconds: int) -> str:
    return " ".join(shlex.quote(a) for a in [*_args(device, port, seconds), peer])


def server_command(device: str, port: int, seconds: int) -> str:
    return " ".join(shlex.quote(a) for a in _args(device, port, seconds))


def parse_client_runs(lines: list[str]) -> dict[str, dict]:
    """The clients' output, one ``@@dev DEV`` section then ``@@rc N`` per
    device -> ``{device: {"gbps": float | None, "error": str | None}}``."""
    if "@@missing" in lines:
        return {"@all": {"gbps": None, "error": "ib_write_bw not found (install perftest)"}}
    results, dev, text = {}, None, []
    for section in split(lines):
        if section.tag == "dev":
            dev, text = section.arg, section.lines
        elif section.tag == "rc" and dev is not None:
            rc = numbers.integer(section.arg, -255, 255)
            rc = -1 if rc is None else rc
            if rc == 124:
                results[dev] = {"gbps": None, "error": f"ib_write_bw on {dev} timed out"}
            else:
                try:
                    results[dev] = {"gbps": parse_ib_write_bw("\n".join(text)).average_gbps, "error": None}
                except NotAMeasurement as exc:
                    results[dev] = {"gbps": None, "error": f"ib_write_bw on {dev}: {exc}"}
                except PerftestFormatError:
                    last = next((x.strip() for x in reversed(text) if x.strip()), f"exit {rc}")
                    results[dev] = {"gbps": None, "error": f"ib_write_bw on {dev} failed: {last}"}
            dev = None
    return results


# The scripts that run ib_write_bw on a host, shared by the pyinfra facts
# (over SSH) and the Slurm fleet job (as job steps), and their readers.
MISSING = "if ! command -v ib_write_bw >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
MISSING_ERROR = "ib_write_bw not found (install perftest)"


def server_runs(devices: list[str], port: int, seconds: int, timeout: int) -> list[str]:
    """One bounded server command per device, on consecutive ports."""
    return [f"timeout {int(timeout)} {server_command(dev, port + i, seconds)}" for i, dev in enumerate(devices)]


def clients_script(devices: list[str], peer: str, port: int, seconds: int, timeout: int) -> str:
    """Runs a client against ``peer`` for each device in turn, each result between markers."""
    runs = " ".join(
        f"echo {shlex.quote('@@dev ' + dev)}; timeout {int(timeout)} "
        f"{client_command(dev, peer, port + i, seconds)} 2>&1; echo \"@@rc $?\";"
        for i, dev in enumerate(devices)
    )
    return f"{MISSING}{runs} true"


def parse_servers_output(lines: list[str]) -> dict:
    return {"error": MISSING_ERROR if "@@missing" in lines else None}


parse_clients_output = parse_client_runs
# --- GPUDirect: ib_write_bw through GPU memory (reference gdr.md [6]) -------

_CUDA_OPTION = re.compile(r"^\s*--use_cuda=<", re.M)
_DMABUF_OPTION = re.compile(r"^\s*--use_cuda_dmabuf\b", re.M)


def cuda_options(help_text: str) -> tuple[bool, bool]:
    """(``--use_cuda``, ``--use_cuda_dmabuf``) from ``ib_write_bw --help``:
    perftest prints them only when built with CUDA (and dma-buf) support."""
    return bool(_CUDA_OPTION.search(help_text)), bool(_DMABUF_OPTION.search(help_text))


@dataclass(frozen=True)
class GdrPair:
    name: str              # "GPU0-mlx5_0"
    gpu_index: int         # the CUDA device in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    device: str            # the RDMA device
    numa_node: int | None  # the NIC's NUMA node: CPU and memory of both ends are pinned there


def gdr_args(pair: GdrPair, port: int, seconds: int, dmabuf: bool) -> list[str]:
    # --use_cuda_dmabuf after --use_cuda: perftest refuses the other order
    cuda = [f"--use_cuda={pair.gpu_index}", *(["--use_cuda_dmabuf"] if dmabuf else [])]
    pin = ["numactl", f"--cpunodebind={pair.numa_node}", f"--membind={pair.numa_node}"] \
        if pair.numa_node is not None else []
    return [*pin, *_args(pair.device, port, seconds), *cuda]


def gdr_command(pairs: list[GdrPair], port: int, seconds: int, timeout: int, dmabuf: bool) -> str:
    """One loopback run per pair, one after the other (they would share
    the root complex otherwise): a server on the pair's NIC and GPU, then a
    client to it through the same NIC, both NUMA-pinned. Prints
    ``@@unmeasurable WHY`` when ib_write_bw lacks CUDA or numactl is
    missing, else ``@@pair NAME`` ... ``@@rc N`` per pair."""
    def unmeasurable(why: str) -> str:
        return f"echo {shlex.quote('@@unmeasurable ' + why)}; exit 0"

    missing = unmeasurable("ib_write_bw not found (install perftest)")
    no_cuda = unmeasurable("ib_write_bw has no CUDA support (--use_cuda is not in ib_write_bw --help)")
    no_dmabuf = unmeasurable("ib_write_bw has no --use_cuda_dmabuf, and dma-buf is the only GPUDirect path here")
    no_numactl = unmeasurable("numactl not found (each run is pinned to its NIC's NUMA node)")
    head = (f"if ! command -v ib_write_bw >/dev/null 2>&1; then {missing}; fi; h=$(ib_write_bw --help 2>&1); "
            f"case \"$h\" in *'--use_cuda=<'*) ;; *) {no_cuda};; esac; ")
    if dmabuf:
        head += f"case \"$h\" in *--use_cuda_dmabuf*) ;; *) {no_dmabuf};; esac; "
    if any(p.numa_node is not None for p in pairs):
        head += f"command -v numactl >/dev/null 2>&1 || {{ {no_numactl}; }}; "
    runs = []
    for i, p in enumerate(pairs):
        args = " ".join(shlex.quote(a) for a in gdr_args(p, port + i, seconds, dmabuf))
        runs.append(f"echo {shlex.quote('@@pair ' + p.name)}; "
                    f"(CUDA_DEVICE_ORDER=PCI_BUS_ID setsid timeout {int(timeout)} {args} </dev/null >/dev/null "
                    f"2>&1 &); sleep 1; "
                    f"CUDA_DEVICE_ORDER=PCI_BUS_ID timeout {int(timeout)} {args} localhost 2>&1; "
                    f"echo \"@@rc $?\";")
    return head + " ".join(runs) + " true"


def parse_gdr_runs(lines: list[str]) -> tuple[str | None, dict[str, float], list[str]]:
    """(why unmeasurable or None, {pair: Gb/s}, errors) from
    :func:`gdr_command`'s output."""
    gbps, errors, name, text = {}, [], None, []
    for section in split(lines):
        if section.tag == "unmeasurable":
            return section.arg, {}, []
        if section.tag == "pair":
            name, text = section.arg, section.lines
        elif section.tag == "rc" and name is not None:
            rc = numbers.integer(section.arg, -255, 255)  # isdigit() takes "²", which int() refuses
            rc = -1 if rc is None else rc
            if rc == 124:
                errors.append(f"GPUDirect ib_write_bw on {name} timed out")
            else:
                try:
                    gbps[name] = parse_ib_write_bw("\n".join(text)).average_gbps
                except PerftestFormatError:
                    last = next((x.strip() for x in reversed(text) if x.strip()), f"exit {rc}")
                    errors.append(f"GPUDirect ib_write_bw on {name} failed: {last}")
            name = None
    return None, gbps, errors
