"""Lab mlxconfig / mstconfig over each NIC's emulated firmware state
(ccrhost/lab/nicfw.py writes it at power-on; a boot makes Next Boot Current).

Covers ``-d <bdf> [-e] q|query`` and ``-d <bdf> [-y] set NAME=VALUE ...``,
printing as mstflint's mlxconfig/mlxcfg_ui.cpp does (2026: printOpening's
device header, printConfHeader's ``Configurations:`` line, printSingleParam's
rows: ``*`` where Next Boot differs from Default or Current, the name
``%-48s``, each value ``%-33s`` and one space after a value that fills its
column (PRINT_SPACE_IF_NEEDED), ``-E-`` errors, "Please reboot machine to
load new configurations."). A set refuses, before writing anything, a parameter the
device does not list and a value outside its aliases or range, as the real
tool does. MAX_ACC_OUT_READ is listed (and settable) only while
ADVANCED_PCI_SETTINGS is on, in Current or in the same set.
"""

import marshal
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import labkernel  # noqa: E402

NAME_WIDTH = 56   # mlxcfg_ui.cpp CONFIG_TABLE_NAME_WIDTH: "Configurations:" and a row's prefix and name
VALUE_WIDTH = 33  # CONFIG_TABLE_VALUE_WIDTH (MLXCFG_BYTES_MAX_HEX_DISPLAY_BYTES * 2 + 1)


def fail(message: str):
    sys.stdout.write(f"-E- {message}\n")
    sys.exit(1)


def _path(bdf: str) -> str:
    return os.path.join(labkernel.node()["dir"], "firmware", f"{bdf}.marshal")


def device(arg: str) -> str:
    """The NIC's full PCI address; mlxconfig takes it with or without the domain."""
    full = arg if arg.count(":") == 2 else f"0000:{arg}"
    for nic in labkernel.node()["nics"]:
        if nic.get("pci", "").lower() == full.lower():
            return nic["pci"]
    fail(f"Failed to open device: {arg}. No such file or directory")


def text(spec, value: int) -> str:
    aliases = spec[0]
    if aliases:
        name = next((k for k, v in aliases.items() if v == value), "UNKNOWN")
        return f"{name}({value})"
    return str(value)


def visible(state: dict, names) -> list:
    hidden = state["current"].get("ADVANCED_PCI_SETTINGS") == 0
    return [n for n in names if not (hidden and n == "MAX_ACC_OUT_READ")]


def header(bdf: str, tool: str) -> str:
    return ("\nDevice #1:\n----------\n\n" + f"{'Device type:':<20}{'ConnectX7':<20}\n" + f"{'Name:':<20}{'N/A':<20}\n"
            + f"{'Description:':<20}{'N/A':<20}\n" + f"{'Device:':<20}{bdf:<20}\n\n")


def conf_header(columns) -> str:
    """printConfHeader: "Next Boot" last, "New" after it."""
    line = f"{'Configurations:':<{NAME_WIDTH}}"
    for c in columns:
        line += f" {c:<{VALUE_WIDTH}}" if c == "New" else f"{c:<{VALUE_WIDTH}}" + (" " if c != "Next Boot" else "")
    return line


def row(mark: str, name: str, cells) -> str:
    """printSingleParam: a value that fills its column gets one space, others none."""
    line = f"{mark}       {name:<48}"
    width = 0
    for i, cell in enumerate(cells):
        if i and width >= VALUE_WIDTH:
            line += " "
        padded = f"{cell:<{VALUE_WIDTH}}"
        line, width = line + padded, len(padded)
    return line


def query(bdf: str, state: dict, extended: bool, tool: str) -> str:
    cols = ("Default", "Current", "Next Boot") if extended else ("Next Boot",)
    out = [header(bdf, tool), conf_header(cols)]
    for name in visible(state, state["params"]):
        spec = state["params"][name]
        default, current, nxt = spec[3], state["current"][name], state["next"][name]
        mark = "*" if extended and (nxt != default or nxt != current) else " "
        values = (default, current, nxt) if extended else (nxt,)
        out.append(row(mark, name, [text(spec, v) for v in values]))
    if any(line.startswith("*") for line in out):
        out.append("The '*' shows parameters with next value different from default/current value.")
    return "\n".join(out) + "\n"


def value_of(spec, name: str, given: str) -> int:
    aliases, lo, hi, _ = spec
    for k, v in (aliases or {}).items():
        if given.lower() == k.lower():
            return v
    if given.isdigit() and lo <= int(given) <= hi and (not aliases or int(given) in aliases.values()):
        return int(given)
    fail(f"Cannot set the value {given} for the parameter {name}: Unknown value {given}")


def main(tool: str) -> None:
    args = sys.argv[1:]
    dev = extended = yes = None
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-d", "--dev") and i + 1 < len(args):
            dev, i = args[i + 1], i + 2
            continue
        if a in ("-e", "--enable_verbosity"):
            extended = True
        elif a in ("-y", "--yes"):
            yes = True
        elif a.startswith("-"):
            fail(f"Invalid Option: {a}")  # the lab's tool covers -d, -e, -y
        else:
            rest.append(a)
        i += 1
    if not dev or not rest:
        fail("missing device or command (lab mlxconfig: -d <bdf> [-e] q | -d <bdf> [-y] set NAME=VALUE ...)")
    bdf = device(dev)
    with open(_path(bdf), "rb") as f:
        state = marshal.load(f)
    command, params = rest[0], rest[1:]
    if command in ("q", "query"):
        labkernel.output(tool, query(bdf, state, bool(extended), tool))
        return
    if command != "set" or not params:
        fail(f"Unknown command: {' '.join(rest)}" if command != "set" else "No parameters to set")
    wanted = {}
    for p in params:
        name, eq, given = p.partition("=")
        if not eq:
            fail(f"Syntax error in: {p}")
        if name not in state["params"]:
            fail(f"Unknown Parameter {name}")
        wanted[name] = value_of(state["params"][name], name, given)
    advanced = wanted.get("ADVANCED_PCI_SETTINGS", state["current"]["ADVANCED_PCI_SETTINGS"])
    if "MAX_ACC_OUT_READ" in wanted and not advanced:
        fail("The Device doesn't support MAX_ACC_OUT_READ parameter")
    rows = [conf_header(("Next Boot", "New"))]
    for name, v in wanted.items():
        spec = state["params"][name]
        rows.append(row(" ", name, [text(spec, state["next"][name]), text(spec, v)]))
    sys.stdout.write(header(bdf, tool) + "\n".join(rows) + "\n\n")
    if not yes:
        answer = sys.stdin.readline().strip().lower() if not sys.stdin.isatty() else input()
        if answer not in ("y", "yes"):
            sys.stdout.write(" Apply new Configuration? (y/n) [n] : N\n")
            fail("Aborted by user.")
    else:
        sys.stdout.write(" Apply new Configuration? (y/n) [n] : y\n")
    state["next"].update(wanted)
    tmp = _path(bdf) + ".tmp"
    with open(tmp, "wb") as f:
        marshal.dump(state, f)
    os.replace(tmp, _path(bdf))
    sys.stdout.write("Applying... Done!\n-I- Please reboot machine to load new configurations.\n")
