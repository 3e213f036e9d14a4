"""The NVLink tray's GPUs: fabric membership and health from nvidia-smi -q
(verbatim samples, tests/fixtures/gpu/README.md) and NVML's health mask
(nvml.h / nvidia-ml-py bit layout), and the NVLinks against the platform's
figures (model/imex.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccrhost.model import imex as m
from ccrhost.model import platform as plat
from ccrhost.model.gpu_health import GpuHealth, NvLink
from ccrhost.probes import gpu_health as probe

FIX = Path(__file__).parent / "fixtures" / "gpu"
HEAD = "GPU 00000000:01:00.0"
UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"


def query(name: str, edit=lambda s: s) -> GpuHealth:
    """A fixture's Fabric block under one GPU head line (grep's `--` cut), as the probe reads `-q`."""
    text = [ln for ln in edit((FIX / name).read_text()).splitlines() if ln != "--"]
    if not text[0].startswith("    "):
        text = ["    " + ln for ln in text]  # Azure's PR quotes the block unindented
    (gpu,) = probe.parse_query([HEAD, *text])
    return gpu


def codes(reasons):
    return [(r.level, r.code) for r in reasons]


def member(i: int, uuid: str = UUID, clique: int = 2, **kw) -> GpuHealth:
    return GpuHealth(i, f"0000:0{i + 1}:00.0", cluster_uuid=uuid, clique_id=clique, **kw)


# --- nvidia-smi -q ------------------------------------------------------------------

def test_dra626_sample_clique_and_cluster_are_read():
    g = query("fabric_clique_unhealthy_dra626.txt")
    assert (g.fabric_state, g.fabric_status, g.clique_id, g.cluster_uuid) == ("Completed", "Success", 2, UUID)
    # Summary Unhealthy, and no row printed says why (Bandwidth Full): not a pass, UNKNOWN naming it
    assert g.health == {"unreadable": "Summary 'Unhealthy' and no row that says why"}
    reasons = m.check_gpu_fabric([g])
    assert codes(reasons) == [("UNKNOWN", "gpu_fabric_unreadable")]
    assert reasons[0].message == ("GPU 0 (0000:01:00.0) fabric health: Summary 'Unhealthy' and no row that says "
                                  "why")


def test_a_degraded_bandwidth_row_is_its_own_reason():
    g = query("fabric_clique_unhealthy_dra626.txt", lambda s: s.replace("Bandwidth                     : Full",
                                                                        "Bandwidth                     : Degraded"))
    assert g.health == {"degraded_bw": "Degraded"}
    reasons = m.check_gpu_fabric([g])
    assert codes(reasons) == [("FAIL", "gpu_fabric_degraded_bw")]
    assert reasons[0].message == "GPU 0 (0000:01:00.0) NVLink fabric bandwidth degraded" and reasons[0].gpu == 0


def test_a_health_value_no_driver_prints_is_unknown():
    g = query("fabric_clique_unhealthy_dra626.txt", lambda s: s.replace(": Full", ": Halved"))
    assert codes(m.check_gpu_fabric([g])) == [("UNKNOWN", "gpu_fabric_unreadable")]


def test_azure506_sample_failed_to_register_which_is_gpu_healths_reason_alone():
    from ccrhost.model.gpu_health import GpuHealthPolicy, GpuHealthReading, check_gpu_health

    g = query("fabric_insufficient_azhpc506.txt")
    assert (g.fabric_status, g.clique_id, g.cluster_uuid) == ("Insufficient Resources", 0, m.ZERO_UUID)
    assert m.check_gpu_fabric([g]) == []  # not registered: no clique is the consequence, not a second fault
    health = check_gpu_health(GpuHealthReading(gpus=[g]), [], GpuHealthPolicy(), False)
    assert "gpu_fabric_not_ready" in [r.code for r in health]


def test_a_registered_gpu_in_no_clique_fails():
    g = query("fabric_insufficient_azhpc506.txt", lambda s: s.replace("Insufficient Resources", "Success"))
    reasons = m.check_gpu_fabric([g])
    assert codes(reasons) == [("FAIL", "gpu_fabric_no_clique")]
    assert reasons[0].message == ("GPU 0 (0000:01:00.0) is in no NVLink domain: ClusterUUID "
                                  "00000000-0000-0000-0000-000000000000, CliqueId 0")


def test_all_na_health_reads_nothing_and_is_unknown():
    g = query("fabric_health_na.txt")
    assert (g.clique_id, g.cluster_uuid, g.health) == (None, None, None)
    reasons = m.check_gpu_fabric([g])
    assert codes(reasons) == [("UNKNOWN", "gpu_fabric_unreadable")]
    assert reasons[0].message == "no fabric cluster UUID or clique ID read for GPU 0 (0000:01:00.0)"


@pytest.mark.parametrize("row, value, code, level", [
    ("Route Recovery in progress", "True", "gpu_fabric_route_recovery", "WARN"),
    ("Route Unhealthy", "True", "gpu_fabric_route_unhealthy", "FAIL"),
    ("Access Timeout Recovery", "True", "gpu_fabric_access_timeout", "WARN"),
    ("Incorrect Configuration", "Insufficient NVLinks", "gpu_fabric_incorrect_config", "FAIL"),
])
def test_each_health_row_is_its_own_reason(row, value, code, level):
    # the N/A sample's rows, one set to the value that is its fault
    def edit(s):
        out = []
        for ln in s.splitlines():
            if ln.strip().startswith(("CliqueId", "ClusterUUID")):
                ln = ln.replace("N/A", "2" if "CliqueId" in ln else UUID)
            elif ln.strip().startswith(row):
                ln = ln.replace("N/A", value)
            elif "Health" not in ln and ":" in ln and ln.strip().split(":")[0].strip() in (
                    "Bandwidth", "Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery",
                    "Incorrect Configuration"):
                ln = ln.replace("N/A", "Full" if "Bandwidth" in ln else "None" if "Incorrect" in ln else "False")
            out.append(ln)
        return "\n".join(out)
    g = query("fabric_health_na.txt", edit)
    assert codes(m.check_gpu_fabric([g])) == [(level, code)]


# --- NVML's health mask ---------------------------------------------------------------

def test_the_mask_layout_is_nvml_h():
    pynvml = pytest.importorskip("pynvml")
    for name, (shift, width) in m.HEALTH_FIELDS.items():
        key = name.upper()
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{key}") == shift
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{key}") == width
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS == 5


def test_each_mask_field_is_its_own_reason():
    false_all = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8   # every field FALSE, configuration NONE: healthy
    assert m.health_faults(false_all) == {} and m.health_faults(0) == {}
    mask = 1 | 1 << 2 | 1 << 4 | 1 << 6 | 5 << 8
    assert m.health_faults(mask) == {"degraded_bw": "true", "route_recovery": "true", "route_unhealthy": "true",
                                     "access_timeout_recovery": "true",
                                     "incorrect_configuration": "insufficient NVLinks"}
    reasons = m.check_gpu_fabric([member(0, health_mask=mask)])
    assert codes(reasons) == [("FAIL", "gpu_fabric_degraded_bw"), ("WARN", "gpu_fabric_route_recovery"),
                              ("FAIL", "gpu_fabric_route_unhealthy"), ("WARN", "gpu_fabric_access_timeout"),
                              ("FAIL", "gpu_fabric_incorrect_config")]
    assert reasons[-1].message == ("GPU 0 (0000:01:00.0) NVLink fabric incorrect configuration: "
                                   "insufficient NVLinks")


def test_the_nvml_probe_reads_the_v2_struct_and_link_speed():
    import pynvml

    def fill(h, ref):
        # NVML writes through the pointer it is given: a struct passed by value (no ctypes.byref) has no _obj
        info = ref._obj
        info.state, info.status, info.cliqueId, info.healthMask = 3, 0, 7, 1 << 4
        info.clusterUuid[:] = list(bytes.fromhex(UUID.replace("-", "")))
        return 0

    class Value:
        nvmlReturn = 0

        class value:
            uiVal = 53125

    class Nvml:
        c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t  # the real struct: its version set
        NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON = 90
        nvmlInit = nvmlShutdown = staticmethod(lambda: None)
        nvmlDeviceGetCount = staticmethod(lambda: 1)
        nvmlDeviceGetHandleByIndex = staticmethod(lambda i: "h")
        nvmlDeviceGetGpuFabricInfoV = staticmethod(fill)
        nvmlDeviceGetFieldValues = staticmethod(lambda h, ids: [Value()] if ids == [90] else None)
        nvmlDeviceGetNvLinkState = staticmethod(lambda h, n: 1 if n < 18 else (_ for _ in ()).throw(OSError()))

    (g,) = probe.read_nvml(Nvml())
    assert (g.fabric_state, g.clique_id, g.cluster_uuid, g.health_mask) == ("Completed", 7, UUID, 16)
    assert len(g.nvlinks) == 18 and {n.speed_gbs for n in g.nvlinks} == {53.125}
    assert codes(m.check_gpu_fabric([g])) == [("FAIL", "gpu_fabric_route_unhealthy")]


# --- one domain per tray ------------------------------------------------------------

def test_gpus_in_two_cliques_split_the_tray():
    reasons = m.check_gpu_fabric([member(0), member(1), member(2, clique=3), member(3)])
    assert codes(reasons) == [("FAIL", "gpu_fabric_split")]
    assert reasons[0].message == (f"the tray's GPUs are in more than one NVLink domain: ClusterUUID {UUID} clique 2: "
                                  f"GPU 0, 1, 3; ClusterUUID {UUID} clique 3: GPU 2")


def test_no_gpu_is_unknown():
    assert codes(m.check_gpu_fabric([])) == [("UNKNOWN", "gpu_fabric_unreadable")]


# --- NVLinks against the platform -------------------------------------------------------

def test_gb200_sample_links_meet_the_gb200_nvl72_figures():
    links = probe.parse_nvlink((FIX / "nvlink_status_gb200_k8s_test_infra371.txt").read_text().splitlines(), [])
    figures = m.NvlinkFigures.of(plat.resolve("gb200-nvl72"))
    assert figures == m.NvlinkFigures(18, 53.125, "gb200-nvl72")
    assert m.check_nvlinks([GpuHealth(0, nvlinks=links[0])], figures) == []


def test_a_slow_link_and_a_missing_link_fail_naming_the_figure():
    links = [NvLink(n, True, speed_gbs=53.125) for n in range(17)]
    links[4].speed_gbs = 26.562
    reasons = m.check_nvlinks([GpuHealth(0, "0000:01:00.0", nvlinks=links)],
                              m.NvlinkFigures.of(plat.resolve("gb200-nvl72")))
    assert codes(reasons) == [("FAIL", "gpu_nvlink_count_low"), ("FAIL", "gpu_nvlink_slow")]
    assert reasons[0].message == ("GPU 0 (0000:01:00.0): 17 NVLinks up, below 18 "
                                  "(hardware.nvlinks_per_gpu of platform gb200-nvl72)")
    assert reasons[1].message == ("GPU 0 (0000:01:00.0): NVLink 4 at 26.562 GB/s, below 53.125 GB/s "
                                  "(hardware.nvlink_gbs of platform gb200-nvl72)")


def test_a_speed_not_read_is_unknown_and_no_figure_is_not_judged():
    links = [NvLink(n, True) for n in range(18)]
    reasons = m.check_nvlinks([GpuHealth(0, nvlinks=links)], m.NvlinkFigures.of(plat.resolve("gb200-nvl72")))
    assert codes(reasons) == [("UNKNOWN", "gpu_nvlink_speed_unread")]
    # GB300 has no per-link speed figure: only the count is judged
    assert m.check_nvlinks([GpuHealth(0, nvlinks=links)], m.NvlinkFigures.of(plat.resolve("gb300-nvl72"))) == []


def test_a_link_listed_inactive_is_gpu_healths_and_not_counted_again():
    links = [NvLink(n, n != 4, speed_gbs=53.125 if n != 4 else None) for n in range(18)]
    assert m.check_nvlinks([GpuHealth(0, "0000:01:00.0", nvlinks=links)],
                           m.NvlinkFigures.of(plat.resolve("gb200-nvl72"))) == []


def test_the_mask_says_no_partition_and_a_disconnected_fabric_manager():
    import pynvml

    no_partition = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_FALSE << \
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_PARTITION_ASSIGNED
    gfm_down = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED << \
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE
    assert m.health_faults(no_partition) == {"partition_assigned": "false"}
    assert m.health_faults(gfm_down) == {"gfm_state": "disconnected"}
    # assigned (1 << 12) and connected (1 << 14) are no fault
    assert m.health_faults((1 << 12) | (1 << 14)) == {}
    g = GpuHealth(0, "0000:01:00.0", fabric_state="Completed", fabric_status="Success", clique_id=2,
                  cluster_uuid=UUID, health_mask=no_partition | gfm_down)
    assert codes(m.check_gpu_fabric([g])) == [("FAIL", "gpu_fabric_no_partition"),
                                              ("WARN", "gpu_fabric_gfm_disconnected")]
