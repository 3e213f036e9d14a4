"""Fuzzing the wiring probe's parsers (as tests/test_fuzz.py does the
others): the real samples of tests/fixtures/wiring/, lines mutated, cut,
shuffled and mixed with noise. Each must give a reading or raise
WiringFormatError, never another exception."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccrhost.model import wiring as wm
from ccrhost.probes import wiring as probe

pytestmark = pytest.mark.fuzz

FIX = Path(__file__).parent / "fixtures" / "wiring"
SAMPLES = [line for f in sorted(FIX.iterdir()) if f.suffix in (".txt", ".json")
           for line in f.read_text().splitlines()]
HOSTILE = ["", "@@", "@@lldprc", "@@lldprc 0", "@@nodeinforc 0", "@@nodedescrc 0", "@@sminforc 0", "@@nodeinfo",
           "@@nodeinfo mlx5_0 1", "@@ib", "@@net", "{", "}", "[", "\u0661", "0x", "mlx5_0/ports/1/pkeys/0:0x\u0661\u0661",
           "mlx5_0/ports/x/lid:0x1", "mlx5_0/ports/1/gids/1:zz", "LocalPort:.......................\u00b2",
           "Guid:............................0x", "null", '{"lldp": []}', '{"lldp": {"interface": 3}}']


@st.composite
def mutated(draw):
    line = draw(st.sampled_from(SAMPLES))
    cut = draw(st.integers(0, len(line)))
    token = draw(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)))
    return draw(st.sampled_from([line[:cut], line[:cut] + token + line[cut:], token + line, line.replace(":", token)]))


LINES = st.lists(st.one_of(st.sampled_from(SAMPLES), st.sampled_from(HOSTILE), mutated(), st.text(max_size=20)),
                 max_size=80)


@given(LINES)
def test_the_whole_output(lines):
    try:
        reading = probe.parse_command_output(lines)
    except probe.WiringFormatError:
        return
    assert isinstance(reading, wm.WiringReading)
    for nic in reading.nics.values():
        assert nic.pkeys is None or all(0 <= k <= 0xFFFF for k in nic.pkeys)
    wm.check_wiring(reading, wm.WiringPolicy(True, (wm.RailPlan("*"),), True, 0x8001, 3),
                    wm.compute_nics([(n.device, n.port) for n in reading.nics.values()]))


@given(st.one_of(LINES.map("\n".join), st.text(max_size=200)))
def test_lldp_json(text):
    try:
        out = probe.parse_lldp_json(text)
    except probe.WiringFormatError:
        return
    assert all(isinstance(n, wm.Neighbour) for ns in out.values() for n in ns)


@given(LINES)
def test_infiniband_diags(lines):
    for parse in (probe.parse_nodeinfo, probe.parse_nodedesc, probe.parse_sminfo):
        try:
            parse(lines)
        except probe.WiringFormatError:
            pass
