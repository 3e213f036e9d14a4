"""QoS state of a node's compute netdevs, all of them in one command:
mlnx_qos or dcb output, the OFED ecn/ and qos/ files, debugfs cc_params."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost import qos_parsers

UNIT = "ccrhost-boot.service"
WANTS = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"

_PER_IF = r"""
echo "@@if $IF"
echo "@@mtu"; cat "/sys/class/net/$IF/mtu" 2>/dev/null
if command -v mlnx_qos >/dev/null 2>&1 && [ -d "/sys/class/net/$IF/qos" ]; then
  out=$(mlnx_qos -i "$IF" 2>&1); echo "@@mlnx_qos $?"; printf '%s\n' "$out"
elif command -v dcb >/dev/null 2>&1; then
  out=$(dcb -N app show dev "$IF" dscp-prio 2>&1); echo "@@dcb_app $?"; printf '%s\n' "$out"
  out=$(dcb pfc show dev "$IF" 2>&1); echo "@@dcb_pfc $?"; printf '%s\n' "$out"
  out=$(dcb buffer show dev "$IF" 2>&1); echo "@@dcb_buffer $?"; printf '%s\n' "$out"
fi
if [ -d "/sys/class/net/$IF/ecn" ]; then
  echo "@@ecn"; (cd "/sys/class/net/$IF/ecn" && grep -Hs '' roce_rp/* roce_np/* roce_rp/enable/* roce_np/enable/*)
fi
[ -r "/sys/class/net/$IF/qos/buffer_size" ] && { echo "@@ofed_buffer"; cat "/sys/class/net/$IF/qos/buffer_size"; }
[ -r "/sys/class/net/$IF/qos/prio2buffer" ] && { echo "@@ofed_prio2buffer"; cat "/sys/class/net/$IF/qos/prio2buffer"; }
pci=$(basename "$(readlink -f "/sys/class/net/$IF/device" 2>/dev/null)" 2>/dev/null)
cc="/sys/kernel/debug/mlx5/$pci/cc_params"
if [ -n "$pci" ] && [ -d "$cc" ]; then echo "@@cc_params $cc"; (cd "$cc" && grep -Hs '' *); fi
"""


class QosState(FactBase):
    """
    Returns ``{"interfaces": {ifname: {...}}, "systemd": bool, "unit_enabled": bool}``
    where each interface has ``backend`` (``ofed`` | ``upstream`` | ``none``),
    ``mtu``, ``trust``, ``dscp2prio``, ``pfc``, ``cable_len``, ``buffer_size``,
    ``prio2buffer``, ``port_buffer``, ``ecn`` ({"roce_rp/enable/3": 1, ...} or
    None), ``ofed_buffers`` (xoff/xon read-back or None), ``cc_params`` and
    ``errors``.
    """

    default = dict

    def command(self, interfaces) -> str:
        names = " ".join(shlex.quote(i) for i in interfaces)
        return (f"for IF in {names}; do {_PER_IF} done; "
                f"echo @@systemd; [ -d /run/systemd/system ] && echo running; "
                f"[ -e {WANTS} ] && echo enabled; true")

    def process(self, output):
        try:
            return parse_qos_dump(output)
        except (qos_parsers.QosFormatError, ValueError) as exc:
            raise FactProcessError(f"unexpected QoS tool output: {exc}") from exc


def _blank(name: str) -> dict:
    return {"backend": "none", "mtu": None, "trust": None, "dscp2prio": {}, "pfc": None, "cable_len": None,
            "buffer_size": None, "prio2buffer": None, "port_buffer": None, "ecn": None,
            "ofed_buffers": None, "cc_params": None, "cc_params_dir": None, "errors": []}


def parse_qos_dump(lines: list[str]) -> dict:
    interfaces: dict[str, dict] = {}
    chunks: list[tuple[str, str, list[str]]] = []
    current_if, tag, arg, body = None, None, "", []
    node = {"systemd": False, "unit_enabled": False}

    def flush():
        if current_if is not None and tag is not None:
            chunks.append((current_if, tag, arg, body))

    for line in lines:
        if line.startswith("@@"):
            flush()
            tag, _, arg = line[2:].partition(" ")
            body = []
            if tag == "if":
                current_if = arg
                interfaces[arg] = _blank(arg)
                tag = None
            elif tag == "systemd":
                current_if = None
        elif current_if is None and tag == "systemd":
            node["systemd"] |= line.strip() == "running"
            node["unit_enabled"] |= line.strip() == "enabled"
        else:
            body.append(line)
    flush()

    for name, tag, arg, body in chunks:
        st = interfaces[name]
        text = "\n".join(body)
        if tag in ("mlnx_qos", "dcb_app", "dcb_pfc", "dcb_buffer") and arg != "0":
            st["errors"].append(f"{tag.replace('_', ' ')} failed: {text.strip().splitlines()[-1] if text.strip() else arg}")
            continue
        if tag == "mtu" and text.strip():
            st["mtu"] = int(text.strip())
        elif tag == "mlnx_qos":
            q = qos_parsers.parse_mlnx_qos(text)
            st.update(backend="ofed", trust=q["trust"], dscp2prio=q["dscp2prio"], pfc=q["pfc"],
                      cable_len=q["cable_len"], buffer_size=q["buffer_size"], prio2buffer=q["prio2buffer"],
                      port_buffer=q["max_buffer_size"])
        elif tag == "dcb_app":
            st["backend"] = "upstream"
            st["dscp2prio"] = qos_parsers.parse_dcb_app_dscp(text)
            st["trust"] = "dscp" if st["dscp2prio"] else "pcp"
        elif tag == "dcb_pfc":
            pfc = qos_parsers.parse_dcb_pfc(text)
            st["pfc"], st["cable_len"] = pfc["prio_pfc"], pfc["delay"]
        elif tag == "dcb_buffer":
            buf = qos_parsers.parse_dcb_buffer(text)
            st["buffer_size"], st["prio2buffer"], st["port_buffer"] = buf["buffer_size"], buf["prio_buffer"], buf["total_size"]
        elif tag == "ecn":
            st["ecn"] = {}
            for line in body:
                path, sep, value = line.partition(":")
                if sep and value.strip().lstrip("-").isdigit():
                    st["ecn"][path] = int(value)
        elif tag == "ofed_buffer":
            parsed = qos_parsers.parse_ofed_buffer_size(text)
            st["ofed_buffers"] = parsed["buffers"]
            st["port_buffer"] = st["port_buffer"] or parsed["port_buffer_size"]
        elif tag == "ofed_prio2buffer":
            st["prio2buffer"] = st["prio2buffer"] or qos_parsers.parse_ofed_prio2buffer(text)
        elif tag == "cc_params":
            st["cc_params_dir"] = arg
            st["cc_params"] = {}
            for line in body:
                path, sep, value = line.partition(":")
                if sep and value.strip().isdigit():
                    st["cc_params"][path] = int(value)
    return {"interfaces": interfaces, **node}
