"""``dcgmi``: the host engine's answer and ``dcgmi diag -j``'s report.

Two JSON shapes, both written by dcgmi/Diag.cpp (NVIDIA/DCGM):

- DCGM 3.x (v3.3.9): ``{"DCGM GPU Diagnostic": {"test_categories": [{"category",
  "tests": [{"name", "results": [...]}]}], "version"}}``. Level-one
  (Deployment) tests carry one result with no GPU, and the error's GPU as
  an integer ``gpu_id`` beside a ``warnings`` list whose message key is
  ``warnings`` too (HelperJsonAddLevelOneResult); per-GPU tests carry a
  string ``gpu_id`` ("0") and ``warnings[].warning``. NVVS's own JSON
  (testing/TestDiagManagerStrings.h) says ``gpu_ids`` ("0,1,2,3") and
  upper-case statuses (PASS, SKIP): read too.
- DCGM 4.x: ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests":
  [{"name", "results": [{"entity_group_id", "entity_group", "entity_id",
  "status", "warnings": [{"warning", "error_id", ...}], "info"}],
  "test_summary": {"status", ...}}]}]}, "entity_groups": [...],
  "metadata": {"version", ...}}``. A test's summary is its overall result
  (gcm's check_dcgmi reads it); a failed summary whose results name no
  failing GPU is one result for no GPU.

Statuses are ``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``
(HelperDisplayDiagResult); anything else is kept as said.
"""

from __future__ import annotations

import json
import shlex

from ccrhost.model.dcgm import DiagOutput, DiagResult

SHAPES = {"DCGM GPU Diagnostic": "3.x", "DCGM Diagnostic": "4.x"}
_STATUS = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "warning": "Warn", "skip": "Skip", "skipped": "Skip",
           "not run": "Not Run"}
GPU_GROUP = 1  # DCGM_FE_GPU


class DcgmiFormatError(ValueError):
    """Not dcgmi diag's JSON report."""


def engine_command(binary: str = "dcgmi") -> list[str]:
    """Asks the host engine for its GPUs: answers at once when it is up."""
    return [binary, "discovery", "-l"]


def diag_command(binary: str, level: int) -> list[str]:
    return [binary, "diag", "-r", str(level), "-j"]


def _status(value) -> str:
    text = str(value or "").strip()
    return _STATUS.get(text.lower(), text)


def _warnings(entry: dict) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """The messages, error ids and severities (``error_severity``, where DCGM gives one) of ``entry``'s warnings."""
    texts, ids, severities = [], [], []
    for w in entry.get("warnings") or ():
        if isinstance(w, dict):
            # 3.x level-one results key the message "warnings" (NVVS_WARNINGS), the others "warning"
            msg = w.get("warning", w.get("warnings"))
            if msg:
                texts.append(str(msg))
            if isinstance(w.get("error_id"), int):
                ids.append(w["error_id"])
            if isinstance(w.get("error_severity"), int) and not isinstance(w["error_severity"], bool):
                severities.append(w["error_severity"])
        elif w:
            texts.append(str(w))
    return tuple(texts), tuple(ids), tuple(severities)


def _gpus(entry: dict) -> list[int | None]:
    if "entity_id" in entry:
        group = entry.get("entity_group_id", GPU_GROUP)
        return [int(entry["entity_id"])] if group == GPU_GROUP or entry.get("entity_group") == "GPU" else [None]
    if "gpu_ids" in entry:
        ids = [x.strip() for x in str(entry["gpu_ids"]).split(",") if x.strip()]
        if all(x.isdigit() for x in ids) and ids:
            return [int(x) for x in ids]
    if "gpu_id" in entry and str(entry["gpu_id"]).strip().isdigit():
        return [int(str(entry["gpu_id"]).strip())]
    return [None]


def parse_diag(text: str) -> DiagOutput:
    """The report in ``text`` (dcgmi may print a line before the JSON);
    raises :class:`DcgmiFormatError` when there is none."""
    start = text.find("{")
    if start < 0:
        raise DcgmiFormatError("no JSON object in dcgmi's output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise DcgmiFormatError(f"dcgmi's JSON does not parse: {exc}") from None
    key = next((k for k in SHAPES if isinstance(doc, dict) and k in doc), None)
    if key is None or not isinstance(doc[key], dict):
        raise DcgmiFormatError("neither 'DCGM GPU Diagnostic' (DCGM 3.x) nor 'DCGM Diagnostic' (DCGM 4.x) at the top")
    body = doc[key]
    results = []
    for category in body.get("test_categories") or ():
        if not isinstance(category, dict):
            continue
        cat = str(category.get("category", ""))
        for test in category.get("tests") or ():
            if not isinstance(test, dict):  # 3.x leaves null where a test was skipped over
                continue
            name = str(test.get("name", ""))
            mine = []
            for entry in test.get("results") or ():
                if not isinstance(entry, dict):
                    continue
                texts, ids, severities = _warnings(entry)
                for gpu in _gpus(entry):
                    mine.append(DiagResult(cat, name, _status(entry.get("status")), gpu, texts, ids, severities))
            summary = test.get("test_summary")
            if isinstance(summary, dict) and _status(summary.get("status")) in ("Fail", "Warn"):
                status = _status(summary["status"])
                if not any(r.status == status for r in mine):  # the summary's verdict, on no one GPU
                    texts, ids, severities = _warnings(summary)
                    mine.append(DiagResult(cat, name, status, None, texts, ids, severities))
            results += mine
    serials = {}
    for group in doc.get("entity_groups") or ():
        if isinstance(group, dict) and group.get("entity_group_id") == GPU_GROUP:
            for e in group.get("entities") or ():
                if isinstance(e, dict) and "entity_id" in e and e.get("serial_num"):
                    serials[int(e["entity_id"])] = str(e["serial_num"])
    version = (doc.get("metadata") or {}).get("version") if isinstance(doc.get("metadata"), dict) else None
    version = version or body.get("version")
    error = body.get("runtime_error")
    return DiagOutput(SHAPES[key], tuple(results), str(version) if version else None,
                      str(error) if error else None, serials)


# -- the node's GPUs, to name them: index, PCI address, UUID ----------------------------

def gpu_ids_command(binary: str = "nvidia-smi") -> list[str]:
    return [binary, "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader"]


def parse_gpu_ids(text: str) -> dict:
    """``nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader``
    ("0, 00000000:18:00.0, GPU-..."): {index: GpuId}; lines that are not one are skipped."""
    from ccrhost.model.dcgm import GpuId

    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0].isdigit():
            out[int(cells[0])] = GpuId(int(cells[0]), cells[1] or None, cells[2] or None)
    return out


# -- one remote run (the deploy's fact): the engine, the GPUs, the diag --------------------

def run_script(binary: str, level: int, engine_timeout: int, timeout: int) -> str:
    """The host engine under its own deadline; only when it answered, the
    GPUs' names and the diag under the level's; each part in its section."""
    b = shlex.quote(binary)
    return (f"if ! command -v {b} >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
            f"echo '@@engine'; out=$(timeout -k 2 {int(engine_timeout)} {b} discovery -l 2>&1); rc=$?; "
            f"printf '%s\\n' \"$out\"; echo \"@@rc $rc\"; "
            # exit 0, or the GPUs listed before a later section failed (model.dcgm.engine_answered)
            f"{{ [ \"$rc\" -eq 0 ] || {{ [ \"$rc\" -ne 124 ] && [ \"$rc\" -ne 137 ] && printf '%s\\n' \"$out\" "
            f"| grep -Eq '^[[:space:]]*[1-9][0-9]* GPUs? found'; }}; }} || exit 0; "
            f"echo '@@gpus'; timeout -k 2 20 {' '.join(gpu_ids_command())} 2>/dev/null; "
            f"echo '@@diag'; timeout -k 5 {int(timeout)} {' '.join(diag_command(b, level))} 2>&1; echo \"@@rc $?\"")


def parse_run_script(lines: list[str]) -> tuple:
    """(engine, gpus, diag) from :func:`run_script`'s output: two
    ``ToolAnswer`` (diag None when the engine did not answer) and the GPUs'
    names. timeout's 124 (or 137 after its KILL) is a run killed at its deadline."""
    from ccrhost import numbers
    from ccrhost.model.dcgm import ToolAnswer

    if "@@missing" in lines:
        missing = ToolAnswer(missing="dcgmi not found on PATH (command -v)")
        return missing, {}, None
    parts: dict[str, list[str]] = {}
    rcs: dict[str, int | None] = {}
    current = None
    for line in lines:
        if line in ("@@engine", "@@gpus", "@@diag"):
            current = line[2:]
            parts[current] = []
        elif line.startswith("@@rc ") and current:
            rcs[current] = numbers.integer(line[5:], 0, 255)
        elif current:
            parts[current].append(line)

    def answer(name):
        if name not in parts:
            return None
        rc = rcs.get(name)
        timed_out = rc in (124, 137)
        return ToolAnswer(None if timed_out else rc, "\n".join(parts[name]), timed_out)

    return answer("engine") or ToolAnswer(None, "", True), parse_gpu_ids("\n".join(parts.get("gpus", []))), \
        answer("diag")
