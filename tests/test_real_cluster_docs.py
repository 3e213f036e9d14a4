"""What a newcomer reads before a real cluster: the checklist in
docs/getting-started.md and README's block follow it in order, the boxed
defaults are the settings' own, the "leave QoS and MTU alone" lines do
that; every pointer to a section of README or a docs page names one that
exists; "the CCR guide" is defined once and "the seed" is never named."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import textwrap
from pathlib import Path

import click
import pytest

from ccrhost.cli import main
from ccrhost.settings import HostSettings, validate_host

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGE = DOCS / "getting-started.md"


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end > 0 else None]


def checklist() -> str:
    return section(PAGE.read_text(), "## Running it on a real cluster\n")


def pyinfra_lines(text: str) -> list[str]:
    """The pyinfra commands of a text's shell blocks, continuation lines joined."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("pyinfra "):
                lines.append(" ".join(line.split()))
    return lines


def example_hosts() -> list[str]:
    """The host names of inventories/example.py, as pyinfra loads them."""
    scope: dict = {}
    exec(compile((REPO / "inventories/example.py").read_text(), "example.py", "exec"), scope)
    return list(scope["compute"][0])


# --- the order: --dry, one canary, the rest --------------------------------

@pytest.mark.parametrize("where", ["README.md", "docs/getting-started.md"])
def test_dry_comes_first_then_one_canary_then_the_rest(where):
    text = (REPO / where).read_text()
    text = checklist() if where.startswith("docs") else text[text.index("On a real cluster"):]
    dry, canary, rest = pyinfra_lines(text)[:3]
    assert dry.endswith(" deploys/rdma.py --dry") and " -y " not in dry
    assert canary.startswith("pyinfra -y ") and " --limit " in canary
    assert rest.startswith("pyinfra -y ") and "--limit" not in rest and "--dry" not in rest
    # the canary names one host of the inventory it runs on (pyinfra matches --limit with fnmatch)
    pattern = canary.split(" --limit ", 1)[1].split()[0]
    assert len([h for h in example_hosts() if fnmatch.fnmatch(h, pattern)]) == 1, pattern
    # all three run the same inventory and deploy file
    assert len({tuple(positional(c)) for c in (dry, canary, rest)}) == 1


def positional(command: str) -> list[str]:
    """A pyinfra command's inventory and deploy file (its words that are no option or option value)."""
    words, out = command.split()[1:], []
    while words:
        word = words.pop(0)
        if word == "--limit":
            words.pop(0)
        elif not word.startswith("-"):
            out.append(word)
    return out


def test_checklist_steps_in_order():
    text = checklist()
    steps = re.findall(r"^(\d+)\. \*\*(.+?)\*\*", text, re.M)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    titles = [t.lower() for _, t in steps]
    order = ["prerequisites", "copy and edit the example inventory", "leave qos and mtu alone", "`--dry` first",
             "one canary host", "then the rest"]
    assert [next(i for i, t in enumerate(titles) if want in t) for want in order] == list(range(len(order)))
    prerequisites = text[text.index("1. **Prerequisites"):text.index("2. **")]
    for what in ("driver stack", "nvidia-smi", "Root SSH", "known_hosts", "Switch QoS"):
        assert what in prerequisites, what
    # the copy commands copy what exists
    for src in re.findall(r"^\s*cp (\S+) ", text, re.M):
        assert (REPO / src).is_file(), src


# --- the boxed warning --------------------------------------------------------

def warning_box() -> str:
    text = checklist()
    start = text.index('!!! warning "')
    box = []
    for line in text[start:].splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        box.append(line[4:])
    return "\n".join(box)


def test_the_warning_states_the_settings_defaults_and_the_keys_that_change_them():
    box = warning_box()
    defaults = HostSettings()
    rows = {cells[0]: cells[1:] for cells in
            (re.split(r"\s*\|\s*", line.strip("| ")) for line in box.splitlines() if line.startswith("| ")) }
    assert "DSCP" in rows["trust"][0] and rows["trust"][1] == "`qos_enable`" and defaults.qos_enable is True
    assert rows["RoCE traffic"][0] == f"DSCP {defaults.roce_dscp}, mapped to priority {defaults.qos_roce_priority}"
    assert rows["PFC"][0] == f"on priority {defaults.qos_roce_priority} only"
    assert defaults.qos_pfc_priorities is None  # the default: only qos_roce_priority
    assert rows["ECN (DCQCN)"][0].startswith(f"on priority {defaults.qos_roce_priority}:")
    assert defaults.ecn_priorities is None  # the default: only qos_roce_priority
    assert rows["congestion notification packets (CNP)"][0] == \
        f"DSCP {defaults.qos_cnp_dscp}, mapped to priority {defaults.qos_cnp_priority}"
    assert rows["MTU of the RoCE netdevs"][0].startswith(f"{defaults.roce_mtu} ")
    for cells in rows.values():
        for key in re.findall(r"`([a-z_]+)`", cells[-1]):
            assert key in HostSettings.model_fields, key
    assert "`qos_enable = False` and `roce_mtu = None`" in box


def test_leaving_qos_and_mtu_alone_plans_no_qos_or_mtu_and_no_qos_at_boot():
    from ccrhost.model import boot
    from ccrhost.operations import tune

    text = checklist()
    block = re.search(r"alone\*\* for the first run.*?```python\n(.*?)```", text, re.S).group(1)
    data: dict = {}
    exec(textwrap.dedent(block), data)
    data = {k: v for k, v in data.items() if not k.startswith("__")}
    assert data == {"qos_enable": False, "roce_mtu": None}
    alone = validate_host("gpu-001", data)
    stages = [label for label, _ in tune._stages(alone)]
    assert "QoS" not in stages and "MTU" not in stages and "PFC headroom" not in stages
    assert {"QoS", "MTU"} <= {label for label, _ in tune._stages(HostSettings())}  # the default does both
    from ccrhost.probes.qos import QosInterface
    from ccrhost.probes.rdma import RdmaDevice, RdmaPort, RdmaReading

    rdma = RdmaReading({"mlx5_0": RdmaDevice(netdevs=["ens1np0"], ports={1: RdmaPort(
        state="ACTIVE", phys_state="LinkUp", rate_gbps=400.0, link_layer="Ethernet", netdev="ens1np0")})})
    netdevs = {"ens1np0": {"rate_gbps": 400.0, "ports": [("mlx5_0", 1)]}}
    state = {"ens1np0": QosInterface(backend="ofed", trust="pcp", pfc=[0] * 8)}
    script, _ = boot.render_boot(alone, rdma, netdevs, state)
    default_script, _ = boot.render_boot(HostSettings(), rdma, netdevs, state)
    # the default re-applies the interface's QoS at boot; with QoS left alone nothing names it
    assert "mlnx_qos -i ens1np0" in default_script and "mlnx_qos" not in script


# --- pointers to sections ------------------------------------------------------

# the README or a docs page, then the section's name in double quotes
# (after a comma, a colon or "'s", across a comment's line break)
SECTION_POINTER = re.compile(r"\b(README|docs/[a-z0-9-]+\.md)(?:'s)?\s*[,:]?[\s#]*\"([^\"\n]+)\"")
# "see" or "in (the)" and the README's name without a section: it points nowhere in particular
BARE_POINTER = re.compile(r"\b(?:see|in)\s+(?:the\s+)?README\b(?!\.md)(?![,:]?[\s#]*\")", re.I)


def headings(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {h.strip() for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def dangling(text: str) -> list[str]:
    """The pointers in ``text`` to a section its file does not have."""
    out = []
    for target, name in SECTION_POINTER.findall(text):
        path = REPO / ("README.md" if target == "README" else target)
        if not path.is_file() or name not in headings(path):
            out.append(f'{target}, "{name}"')
    out += [m.group(0) for m in BARE_POINTER.finditer(text)]
    return out


def shipped_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in listed:
        path = REPO / name
        if name.startswith(("tests/fixtures/", "tests/golden/")) or not path.is_file():
            continue
        try:
            path.read_text()
        except UnicodeDecodeError:
            continue
        out.append(path)
    return out


def test_the_pointer_check_catches_a_dangling_pointer():
    ref = "READ" + "ME"  # spelled apart so that this file itself holds no pointer
    assert dangling(f'keys: {ref}, "Inventory keys".') == [f'{ref}, "Inventory keys"']
    assert dangling(f'# tested ({ref},\n# "Test your changes in CI")') == [f'{ref}, "Test your changes in CI"']
    assert dangling(f"flags (dp, ...; see {ref}) or gpu") == [f"see {ref}"]
    lab = "docs/" + "lab.md"
    assert dangling(f'Fields: {lab}, "No such section".') == [f'{lab}, "No such section"']
    assert dangling(f'{ref}, "Quickstart" and {lab}, "Lab profiles"; {ref}.md') == []


def test_no_file_points_to_a_section_that_does_not_exist():
    found = {str(p.relative_to(REPO)): d for p in shipped_text_files() if (d := dangling(p.read_text()))}
    assert found == {}


def every_help(command: click.Command, path: tuple[str, ...] = ()):
    ctx = click.Context(command, info_name=" ".join(("ccrhost", *path)))
    yield path, command.get_help(ctx)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from every_help(sub, (*path, name))


def test_no_help_text_points_to_a_missing_section():
    helps = dict(every_help(main))
    assert ("calc",) in helps and "--sweep" in helps[("calc",)]
    assert {" ".join(p): d for p, text in helps.items() if (d := dangling(text))} == {}
    # calc's --sweep points at its own Workload options: each key it takes is one
    from ccrhost.whatif import HARDWARE_KEYS, SWEEP_KEYS

    calc = main.commands["calc"]
    options = {o.opts[0].removeprefix("--"): o for o in calc.params if isinstance(o, click.Option)}
    for key in SWEEP_KEYS:
        assert key in options, key
        assert key in HARDWARE_KEYS or options[key].help.startswith("Workload:"), key
    sweep = " ".join(options["sweep"].help.split())
    assert "the options marked Workload above" in sweep


# --- the CCR guide ---------------------------------------------------------------

# "the seed", "the seed's", "the seed guide": the project's name for its source, never a reader's
SEED = re.compile(r"\bthe seed\b|\bseed's\b|\bseed guide\b", re.I)


def test_the_ccr_guide_is_defined_once_and_the_seed_never_named():
    definition = DOCS / "ccr-model.md"
    assert "## The CCR guide" in definition.read_text()
    defined = [p.name for p in DOCS.glob("*.md") if re.search(r"^## The CCR guide$", p.read_text(), re.M)]
    assert defined == ["ccr-model.md"]
    text = section(definition.read_text(), "## The CCR guide\n")
    assert "calculate_ccr()" in text and "by carzy" in text  # names the source and what comes from it
    generated = {"reasons.md", "settings.md"}  # from the code's own text, which a terminal also prints
    for page in DOCS.glob("*.md"):
        body = page.read_text()
        assert not SEED.search(body), page.name
        if page.name not in generated | {"ccr-model.md"} and re.search(r"CCR guide", body):
            assert "(ccr-model.md#the-ccr-guide)" in body, page.name
    # nor in what ships: the code (its output), templates, inventories, deploy files, examples
    for path in shipped_text_files():
        if not str(path.relative_to(REPO)).startswith("tests/"):
            assert not SEED.search(path.read_text()), path
    assert SEED.search("The seed judges a tuned cluster") and not SEED.search("with a fresh seed each time")


def test_calc_names_the_ccr_guide_not_the_seed():
    from click.testing import CliRunner

    out = CliRunner().invoke(main, ["calc", "--gpu", "H100 SXM", "--gpus", "8", "--nics", "8", "--nic-gbps", "400"])
    assert out.exit_code == 0, out.output
    assert "the CCR guide's calculate_ccr()" in out.output and "seed" not in out.output
    out = CliRunner().invoke(main, ["calc", "--gpu", "H100 SXM", "--gpus", "8", "--nics", "8", "--nic-gbps", "400",
                                    "--format", "json"])
    assert '"beta_source": "guide"' in out.output and "seed" not in out.output
