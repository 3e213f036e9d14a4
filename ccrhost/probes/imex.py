"""The NVLink tray's IMEX service on this node, in one shell snippet: the
IMEX unit, the channel device, the node's own addresses and
``nvidia-imex-ctl -N`` (model/imex.py judges it).

Formats (verbatim samples in tests/fixtures/imex/):
- ``nvidia-imex-ctl -N``: the connectivity table's legend, a time stamp, ``Nodes:`` then one
  ``Node #0   - 172.31.48.81    - READY                - Version: 570.172`` line per node (older
  daemons print no ``- Version:``), an empty line, `` Nodes From\\To  0   1 ...`` and one row per
  node of cells (``C``, ``N``, ``!M!`` ...), then ``Domain State: UP`` (AWS PCS user guide,
  capacity-blocks-nvidia-imex; AWS ParallelCluster's GB200 guide prints the same). Its usage
  (NVIDIA IMEX guide, cmdservice.html): ``-c <config>`` defaults to /etc/nvidia-imex/config.cfg.
- ``systemctl is-active UNIT``: one word (active, inactive, failed, activating, ...).
- ``hostname -I``: the host's addresses, space-separated.
"""

from __future__ import annotations

import re
import shlex

from ccrhost.model.imex import ImexDomain, ImexNode, ImexPolicy, ImexReading
from ccrhost.probes import local
from ccrhost.probes.sections import split

WHAT = "nvidia-imex-ctl -N, systemctl is-active, the IMEX channel device"
CONFIG = "/etc/nvidia-imex/config.cfg"  # nvidia-imex-ctl's default -c (NVIDIA IMEX guide)


class ImexFormatError(ValueError):
    """Output nvidia-imex-ctl never prints; the message quotes it."""


def command(policy: ImexPolicy = ImexPolicy(), config: str = CONFIG) -> str:
    unit, channel, cfg = shlex.quote(policy.unit), shlex.quote(policy.channel), shlex.quote(config)
    return "; ".join((
        f"if command -v systemctl >/dev/null 2>&1; then echo @@unit; systemctl is-active {unit} 2>/dev/null"
        " | head -n1; fi",
        f"if [ -c {channel} ]; then echo '@@channel present'; else echo '@@channel missing'; fi",
        "echo @@addresses; hostname -I 2>/dev/null",
        "if command -v nvidia-imex-ctl >/dev/null 2>&1; then echo @@imexctl;"
        f" timeout -k 2 10 nvidia-imex-ctl -N -c {cfg} 2>&1; echo \"@@rc $?\";"
        " else echo @@imexerror; echo 'nvidia-imex-ctl not found'; fi",
    ))


_NODE = re.compile(r"^Node #(\d{1,4})\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_HEAD = re.compile(r"^\s*Nodes From\\To((?:\s+\d{1,4})+)\s*$")
_ROW = re.compile(r"^\s*(\d{1,4})((?:\s+\S+)+)\s*$")
_STATE = re.compile(r"^Domain State:\s*(\S+)\s*$")
_STAMP = re.compile(r"^\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2}(\.\d+)?$")
_LEGEND = re.compile(r"^(?:Connectivity Table Legend:|(?:[A-Z]|![A-Z]!) - .+)$")


def parse_domain(lines: list[str]) -> ImexDomain:
    """``nvidia-imex-ctl -N``'s lines. A line it never prints raises :class:`ImexFormatError`."""
    domain = ImexDomain()
    columns: list[int] | None = None
    in_nodes = False
    for line in lines:
        text = line.rstrip()
        if not text.strip() or _LEGEND.match(text) or _STAMP.match(text.strip()):
            continue
        if text == "Nodes:":
            in_nodes = True
            continue
        m = _NODE.match(text)
        if m and in_nodes:
            domain.nodes.append(ImexNode(int(m.group(1)), m.group(2), m.group(3), m.group(4)))
            continue
        m = _HEAD.match(text)
        if m:
            columns, in_nodes = [int(c) for c in m.group(1).split()], False
            continue
        m = _STATE.match(text.strip())
        if m:
            domain.state = m.group(1)
            continue
        m = _ROW.match(text)
        if m and columns is not None:
            cells = m.group(2).split()
            if len(cells) != len(columns):
                raise ImexFormatError(f"connectivity row {text.strip()!r}: {len(cells)} cells for {len(columns)} nodes")
            for to, cell in zip(columns, cells):
                domain.set_cell(int(m.group(1)), to, cell)
            continue
        raise ImexFormatError(f"a line nvidia-imex-ctl -N does not print: {text.strip()[:200]!r}")
    if domain.state is None and not domain.nodes:
        raise ImexFormatError("no node list and no Domain State line")
    return domain


def parse_command_output(lines: list[str], policy: ImexPolicy = ImexPolicy()) -> ImexReading:
    parts = {s.tag: s for s in split(lines)}
    reading = ImexReading()
    if not parts:
        reading.error = "no output"
        return reading
    if "unit" in parts:
        reading.unit = next((x.strip() for x in parts["unit"].lines if x.strip()), None) or "unknown"
    if "channel" in parts:
        reading.channel = parts["channel"].arg == "present"
    if "addresses" in parts:
        reading.addresses = tuple(a for x in parts["addresses"].lines for a in x.split())
    if "imexerror" in parts:
        reading.domain.error = " ".join(x.strip() for x in parts["imexerror"].lines).strip() or "not run"
    elif "imexctl" in parts:
        body = parts["imexctl"].lines
        rc = parts["rc"].arg if "rc" in parts else None
        try:
            reading.domain = parse_domain(body)
        except ImexFormatError as exc:
            said = next((x.strip() for x in body if x.strip()), "no output")
            why = "timed out (killed)" if rc in ("124", "137") else f"exit {rc}" if rc not in (None, "0") else str(exc)
            reading.domain = ImexDomain(error=f"{why}: {said[:200]}" if why != str(exc) else why)
    else:
        reading.domain.error = "nvidia-imex-ctl was not run"
    return reading


def read_local(policy: ImexPolicy = ImexPolicy(), config: str = CONFIG, timeout: float = 20) -> ImexReading:
    try:
        out = local.run(command(policy, config), timeout, "the IMEX probe")
    except local.ProbeTimeout as exc:
        return ImexReading(error=str(exc))
    return parse_command_output(out.splitlines(), policy)
