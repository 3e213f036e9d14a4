"""The whole-node snapshot: one command, each probe parsed on its own."""

import subprocess

from ccrhost.model.managed import FILES, UNIT_WANTS
from ccrhost.probes import node


def test_the_packed_command_runs_and_parses_on_this_machine(tmp_path):
    managed = tmp_path / "nccl.conf"
    managed.write_text("NCCL_DEBUG=WARN\n")
    out = subprocess.run(["sh", "-c", node.command([str(managed), str(tmp_path / "absent")], UNIT_WANTS)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 2 and out[0].startswith(node.PACKED_MARK)  # one line of payload, whatever the node prints
    snap = node.parse_snapshot(out)
    assert snap.errors == {}
    assert snap.files[str(managed)].content == "NCCL_DEBUG=WARN\n"
    assert snap.files[str(tmp_path / "absent")] is None
    assert snap.gpus.error  # no GPU here: a reading that says why, not a probe failure
    assert snap.pci.kernel_release == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()


def test_one_probe_spoiled_leaves_the_others():
    lines = ["@@@ rdma", "@@ib", "mlx5_0/ports/1/rate:fast",
             "@@@ modules", "@@loaded", "mlx5_core",
             "@@@ files", "/etc/nccl.conf\t-",
             "@@@ qos", "@@systemd",
             "@@@ gpus", "@@error", "nvidia-smi not found",
             "@@@ pci", "@@kernel", "6.8.0-45-generic", "x86_64", "@@ib", "mlx5_0/fw_ver:28.39.3560",
             "@@@ gpu_health", "@@error", "nvidia-smi not found", "@@pcigpus", "@@dmesg 10.0",
             "@@@ fabric", "@@previous", "@@t 12.5", "@@@ baseline", "@@meminfo", "MemTotal:  1000 kB",
             "@@@ host_health", "@@units 0 slurmd", "Id=slurmd.service", "LoadState=loaded"]
    snap = node.parse_snapshot(lines)
    assert list(snap.errors) == ["rdma"]
    assert snap.pci.versions().nic_fw == {"mlx5_0": "28.39.3560"}
    assert "/sys/class/infiniband/mlx5_0/ports/1/rate" in snap.errors["rdma"] and "'fast'" in snap.errors["rdma"]
    assert snap.modules.present("mlx5_core") and snap.files == {"/etc/nccl.conf": None}
    assert snap.baseline.mem_total_kib == 1000


def test_a_probe_that_printed_nothing_is_named():
    snap = node.parse_snapshot(["@@@ rdma", "@@ib"])
    assert snap.errors == {name: f"no output from the {name} probe" for name in ("modules", "qos", "files", "gpus",
                                                                                        "pci", "gpu_health",
                                                                                        "fabric", "baseline",
                                                                                        "host_health")}


def test_a_packed_payload_that_does_not_decode_spoils_every_probe():
    snap = node.parse_snapshot([f"{node.PACKED_MARK} gz", "not base64!"])
    assert set(snap.errors) == {"rdma", "modules", "qos", "files", "gpus", "pci", "gpu_health", "fabric",
                                "baseline", "host_health"}
    assert all(e.startswith("the packed node output does not decode") for e in snap.errors.values())


def test_the_cache_serves_every_managed_file_from_the_one_read():
    from ccrhost.operations import cache

    class Host:
        def get_fact(self, fact, **kwargs):
            self.reads = getattr(self, "reads", 0) + 1
            # read only: no deploy configured it to keep the fabric reading
            assert kwargs == {"paths": list(FILES), "wants": UNIT_WANTS, "state": node.DEFAULT_STATE, "keep": False,
                              "ask": ((), ()), "host": None}  # no sysctl or mount point asked for, no host health
            return node.parse_snapshot(["@@@ files", *[f"{p}\t-" for p in FILES]])

    host = Host()
    assert cache.files(host, list(FILES)) == {p: None for p in FILES}
    assert cache.files(host, [FILES[1]]) == {FILES[1]: None} and host.reads == 1


def test_a_read_of_some_probes_keeps_the_others_from_the_snapshot_held():
    held = node.parse_snapshot(["@@@ rdma", "@@@ modules", "@@loaded", "mlx5_core", "@@@ files", "@@@ qos",
                                "@@@ gpus", "@@error", "nvidia-smi not found", "@@@ pci", "@@kernel", "6.8.0", "x86_64",
                                "@@@ gpu_health", "@@error", "nvidia-smi not found",
                                "@@@ fabric", "@@previous", "@@t 5.0", "@@@ baseline",
                                "@@@ host_health", "@@units none slurmd"])
    held.errors["gpus"] = "held error"
    again = ("rdma", "modules", "qos", "files")
    command = node.command(list(FILES), UNIT_WANTS, again)
    assert "echo '@@@ gpus'" not in command and "echo '@@@ pci'" not in command and "echo '@@@ qos'" in command
    fresh = node.parse_snapshot(["@@@ rdma", "@@@ modules", "@@loaded", "mlx5_ib", "@@@ files", "@@@ qos"], again)
    assert fresh.errors == {}  # the probes not asked for are not "missing"
    merged = node.merge(held, fresh, again)
    assert merged.modules.present("mlx5_ib") and not merged.modules.present("mlx5_core")  # read again
    assert merged.pci.kernel_release == "6.8.0" and merged.gpus is held.gpus  # kept
    assert merged.errors == {"gpus": "held error"}


def test_the_read_back_reads_again_what_a_write_can_change():
    from ccrhost.operations.tune import read_back

    # the fabric counters too: the node's stored reading then starts after the tuning
    # and the host baseline: the modules stage loads what baseline_modules may ask for
    assert read_back({"modules", "RoCE", "boot unit", "QoS", "NCCL"}) == ("rdma", "modules", "qos", "files",
                                                                          "fabric", "baseline")
    # a data-path write reads the PCI tree too
    assert "pci" in read_back({"PCIe ACS"}) and "pci" not in read_back({"NCCL"})
    assert all("gpus" not in read_back(w) for w in ({"GPUDirect"}, {"QoS"}))


def _node(qos_lines, pci_lines=("@@kernel", "6.8.0-45-generic", "x86_64")):
    return ["@@@ qos", *qos_lines, "@@@ pci", *pci_lines]


def test_alike_nodes_share_the_qos_and_pci_records_and_unlike_ones_do_not():
    # a fleet's nodes print the same QoS and PCI text: parsed once per run, the record shared
    qos = ["@@systemd", "running", "enabled"]
    a, b = (node.parse_snapshot(_node(qos), ("qos", "pci")) for _ in range(2))
    assert a.errors == b.errors == {}
    assert a.qos is b.qos and a.pci is b.pci and a.qos.systemd and a.qos.unit_enabled
    c = node.parse_snapshot(_node(["@@systemd", "running"], ("@@kernel", "6.8.0-46-generic", "x86_64")),
                            ("qos", "pci"))
    assert c.qos is not a.qos and not c.qos.unit_enabled and a.qos.unit_enabled
    assert c.pci.kernel_release == "6.8.0-46-generic" and a.pci.kernel_release == "6.8.0-45-generic"


def test_a_pci_text_that_does_not_parse_fails_every_node_that_printed_it():
    bad = ("@@kernel", "6.8.0-45-generic", "x86_64", "@@acs", "0000:16:01.0 005f")
    for _ in range(2):
        snap = node.parse_snapshot(_node(["@@systemd", "running"], bad), ("qos", "pci"))
        assert "ACS capability and control words" in snap.errors["pci"] and snap.qos.systemd


def test_with_host_health_off_the_snapshot_reads_and_writes_none_of_it():
    # host_health_enable off (the default): the section runs no systemctl, chronyc or nvidia-smi and
    # writes no state file; the snapshot holds no reading and counts no error
    from ccrhost.operations import cache
    from ccrhost.settings import validate_host

    off = validate_host("n", {})
    on = validate_host("n", {"host_health_enable": True, "host_health_units": ["chronyd"]})

    class Host:
        pass

    host = Host()
    cache.configure(host, node.DEFAULT_STATE, True, off)
    assert host.__dict__[cache._HOST] is None
    text = node.command(list(FILES), UNIT_WANTS, probes=("host_health",), keep=True, host=None)
    assert "systemctl" not in text and "nvidia-smi" not in text and "host-health.json" not in text
    snap = node.parse_snapshot(["@@@ host_health", "@@off"], ("host_health",))
    assert snap.host_health is None and snap.errors == {}
    cache.configure(host, node.DEFAULT_STATE, True, on)
    units, state, _, keep = host.__dict__[cache._HOST]
    assert "chronyd" in units and state == "/run/ccrhost/host-health.json" and keep is True
    assert "systemctl show" in node.command(list(FILES), UNIT_WANTS, probes=("host_health",), host=(units, state))
