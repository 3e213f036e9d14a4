"""A lab that stands in for a site's own inventory.

``ccrhost lab up --inventory INVENTORY.py`` boots one lab node per host (or
the first N of each group), each from the profile given for its group, and
writes a lab inventory next to the lab: a file of the same name (so the
inventory's file group keeps its name), a ``group_data`` link to the site's
own folder, and a map of host -> lab node. pyinfra runs it with the site's
data unchanged: the lab inventory executes the site's file on every run and
changes only where each host is reached (``ssh_hostname`` and the lab's key
and known_hosts). Host names stay the site's, so every report names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ccrhost.lab.fleet import Lab, LabError
from ccrhost.lab.profile import ProfileError, load_profile

MAP_FILE = "lab-inventory.json"
INVENTORY_DIR = "inventory"


@dataclass
class Placement:
    host: str           # the inventory's host name
    groups: list[str]   # its groups, as pyinfra makes them (file group and "all" left out)
    profile: str        # the profile file its lab node boots from
    node: str = ""      # the lab node
    address: str = ""   # ... and its address


# Run in a child Python: an inventory is the site's code, and importing
# pyinfra_cli monkey-patches the whole process for gevent. The child prints
# what plan() needs, hosts and their groups in pyinfra's order.
_LOADER = """
import json, os, sys
from pyinfra_cli.inventory import make_inventory_from_files
from pyinfra.api import State
from pyinfra.context import ctx_state
try:
    with ctx_state.use(State()):
        inv = make_inventory_from_files(sys.argv[1], cwd=os.getcwd())
except SystemExit as exc:
    out = {"exit": exc.code if isinstance(exc.code, int) else 1}
except Exception as exc:
    out = {"error": str(exc)}
else:
    out = {"hosts": [h.name for h in inv],
           "groups": {g: [h.name for h in members] for g, members in inv.groups.items()}}
sys.stdout.write("\\n@@ccrhost-inventory " + json.dumps(out) + "\\n")
"""


@dataclass
class LoadedInventory:
    hosts: list[str]              # host names, in the inventory's order
    groups: dict[str, list[str]]  # group -> its hosts, pyinfra's groups ("all" and the file group included)


def _load(inventory: str) -> LoadedInventory:
    """pyinfra's own reading of the inventory, group_data included."""
    path = Path(inventory)
    if not path.is_file():
        raise LabError(f"inventory {inventory!r} does not exist")
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(path)], capture_output=True, text=True,
                          cwd=os.getcwd(), timeout=120)
    # the site's inventory may print; what ccrhost reads is its own last line
    mark = "@@ccrhost-inventory "
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith(mark)), None)
    if line is None:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise LabError(f"inventory {inventory} cannot be read: {why}")
    out = json.loads(line[len(mark):])
    if "exit" in out:  # ccrhost.inventory.require_hosts on an empty group, after saying why
        sys.stderr.write(proc.stderr)
        raise LabError(f"inventory {inventory} stopped with exit code {out['exit']}")
    if "error" in out:
        raise LabError(f"inventory {inventory} cannot be read: {out['error']}")
    return LoadedInventory(out["hosts"], out["groups"])


def plan(inventory: str, profiles: dict[str, str], per_group: int | None = None) -> list[Placement]:
    """Which hosts get a lab node and from which profile; every problem is
    found before anything starts."""
    inv = _load(inventory)
    file_group = Path(inventory).name.rsplit(".", 1)[0]
    hosts = inv.hosts
    if not hosts:
        raise LabError(f"inventory {inventory}: no hosts")
    groups = {name: members for name, members in inv.groups.items() if name not in ("all", file_group)}
    unknown = sorted(set(profiles) - set(groups) - {"all", file_group})
    if unknown:
        raise LabError(f"--profile {unknown[0]}=...: the inventory has no group {unknown[0]!r}; "
                       f"groups: {', '.join(sorted(groups)) or '(none)'}")
    for group, path in profiles.items():
        try:
            load_profile(path)
        except ProfileError as exc:
            raise LabError(f"--profile {group}={path}: {exc}") from None
    chosen = set(hosts)
    if per_group is not None:
        chosen = {name for members in groups.values() for name in members[:per_group]}
        chosen |= {h for h in hosts if not any(h in m for m in groups.values())}
    out, problems = [], []
    for host in hosts:
        if host not in chosen:
            continue
        mine = [g for g in groups if host in groups[g]]
        picks = {profiles[g] for g in mine if g in profiles}
        if len(picks) > 1:
            problems.append(f"{host}: its groups {', '.join(g for g in mine if g in profiles)} give "
                            f"different profiles ({', '.join(sorted(picks))})")
            continue
        pick = picks.pop() if picks else profiles.get(file_group) or profiles.get("all")
        if pick is None:
            problems.append(f"{host} (groups: {', '.join(mine) or 'none'}): no --profile for any of its groups "
                            "(give GROUP=FILE, or all=FILE for every host)")
            continue
        out.append(Placement(host, mine, pick))
    if problems:
        raise LabError("cannot place every host on a lab node:\n  " + "\n  ".join(problems))
    return out


def up(inventory: str, profiles: dict[str, str], per_group: int | None = None, directory=None,
       name: str = "lab", subnet: int = 0, link_mbit: int = 200) -> tuple[Lab, list[Placement], Path]:
    """Boot the lab for ``inventory`` and write its lab inventory; returns
    the lab, the placements and the lab inventory's path."""
    placements = plan(inventory, profiles, per_group)
    lab = Lab(directory)
    running = lab.load()
    if running is not None:  # never reuse: the nodes must start as powered on
        raise LabError(f"a lab is already running in {lab.dir} ({len(running.nodes)} nodes); "
                       "run `ccrhost lab down` first")
    nodes = {f"node{i}": p for i, p in enumerate(placements, start=1)}
    state = lab.up(len(placements), placements[0].profile, {}, name=name, subnet=subnet,
                   profiles={n: p.profile for n, p in nodes.items()}, link_mbit=link_mbit)
    try:
        for node in state.nodes:
            nodes[node.name].node, nodes[node.name].address = node.name, node.address
        path = write_inventory(lab, inventory, placements)
    except BaseException:
        lab.down()
        raise
    return lab, placements, path


def write_inventory(lab: Lab, inventory: str, placements: list[Placement]) -> Path:
    source = Path(inventory).resolve()
    folder = lab.dir / INVENTORY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    group_data = source.parent / "group_data"
    link = folder / "group_data"
    if link.is_symlink() or link.exists():
        link.unlink()
    if group_data.is_dir():
        link.symlink_to(group_data)
    (folder / MAP_FILE).write_text(json.dumps({
        "source": str(source), "lab_dir": str(lab.dir.resolve()),
        "hosts": {p.host: asdict(p) for p in placements},
    }, indent=2))
    path = folder / source.name
    path.write_text(
        f"# Written by `ccrhost lab up --inventory {source}`.\n"
        "# The lab nodes standing in for that inventory's hosts: host names, groups and\n"
        "# data are read from it (and its group_data/) on every run; only the connection\n"
        "# points at the lab. The host -> lab node map is in lab-inventory.json.\n"
        "from ccrhost.lab.from_inventory import lab_groups as _lab_groups\n\n"
        "globals().update(_lab_groups(__file__))\n")
    return path


def _connection(lab_dir: Path, placement: dict) -> dict:
    return {
        "ssh_hostname": placement["address"],
        "ssh_port": 22,
        "ssh_user": "root",
        "ssh_key": str(lab_dir / "client_key"),
        "ssh_known_hosts_file": str(lab_dir / "known_hosts"),
        "ssh_strict_host_key_checking": "yes",
        # the site's ~/.ssh/config (proxies, other users) is for the real hosts
        "ssh_config_file": os.devnull,
        "lab_node": placement["node"],
    }


def lab_groups(lab_inventory: str) -> dict:
    """The site inventory's groups, for the lab: hosts without a lab node
    left out, every other host's data kept with the connection replaced."""
    from pyinfra_cli.util import exec_file

    folder = Path(lab_inventory).resolve().parent
    meta = json.loads((folder / MAP_FILE).read_text())
    placed, lab_dir = meta["hosts"], Path(meta["lab_dir"])

    def host(item):
        name, data = (item[0], dict(item[1])) if isinstance(item, tuple) else (item, {})
        if name not in placed:
            return None
        return (name, {**data, **_connection(lab_dir, placed[name])})

    def group(value):
        hosts, data = value if isinstance(value, tuple) else (value, None)
        kept = [h for h in (host(item) for item in hosts) if h is not None]
        return kept if data is None else (kept, data)

    attrs = exec_file(meta["source"], return_locals=True)
    out = {}
    for key, value in attrs.items():
        if key.startswith("_"):
            continue
        members = value[0] if isinstance(value, tuple) and value else value
        if isinstance(value, (list, tuple)) and isinstance(members, list) and \
                all(isinstance(i, (str, tuple)) for i in members):
            out[key] = group(value)
    missing = sorted(set(placed) - {h[0] for v in out.values() for h in (v[0] if isinstance(v, tuple) else v)})
    if missing:
        raise LabError(f"{meta['source']} no longer lists {', '.join(missing)}, which the lab was started for; "
                       "run `ccrhost lab up --inventory` again")
    return out
