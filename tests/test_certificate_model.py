"""model/certificate.py: which stages a node must run again, and its state."""

from ccrhost.model import certificate as cm

ALL = cm.STAGES
V = {"driver": "550.90.07", "ccrhost": "1.0"}  # ccrhost: recorded, never compared


def passed(stage, at=1000.0, versions=V, status="OK"):
    return cm.StageResult(stage, status, at, versions=dict(versions))


def cert_with(*results, valid_for=3600.0):
    cert = None
    for r in results:
        cert = cm.record(cert, "n1", r, valid_for, V, ALL)
    return cert


def test_a_new_node_runs_every_stage():
    assert cm.to_run(None, ALL, 1000.0, V) == ALL
    assert cm.state(None, ALL, 1000.0) == cm.INCOMPLETE


def test_every_stage_passed_is_certified_and_issued_when_the_last_passed():
    cert = cert_with(*(passed(s, 1000.0 + i) for i, s in enumerate(ALL)))
    assert cert.issued_at == 1005.0
    assert cm.state(cert, ALL, 1100.0, V) == cm.CERTIFIED
    # a second run re-runs only the passive check
    assert cm.to_run(cert, ALL, 1100.0, V) == ("check",)


def test_a_failed_stage_and_the_ones_never_run_run_again_nothing_else():
    cert = cert_with(passed("check"), passed("node"), passed("mesh", status="FAIL"))
    assert cm.state(cert, ALL, 1100.0, V) == cm.FAILED
    assert cert.issued_at is None
    assert cm.to_run(cert, ALL, 1100.0, V) == ("check", "mesh", "pairs", "scale", "soak")
    assert cm.first_failure(cert, ALL).stage == "mesh"


def test_unknown_is_not_a_pass():
    cert = cert_with(*(passed(s) for s in ALL[:-1]), passed("soak", status="UNKNOWN"))
    assert cm.state(cert, ALL, 1100.0, V) == cm.INCOMPLETE
    assert cm.to_run(cert, ALL, 1100.0, V) == ("check", "soak")


def test_a_stage_past_its_validity_or_under_another_driver_runs_again():
    cert = cert_with(*(passed(s) for s in ALL), valid_for=3600.0)
    assert cm.state(cert, ALL, 1000.0 + 3601, V) == cm.EXPIRED
    assert cm.to_run(cert, ALL, 1000.0 + 3601, V) == ALL
    newer = {**V, "driver": "560.35.03"}
    assert cm.to_run(cert, ALL, 1100.0, newer) == ALL
    assert cm.state(cert, ALL, 1100.0, newer) == cm.EXPIRED
    # a version the stage did not record (or the node no longer reads) does not count against it
    assert cm.to_run(cert, ALL, 1100.0, {"driver": "550.90.07", "nccl": "2.21.5"}) == ("check",)
    # a clock that went backwards is no proof either
    assert cm.to_run(cert, ALL, 900.0, V) == ALL


def test_a_swapped_gpu_runs_every_stage_again_and_a_gpu_not_read_does_not():
    with_gpus = {**V, "gpus": "GPU-1,GPU-2"}
    cert = None
    for i, s in enumerate(ALL):
        cert = cm.record(cert, "n1", passed(s, 1000.0 + i, with_gpus), 3600.0, with_gpus, ALL)
    assert cm.state(cert, ALL, 1100.0, with_gpus) == cm.CERTIFIED
    swapped = {**V, "gpus": "GPU-1,GPU-9"}  # the same node name, another GPU in it
    assert cm.state(cert, ALL, 1100.0, swapped) == cm.EXPIRED
    assert cm.to_run(cert, ALL, 1100.0, swapped) == ALL
    assert cm.to_run(cert, ALL, 1100.0, V) == ("check",)  # no UUID read now: not held against it


def test_a_swapped_nic_runs_every_stage_again():
    with_nics = {**V, "nics": "b859:9f03:00a1:2b3c,b859:9f03:00a1:2b3d"}
    cert = None
    for i, s in enumerate(ALL):
        cert = cm.record(cert, "n1", passed(s, 1000.0 + i, with_nics), 3600.0, with_nics, ALL)
    assert cm.to_run(cert, ALL, 1100.0, with_nics) == ("check",)
    swapped = {**V, "nics": "b859:9f03:00a1:2b3c,e8eb:d303:0011:2233"}  # same firmware, another card
    assert cm.state(cert, ALL, 1100.0, swapped) == cm.EXPIRED and cm.to_run(cert, ALL, 1100.0, swapped) == ALL


def test_again_reruns_a_holding_stage_and_wanted_leaves_the_others_out():
    cert = cert_with(*(passed(s) for s in ALL))
    assert cm.to_run(cert, ALL, 1100.0, V, again=("node", "soak")) == ("check", "node", "soak")
    assert cm.to_run(None, ("check", "node"), 1100.0, V) == ("check", "node")


def test_stages_the_settings_leave_out_are_skipped_and_run_once_wanted():
    wanted = ("check", "node")
    cert = None
    for r in (passed("check"), passed("node"), cm.StageResult("soak", cm.SKIPPED, 1001.0)):
        cert = cm.record(cert, "n1", r, 3600.0, V, wanted)
    assert cm.state(cert, wanted, 1100.0, V) == cm.CERTIFIED
    # the settings now ask for the soak: skipped is no pass
    assert cm.state(cert, (*wanted, "soak"), 1100.0, V) == cm.INCOMPLETE
    assert cm.to_run(cert, (*wanted, "soak"), 1100.0, V) == ("check", "soak")


def test_the_round_trip_keeps_everything():
    cert = cert_with(*(passed(s) for s in ALL))
    again = cm.Certificate.from_dict(cert.to_dict())
    assert again == cert


def test_stages_for_a_failure_follow_the_catalogue_file_of_its_codes():
    sources = {"gemm_slow": "acceptance.yaml", "rdma_mesh_pruned": "connectivity.yaml", "xid": "gpu.yaml"}
    assert cm.stages_for(["rdma_mesh_pruned"], sources) == ("mesh",)
    assert cm.stages_for(["gemm_slow", "xid"], sources) == ("node", "scale", "soak")
    assert cm.stages_for(["no_such_code"], sources) == ALL


def test_every_catalogue_file_maps_to_stages_that_exist():
    from ccrhost.model.reasons import SOURCES

    assert set(cm.STAGES_OF_FILE) <= set(SOURCES.values())
    assert all(set(stages) <= set(ALL) for stages in cm.STAGES_OF_FILE.values())
