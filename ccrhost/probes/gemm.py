"""DCGM's ``dcgmproftester`` run on field 1004 (tensor pipe active): its
report lines, one per worker (GPU or MIG slice) per second, read into
achieved TFLOP/s per GPU.

Formats (NVIDIA/DCGM ``dcgmproftester/PhysicalGpu.cpp``; samples and
sources in tests/fixtures/gemm/README.md):

- DCGM 3.2.5 and later ("fmt"):
  ``Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (1.89e+05 gflops).``
- DCGM 2.2.6 to 3.1.8 ("stream"):
  ``Worker 0:0[1004]: TensorEngineActive: generated ???, dcgm 0.000 (250362.2 gflops)``
  (the source ends it with a full stop, NVIDIA's guide shows none: both read).

DCGM 2.0's lines (``TensorEngineActive: generated ???, ...``) name no GPU
and are refused. The tool's other lines (banners, CUDA attributes,
``Worker G:I[F]: Message: ...``, other subtests' ``target``/``generated a/b``
reports, log lines) are skipped; a ``generated ???`` or ``gflops`` line in
no known form is refused, naming it.
"""

from __future__ import annotations

import re
import shlex
import statistics

from ccrhost import numbers
from ccrhost.model.gemm import TENSOR_FIELD, GemmReading

# DCGM ships one binary per CUDA major (DCGM docs, dcgmproftester page);
# each refuses a driver of another major (DcgmProfTester.cpp).
BINARIES = ("dcgmproftester13", "dcgmproftester12", "dcgmproftester11")
GRACE_S = 60   # start-up (CUDA contexts, cuBLAS) and teardown beyond -d

_REPORT = re.compile(r"^Worker (\d+):(\d+)( ?)\[(\d+)\]: (\w+):\s+generated \?\?\?, dcgm (.+) "
                     r"\(([^ ()]+) gflops\)(\.?)$")
_WORKER = re.compile(r"^Worker \d+:\d+ ?\[\d+\]: ")
_LEGACY = re.compile(r"^\w+EngineActive: generated \?\?\?")


class GemmFormatError(ValueError):
    """Not dcgmproftester's GEMM report; the message names the line."""


def binary_names(cuda_major: int | None = None) -> tuple[str, ...]:
    """The binaries to look for: the driver's CUDA major's alone where known."""
    return (f"dcgmproftester{int(cuda_major)}",) if cuda_major else BINARIES


def command(binary: str, duration_s: int, gpu_ids=None, field_id: int = TENSOR_FIELD) -> list[str]:
    """The run, bounded: ``-d`` seconds of load per GPU (all GPUs at once),
    under ``timeout`` with a grace for start-up and a KILL 5 s later.
    ``--no-dcgm-validation``: no host engine or profiling module is needed,
    and the gflops lines print all the same (fixtures)."""
    limit = int(duration_s) + GRACE_S
    ids = ["-i", ",".join(str(int(g)) for g in gpu_ids)] if gpu_ids else []
    return ["timeout", "-k", "5", str(limit), binary, "--no-dcgm-validation", "-t", str(int(field_id)),
            "-d", str(int(duration_s)), *ids]


def run_script(duration_s: int, gpu_ids=None, cuda_major: int | None = None,
               field_id: int = TENSOR_FIELD) -> str:
    """The first binary found on PATH, run by :func:`command`, each part marked
    (``@@missing``, ``@@tool NAME``, ``@@rc N``) for :func:`parse_run_script`."""
    names = " ".join(binary_names(cuda_major))
    run = " ".join(shlex.quote(a) if a != "BIN" else '"$tool"' for a in command("BIN", duration_s, gpu_ids, field_id))
    return (f"tool=; for b in {names}; do command -v \"$b\" >/dev/null 2>&1 && {{ tool=$b; break; }}; done; "
            f"if [ -z \"$tool\" ]; then echo '@@missing'; exit 0; fi; "
            f"echo \"@@tool $tool\"; {run} 2>&1; echo \"@@rc $?\"")


def parse(text: str, tool: str | None = None, field_id: int = TENSOR_FIELD) -> GemmReading:
    """The report lines of ``text`` for ``field_id``: per GPU, the sum over
    its workers of each worker's median tick, in TFLOP/s. Raises
    :class:`GemmFormatError` naming the first line in no known form, or
    when there is no report line at all."""
    ticks: dict[tuple[int, int], list[float]] = {}
    formats: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _REPORT.match(line)
        if m is None:
            if _LEGACY.match(line):
                raise GemmFormatError(f"line {number}: {line!r} names no GPU (DCGM 2.0's format): "
                                      "its throughput cannot be given to a GPU")
            if "generated ???" in line or "gflops" in line:
                raise GemmFormatError(f"line {number}: {line!r} is not a dcgmproftester GEMM report line")
            continue  # banners, CUDA attributes, Message lines, other subtests' reports, log lines
        gpu, worker, space, field, _header, _dcgm, gflops_text, stop = m.groups()
        if int(field) != field_id:
            raise GemmFormatError(f"line {number}: {line!r} reports field {field}, not {field_id}")
        gflops = numbers.printf_float(gflops_text, 0)
        if gflops is None:
            raise GemmFormatError(f"line {number}: {gflops_text!r} in {line!r} is not a gflops figure")
        # DCGM 3.2.5+ writes "G:I [F]" and ends with a full stop; older ones "G:I[F]"
        formats.add("fmt" if space else "stream")
        if space and not stop:
            raise GemmFormatError(f"line {number}: {line!r} is not a dcgmproftester GEMM report line")
        ticks.setdefault((int(gpu), int(worker)), []).append(gflops)
    if not ticks:
        raise GemmFormatError(f"no 'Worker G:I [{field_id}]: ... (N gflops)' line in dcgmproftester's output")
    if len(formats) > 1:
        raise GemmFormatError("report lines in two formats (DCGM 3.2.5+ and older) in one output")
    tflops: dict[int, float] = {}
    count: dict[int, int] = {}
    for (gpu, _worker), values in sorted(ticks.items()):
        tflops[gpu] = round(tflops.get(gpu, 0.0) + statistics.median(values) / 1000.0, 3)
        count[gpu] = count.get(gpu, 0) + len(values)
    return GemmReading(tool, None, field_id, tflops, count, formats.pop())


def parse_run_script(lines: list[str], field_id: int = TENSOR_FIELD) -> GemmReading:
    """A :class:`GemmReading` from :func:`run_script`'s output; never raises:
    a missing tool, a run killed at its deadline (timeout's 124, or 137 after
    its KILL), a failed exit or output in no known form is its ``error``."""
    if "@@missing" in lines:
        return GemmReading(None, field_id=field_id,
                           error=f"none of {', '.join(BINARIES)} is on PATH (command -v)")
    tool, rc, body = None, None, []
    for line in lines:
        if line.startswith("@@tool "):
            tool = line[7:].strip() or None
        elif line.startswith("@@rc "):
            rc = numbers.integer(line[5:], 0, 255)
        else:
            body.append(line)
    if rc is None:
        return GemmReading(tool, field_id=field_id, error="the run gave no exit status (cut off)")
    if rc in (124, 137):
        return GemmReading(tool, field_id=field_id, error="hung: killed by timeout at its deadline")
    if rc != 0:
        last = next((b.strip() for b in reversed(body) if b.strip()), "no output")
        return GemmReading(tool, field_id=field_id, error=f"exit {rc}: {last}")
    try:
        return parse("\n".join(body), tool, field_id)
    except GemmFormatError as exc:
        return GemmReading(tool, field_id=field_id, error=str(exc))
