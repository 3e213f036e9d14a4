"""Codes wherever a person reads a verdict (issue 35): `ccrhost check`'s
text and nhc output, the Slurm drain reason (codes first, within what
Slurm keeps), `ccrhost explain` on a pasted line, and `slurm verify`'s
verdict for a node its prolog drained."""

import pytest
from test_checks import H100, healthy, port

from ccrhost.cli import entry
from ccrhost.fleet.slurm_check import drained_verdict
from ccrhost.fleet.slurm_client import SlurmNode
from ccrhost.model import drain_reason as drain_text
from ccrhost.model import reasons
from ccrhost.model import verdict_line
from ccrhost.model.status import Reason
from ccrhost.model.verdict import evaluate, unjudged
from ccrhost.node import check as node_check
from ccrhost.node import formats


def failing():
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    return evaluate(healthy(ports=ports), H100)


def test_text_output_names_each_reasons_code():
    text = formats.format_text(failing())
    # each line: level, code, message, then the reason's action and part (issue 40)
    assert "  FAIL: port_down: port mlx5_3/1 is DOWN/Disabled [reseat_cable: port mlx5_3/1]\n" in text
    assert "  FAIL: port_count: 7 active compute ports, expected 8 [investigate: node]\n" in text


def test_nhc_output_names_the_codes_first():
    line = formats.format_nhc(failing())
    assert line == ("ERROR: ccrhost: Health check failed: FAIL: port_down,port_count,ccr_below_expected: "
                    f"{failing().summary()} [action investigate]\n")
    warn = unjudged("WARN", "gpu_throttled", "GPU 0 SM clock 1188/1980 MHz (HW slowdown)")
    assert formats.format_nhc(warn) == (
        "WARNING: ccrhost: gpu_throttled: GPU 0 SM clock 1188/1980 MHz (HW slowdown) [action investigate]\n")


def test_drain_reason_codes_first_and_within_slurms_255_bytes():
    verdict = failing()
    reason = drain_text.drain_reason(verdict)
    assert reason.startswith("ccrhost: port_down,port_count,ccr_below_expected: port mlx5_3/1 is DOWN/Disabled; ")
    # a long message is cut, never the codes; the cut keeps whole UTF-8 characters
    long = unjudged("FAIL", "acs_redirect", "ACS redirect on at bridge " + "é" * 400)
    cut = drain_text.drain_reason(long)
    assert cut.startswith("ccrhost: acs_redirect: ACS redirect on at bridge ")
    assert len(cut.encode()) <= 255 and cut.encode().decode() == cut
    # so many codes that they alone would not fit: the first ones, and how many more
    many = unjudged("FAIL", "port_down", "x")
    many.reasons = [Reason("FAIL", code, "m") for code in sorted(c for c, d in reasons.REGISTRY.items()
                                                                  if d.level == "FAIL")]
    head = drain_text.drain_reason(many)
    parsed = drain_text.parse_drain_reason(head)
    assert len(head.encode()) <= 255 and parsed.more > 0
    # worst first in the order they came, what to replace leading (issue 40)
    order = sorted((r.code for r in many.reasons), key=lambda c: c not in verdict_line.REPLACE_CODES)
    assert list(parsed.codes) == order[:len(parsed.codes)]
    assert len(parsed.codes) + parsed.more == len(many.reasons)


def test_drain_reason_reads_back_as_slurm_shows_it():
    reason = drain_text.drain_reason(failing())
    parsed = drain_text.parse_drain_reason(reason + " [root@2026-12-05T08:00:00]")
    assert parsed.status == "FAIL" and parsed.codes == ("port_down", "port_count", "ccr_below_expected")
    assert drain_text.parse_drain_action(reason + " [root@2026-12-05T08:00:00]") == ("investigate", [])
    unknown = node_check.unknown("gpu_unreadable", "cannot read GPUs: nvidia-smi did not answer within 20 s")
    text = drain_text.drain_reason(unknown)
    assert text == ("ccrhost: gpu_unreadable: UNKNOWN: cannot read GPUs: nvidia-smi did not answer within 20 s "
                    "[action investigate]")
    assert drain_text.parse_drain_reason(text).status == "UNKNOWN"
    # an operator's reason, an older ccrhost's (no codes), a code this ccrhost does not know
    for other in ("hw ticket 42", "ccrhost: port mlx5_0/1 is DOWN/Disabled", "ccrhost: UNKNOWN: cannot read GPUs",
                  "ccrhost: measured: ports mlx5_0/1", "ccrhost: no_such_code: x"):
        assert drain_text.parse_drain_reason(other) is None, other


def run_explain(capsys, *args):
    with pytest.raises(SystemExit) as done:
        entry(["explain", *args])
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_explain_takes_a_pasted_sinfo_line_and_explains_each_code(capsys):
    line = ("ccrhost: ACS_REDIRECT,port_down: PCIe ACS redirect is on  root  2026-12-05T08:00:00 node2")
    code, out, _ = run_explain(capsys, line)
    assert code == 0
    assert out == reasons.entry_text(reasons.REGISTRY["acs_redirect"]) + "\n" + \
        reasons.entry_text(reasons.REGISTRY["port_down"])
    # unquoted, as a shell splits it; each code once
    code, out, _ = run_explain(capsys, "ccrhost:", "port_down,port_down:", "port", "mlx5_0/1")
    assert (code, out) == (0, reasons.entry_text(reasons.REGISTRY["port_down"]))


def test_explain_finds_a_code_sinfo_cut_at_20_characters(capsys):
    # `sinfo -R` prints "%20E": "ccrhost: acs_redirect" loses its last letter
    code, out, _ = run_explain(capsys, "ccrhost: acs_redirec root      2026-12-05T08:00:00 node2")
    assert (code, out) == (0, reasons.entry_text(reasons.REGISTRY["acs_redirect"]))


def test_explain_exits_2_only_when_no_code_is_found(capsys):
    code, out, err = run_explain(capsys, "hw ticket 42  admin  2026-12-05T08:00:00 node2")
    assert (code, out) == (2, "")
    assert "no reason code found in 'hw ticket 42  admin  2026-12-05T08:00:00 node2'" in err


def acs_node(reason):
    return SlurmNode("node2", "198.18.0.12", "drained", reason)


def test_verify_reads_a_prolog_drained_node_with_its_own_codes():
    # what the node's own check said: ACS redirect on a bridge of the data path
    own = unjudged("FAIL", "acs_redirect", "ACS redirect is on at 0000:15:01.0")
    own.reasons.append(Reason("WARN", "gpu_throttled", "GPU 0 SM clock 1188/1980 MHz"))
    verdict = drained_verdict(acs_node(drain_text.drain_reason(own)))
    assert verdict.status == "FAIL"
    assert [(r.level, r.code) for r in verdict.reasons] == [("FAIL", "acs_redirect"), ("WARN", "gpu_throttled")]
    assert verdict.reasons[0].message.startswith("drained by its own check before the check step: ccrhost: acs_")
    unknown = drained_verdict(acs_node(drain_text.drain_reason(node_check.unknown("gpu_unreadable", "hung"))))
    assert (unknown.status, [r.code for r in unknown.reasons]) == ("UNKNOWN", ["gpu_unreadable"])


def test_verify_keeps_the_old_words_for_a_reason_without_codes():
    assert [r.code for r in drained_verdict(acs_node("ccrhost: port mlx5_0/1 is DOWN")).reasons] == ["drained_fail"]
    assert [r.code for r in drained_verdict(acs_node("ccrhost: UNKNOWN: x")).reasons] == ["drained_unknown"]
    assert [r.code for r in drained_verdict(acs_node("hw ticket 42")).reasons] == ["not_checked"]
