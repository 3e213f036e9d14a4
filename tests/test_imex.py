"""IMEX on a rack-scale NVLink tray: nvidia-imex-ctl -N parsed from verbatim
samples (tests/fixtures/imex/README.md) and judged (model/imex.py).

The faulty domains are the verbatim 18-node sample with cells and lines
edited to the symbols the tool's own legend lists (said where done)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccrhost.model import imex as m
from ccrhost.probes import imex as probe

FIX = Path(__file__).parent / "fixtures" / "imex"
AWS = "aws_pcs_capacity_blocks_18_nodes_up.txt"
NODE5, NODE10 = "172.31.50.44", "172.31.54.95"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


def edited(cells: dict[tuple[int, int], str] = {}, status: dict[int, str] = {}, version: dict[int, str] = {},
           state: str | None = None) -> list[str]:
    """The verbatim AWS sample with cells, node statuses, versions or the Domain State line replaced."""
    out = []
    for line in lines(AWS):
        words = line.split()
        if line.startswith("Node #") and int(words[1][1:]) in status:
            line = line.replace("READY", status[int(words[1][1:])])
        if line.startswith("Node #") and int(words[1][1:]) in version:
            line = line.replace("570.172", version[int(words[1][1:])])
        if words and words[0].isdigit() and line.startswith("  "):
            row = int(words[0])
            row_cells = [cells.get((row, to), c) for to, c in enumerate(words[1:])]
            line = f"{row:>8}        " + "   ".join(row_cells)
        if line.startswith("Domain State:") and state is not None:
            line = f"Domain State: {state}"
        out.append(line)
    return out


def reading(text: list[str], addresses=(NODE10,), unit="active", channel=True) -> m.ImexReading:
    return m.ImexReading(unit=unit, channel=channel, addresses=tuple(addresses), domain=probe.parse_domain(text))


def codes(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.code) for r in reasons]


# --- the parser ---------------------------------------------------------------------

def test_the_aws_pcs_sample_parses_whole():
    d = probe.parse_domain(lines(AWS))
    assert d.state == "UP"
    assert len(d.nodes) == 18 and all(n.status == "READY" and n.version == "570.172" for n in d.nodes)
    assert d.nodes[10] == m.ImexNode(10, NODE10, "READY", "570.172")
    assert len(d.table) == 18 * 18 and set(d.table.values()) == {"C"}


def test_an_older_daemon_without_versions_parses():
    d = probe.parse_domain(lines("dra_driver_single_node_no_version.txt"))
    assert d.nodes == [m.ImexNode(0, "10.136.206.48", "READY", None)]
    assert d.table == {"0,0": "C"} and d.cell(0, 0) == "C" and d.state == "UP"


def test_a_line_the_tool_never_prints_is_refused_naming_it():
    with pytest.raises(probe.ImexFormatError, match="a line nvidia-imex-ctl -N does not print: 'garbage here'"):
        probe.parse_domain([*lines(AWS)[:3], "garbage here"])


def test_a_short_row_is_refused():
    text = [ln if not ln.startswith("       3 ") else "       3        C   C" for ln in lines(AWS)]
    with pytest.raises(probe.ImexFormatError, match="2 cells for 18 nodes"):
        probe.parse_domain(text)


def _probe_output(imex: list[str], rc="0", unit="active", channel="present", addresses=NODE10) -> list[str]:
    return ["@@unit", unit, f"@@channel {channel}", "@@addresses", f"{addresses} 10.0.0.5 ", "@@imexctl", *imex,
            f"@@rc {rc}"]


def test_the_probe_output_parses_into_one_reading():
    r = probe.parse_command_output(_probe_output(lines(AWS)))
    assert (r.unit, r.channel, r.addresses) == ("active", True, (NODE10, "10.0.0.5"))
    assert r.domain.state == "UP" and m.check_imex(r, m.ImexPolicy()) == []


def test_the_tool_failing_is_unknown_with_its_words():
    r = probe.parse_command_output(_probe_output(["Failed to connect to the IMEX daemon"], rc="1"))
    assert r.domain.error == "exit 1: Failed to connect to the IMEX daemon"
    assert codes(m.check_imex(r, m.ImexPolicy())) == [("UNKNOWN", "imex_unreadable")]


def test_a_hung_tool_is_unknown():
    r = probe.parse_command_output(_probe_output([], rc="124"))
    assert r.domain.error == "timed out (killed): no output"


def test_no_tool_and_no_output():
    r = probe.parse_command_output(["@@unit", "inactive", "@@channel missing", "@@addresses", "",
                                    "@@imexerror", "nvidia-imex-ctl not found"])
    assert codes(m.check_imex(r, m.ImexPolicy())) == [
        ("FAIL", "imex_unit_inactive"), ("FAIL", "imex_channel_missing"), ("UNKNOWN", "imex_unreadable")]
    assert m.check_imex(probe.parse_command_output([]), m.ImexPolicy())[0].message == \
        "the IMEX probe's output could not be read: no output"


def test_the_command_quotes_the_settings_paths():
    cmd = probe.command(m.ImexPolicy(unit="nvidia-imex", channel="/dev/nvidia-caps-imex-channels/channel0"),
                        "/etc/nvidia-imex/config.cfg")
    assert "[ -c /dev/nvidia-caps-imex-channels/channel0 ]" in cmd
    assert "nvidia-imex-ctl -N -c /etc/nvidia-imex/config.cfg" in cmd
    assert "systemctl is-active nvidia-imex" in cmd


# --- the judge ----------------------------------------------------------------------

def test_domain_down_fails_naming_its_state():
    reasons = m.check_imex(reading(edited(state="DOWN")), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_domain_down")]
    assert reasons[0].message == "IMEX Domain State: DOWN, not UP"


def test_a_degraded_domain_is_this_trays_fault_only_where_its_own_row_says_so():
    # every tray sees one state: a lost peer degrades the domain for all; this tray reaches every peer
    reasons = m.check_imex(reading(edited(state="DEGRADED")), m.ImexPolicy())
    assert codes(reasons) == [("WARN", "imex_peer_down")]
    assert reasons[0].message.startswith("IMEX Domain State: DEGRADED: this tray is READY and reaches every peer")
    # this tray (#10) lost a peer itself
    reasons = m.check_imex(reading(edited(state="DEGRADED", cells={(10, 3): "D", (3, 10): "D"})), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_domain_down"), ("FAIL", "imex_peer_disconnected")]
    # this tray is not READY
    reasons = m.check_imex(reading(edited(state="DEGRADED", status={10: "UNAVAILABLE"})), m.ImexPolicy())
    assert ("FAIL", "imex_domain_down") in codes(reasons)


def test_no_domain_state_line_is_unknown():
    text = [ln for ln in lines(AWS) if not ln.startswith("Domain State")]
    assert codes(m.check_imex(reading(text), m.ImexPolicy())) == [("UNKNOWN", "imex_unreadable")]


def test_a_peer_disconnected_from_this_node_only_fails_naming_the_peer():
    # this node (#10) and node #3 lost each other; the rest of the domain still reaches both
    reasons = m.check_imex(reading(edited(cells={(10, 3): "D", (3, 10): "D"})), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_peer_disconnected")]
    assert reasons[0].message == ("IMEX connectivity: 1 pair(s) not connected: node #3 (172.31.49.228) - "
                                  "node #10 (172.31.54.95): D (Disconnected)")


def test_a_tray_cut_off_fails_itself_once_and_only_warns_the_others():
    cut = {**{(5, j): "N" for j in range(18)}, **{(i, 5): "N" for i in range(18)}}
    mine = m.check_imex(reading(edited(cells=cut), addresses=(NODE5,)), m.ImexPolicy())
    assert codes(mine) == [("FAIL", "imex_peer_disconnected")]
    assert mine[0].message.startswith("IMEX connectivity: 18 pair(s) not connected: node #0 (172.31.48.81) - "
                                      "node #5 (172.31.50.44): N (Never Connected); ")
    assert mine[0].message.endswith("; and 14 more")
    other = m.check_imex(reading(edited(cells=cut)), m.ImexPolicy())
    assert codes(other) == [("WARN", "imex_peer_down")]
    assert "node #5 (172.31.50.44) - node #10 (172.31.54.95): N (Never Connected)" in other[0].message


def test_a_link_between_two_other_trays_is_not_this_nodes():
    assert m.check_imex(reading(edited(cells={(1, 2): "D"})), m.ImexPolicy()) == []


def test_without_its_own_address_every_cell_is_judged():
    reasons = m.check_imex(reading(edited(cells={(1, 2): "D"}), addresses=()), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_peer_disconnected")]


def test_node_map_mismatch_cell_fails_once():
    reasons = m.check_imex(reading(edited(cells={(10, 4): "!M!", (10, 7): "!M!"})), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_nodemap_mismatch")]
    assert "!M! (Node map mismatch, communication disabled)" in reasons[0].message


def test_this_node_missing_from_the_node_map_fails():
    reasons = m.check_imex(reading(lines(AWS), addresses=("10.9.9.9",)), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_nodemap_mismatch")]
    assert reasons[0].message.startswith("none of this node's addresses (10.9.9.9) is in the IMEX node map")


def test_version_mismatch_cell_and_versions():
    assert codes(m.check_imex(reading(edited(cells={(10, 2): "!V!"})), m.ImexPolicy())) == [
        ("FAIL", "imex_version_mismatch")]
    # this node runs another version than the 17 others
    reasons = m.check_imex(reading(edited(version={10: "580.65"})), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_version_mismatch")]
    assert reasons[0].message == ("IMEX versions differ: node #10 (172.31.54.95) 580.65 (the others 570.172)")
    # another tray is the odd one: its own check says so, not this one's
    assert m.check_imex(reading(edited(version={3: "580.65"})), m.ImexPolicy()) == []


def test_this_node_not_ready_fails():
    reasons = m.check_imex(reading(edited(status={10: "UNAVAILABLE"})), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_node_not_ready")]
    assert reasons[0].message == "IMEX node #10 (172.31.54.95) is UNAVAILABLE, not READY"


def test_a_cell_the_legend_lacks_is_unknown():
    reasons = m.check_imex(reading(edited(cells={(10, 1): "X"})), m.ImexPolicy())
    assert codes(reasons) == [("UNKNOWN", "imex_unreadable")]


def test_unit_and_channel():
    reasons = m.check_imex(reading(lines(AWS), unit="failed", channel=False), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_unit_inactive"), ("FAIL", "imex_channel_missing")]
    assert reasons[0].message == "the nvidia-imex unit is failed, not active"
    assert reasons[1].message.startswith("/dev/nvidia-caps-imex-channels/channel0 is not a character device")


def test_settings_build_the_policy():
    from ccrhost.settings import validate_host

    s = validate_host("gpu01", {"imex_enable": True, "imex_unit": "imex-custom", "imex_rack": "rack-a"})
    assert s.imex_policy() == m.ImexPolicy(True, "imex-custom", "/dev/nvidia-caps-imex-channels/channel0")
    with pytest.raises(Exception, match="imex_rack"):
        validate_host("gpu01", {"imex_rack": "rack a"})


def test_a_tray_with_another_node_map_or_version_fails_itself_and_only_warns_the_others():
    for bad in ("!M!", "!V!"):
        odd = {**{(5, j): bad for j in range(18) if j != 5}, **{(i, 5): bad for i in range(18) if i != 5}}
        code = "imex_nodemap_mismatch" if bad == "!M!" else "imex_version_mismatch"
        assert codes(m.check_imex(reading(edited(cells=odd), addresses=(NODE5,)), m.ImexPolicy())) == [("FAIL", code)]
        other = m.check_imex(reading(edited(cells=odd)), m.ImexPolicy())  # node #10's view
        assert codes(other) == [("WARN", "imex_peer_down")], bad
        assert f"node #5 (172.31.50.44) - node #10 (172.31.54.95): {bad}" in other[0].message


def test_an_odd_version_is_one_reason_from_the_node_list_and_the_cells_alike():
    cells = {**{(10, j): "!V!" for j in range(18) if j != 10}, **{(i, 10): "!V!" for i in range(18) if i != 10}}
    reasons = m.check_imex(reading(edited(version={10: "580.65"}, cells=cells)), m.ImexPolicy())
    assert codes(reasons) == [("FAIL", "imex_version_mismatch")]
