"""deploy/kubernetes and the image: the manifests build and validate offline,
the DaemonSet's init command tunes a lab node from inside it (twice: the
second run changes nothing), Node Problem Detector's plugin command gives
NPD's exit codes and one short line, and the Dockerfile copies what exists.

No API server, kind or container engine runs here: what these tests take
from the manifests (command lines, environment, paths) is run on lab nodes,
where the host's /sys, network and /etc are the node's own, as the
DaemonSet's mounts make them in a pod.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import K8S_PROFILES as PROFILES
from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET, REPO
from test_checks import H100, gpu, healthy, port

from ccrhost.model.status import FAIL, UNKNOWN, WARN
from ccrhost.model.verdict import evaluate
from ccrhost.node import check as node_check
from ccrhost.node import formats
from ccrhost.probes import kernel, qos
from ccrhost.settings import validate_host

K8S = REPO / "deploy" / "kubernetes"
# a current release: kubernetes-validate ships the schemas of each
KUBERNETES_VERSION = "1.37.0"
# where the Dockerfile puts the repository's files (its WORKDIR)
IMAGE_WORKDIR = "/opt/ccrhost"


# --- the manifests -----------------------------------------------------------

@pytest.fixture(scope="module")
def built() -> list[dict]:
    """``kubectl kustomize deploy/kubernetes``: offline, no cluster."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: scripts/bootstrap installs Debian's kubernetes-client"
    out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs, kind, name=None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in docs if d["kind"] == kind])
    return found[0]


# the profile of the lab's nodes: the lab tests run its DaemonSet's commands
PROFILE = "hgx-h100-8x400"
PROFILE_LABEL = "ccrhost/profile"


def daemonset(docs, profile: str = PROFILE) -> dict:
    return by_kind(docs, "DaemonSet", f"ccrhost-{profile}")["spec"]["template"]["spec"]


def npd_monitor(docs) -> dict:
    data = by_kind(docs, "ConfigMap", "ccrhost-npd")["data"]
    assert list(data) == ["ccrhost-monitor.json"]
    return json.loads(data["ccrhost-monitor.json"])


def test_kustomize_builds_every_document_into_the_namespace(built):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in built)
    per_profile = [("ConfigMap", f"ccrhost-node-{p}") for p in sorted(PROFILES)] + [
        ("DaemonSet", f"ccrhost-{p}") for p in sorted(PROFILES)]
    assert kinds == sorted([("ClusterRoleBinding", "ccrhost-node-problem-detector"), ("ConfigMap", "ccrhost-npd"),
                            ("Namespace", "ccrhost"), ("ServiceAccount", "ccrhost"), *per_profile])
    for d in built:
        if d["kind"] not in ("Namespace", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "ccrhost", d["metadata"]
    for profile in PROFILES:
        spec = daemonset(built, profile)
        images = {c["image"] for c in spec["initContainers"] + spec["containers"]}
        assert images == {"ccrhost:0.1.0"}  # the kustomization's images entry applied


def selected(node_labels: dict, docs) -> list[str]:
    """The DaemonSets whose pods a node with these labels runs (a nodeSelector
    matches when the node has every one of its labels; none uses affinity)."""
    out = []
    for d in docs:
        if d["kind"] == "DaemonSet":
            spec = d["spec"]["template"]["spec"]
            assert "affinity" not in spec
            if all(node_labels.get(k) == v for k, v in spec["nodeSelector"].items()):
                out.append(d["metadata"]["name"])
    return out


def test_one_daemonset_per_hardware_profile_selected_by_a_node_label(built):
    gpu = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "gpu-001"}
    for profile in PROFILES:
        # a node runs the DaemonSet of its profile label, and only that one
        assert selected({**gpu, PROFILE_LABEL: profile}, built) == [f"ccrhost-{profile}"]
        ds = by_kind(built, "DaemonSet", f"ccrhost-{profile}")
        # its own selector and pod labels, so no two DaemonSets claim the same pods
        assert ds["spec"]["selector"]["matchLabels"][PROFILE_LABEL] == profile
        assert ds["spec"]["template"]["metadata"]["labels"][PROFILE_LABEL] == profile
        # and its own node data, declaring that profile, which the inventory's schema accepts
        tune = by_name(daemonset(built, profile)["initContainers"], "tune")
        name, key = configmap_file(built, tune, {e["name"]: e["value"] for e in tune["env"]}["CCRHOST_NODE_DATA"],
                                   profile)
        assert name == f"ccrhost-node-{profile}"
        data = yaml.safe_load(by_kind(built, "ConfigMap", name)["data"][key])
        assert validate_host("node", data).verify_profile == profile
    # a GPU node without the label, or with a profile ccrhost does not know, runs none
    assert selected(gpu, built) == []
    assert selected({**gpu, PROFILE_LABEL: "hgx-h100-4x400"}, built) == []
    # the label alone is not enough: the GPU operator's label says the node has GPUs
    assert selected({PROFILE_LABEL: PROFILE}, built) == []


def test_each_profile_overlay_builds_alone_and_names_the_label_it_selects(built):
    kubectl = shutil.which("kubectl")
    on_disk = sorted(p.name for p in (K8S / "profiles").iterdir() if p.is_dir())
    assert on_disk == sorted(PROFILES)  # one overlay per profile ccrhost knows, no more
    root = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(root["bases"]) == [f"profiles/{p}" for p in sorted(PROFILES)]
    for profile in PROFILES:
        out = subprocess.run([kubectl, "kustomize", str(K8S / "profiles" / profile)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        alone = [d for d in yaml.safe_load_all(out.stdout) if d]
        assert sorted((d["kind"], d["metadata"]["name"]) for d in alone) == [
            ("ConfigMap", f"ccrhost-node-{profile}"), ("DaemonSet", f"ccrhost-{profile}")]
        assert f"kubectl label node NODE {PROFILE_LABEL}={profile}" in (
            K8S / "profiles" / profile / "node-selector.yaml").read_text()


def test_built_documents_validate_against_the_kubernetes_schemas(built):
    import kubernetes_validate

    for doc in built:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    # the validator is live: a wrong type and an unknown field are refused
    bad = copy.deepcopy(by_kind(built, "DaemonSet", f"ccrhost-{PROFILE}"))
    bad["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError, match="'yes' is not of type 'boolean'"):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
    bad = copy.deepcopy(by_kind(built, "DaemonSet", f"ccrhost-{PROFILE}"))
    bad["spec"]["template"]["spec"]["hostNetworking"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="hostNetworking"):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_every_profiles_daemonset_rolls_a_change_out_one_node_at_a_time(built):
    # docs/kubernetes.md "Rolling a change out a few nodes at a time": a new image or node data
    # replaces the pods one node at a time, never every node's tuning at once
    for profile in PROFILES:
        spec = by_kind(built, "DaemonSet", f"ccrhost-{profile}")["spec"]
        assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}, profile


def test_init_container_is_privileged_on_the_hosts_network_pids_and_sys(built):
    spec = daemonset(built)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", PROFILE_LABEL: PROFILE}
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["serviceAccountName"] == by_kind(built, "ServiceAccount")["metadata"]["name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in spec["initContainers"] + spec["containers"]:
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/sys"]]["hostPath"]["path"] == "/sys", container["name"]
        assert volumes[mounts["/lib/modules"]]["hostPath"]["path"] == "/lib/modules", container["name"]
    tune = by_name(spec["initContainers"], "tune")
    assert tune["securityContext"] == {"privileged": True}  # it writes /sys, /etc, QoS and loads modules
    mounts = {m["mountPath"]: m["name"] for m in tune["volumeMounts"]}
    # the managed files and the boot unit's systemctl are the host's
    assert volumes[mounts["/etc"]]["hostPath"]["path"] == "/etc"
    assert volumes[mounts["/run/systemd"]]["hostPath"]["path"] == "/run/systemd"


# what the check needs beyond an unprivileged root, and the reason code a node
# gets without it (docs/kubernetes.md, "What the check needs")
NPD_CAPABILITIES = {"SYS_ADMIN": "acs_unreadable", "SYSLOG": "gpu_health_unreadable"}


def test_npd_container_reads_unprivileged_with_two_capabilities_and_a_read_only_sys(built):
    from ccrhost.model import reasons

    for profile in PROFILES:
        spec = daemonset(built, profile)
        npd = by_name(spec["containers"], "node-problem-detector")
        context = npd["securityContext"]
        assert set(context) == {"privileged", "capabilities"} and context["privileged"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert sorted(context["capabilities"]["add"]) == sorted(NPD_CAPABILITIES)
        # every mount read-only but the check's own state (its counters, its report)
        writable = [m["mountPath"] for m in npd["volumeMounts"] if not m.get("readOnly")]
        assert writable == ["/run/ccrhost"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        state = next(m for m in npd["volumeMounts"] if m["mountPath"] == "/run/ccrhost")
        assert volumes[state["name"]]["hostPath"]["path"] == "/run/ccrhost"
        assert "/etc" not in {m["mountPath"] for m in npd["volumeMounts"]}
    page = (REPO / "docs" / "kubernetes.md").read_text()
    needs = page[page.index("### What the check needs"):]
    for capability, code in NPD_CAPABILITIES.items():
        assert code in reasons.REGISTRY
        assert f"`{capability}`" in needs and f"`{code}`" in needs, capability


def with_capabilities(capabilities, argv: list[str]) -> subprocess.CompletedProcess:
    """``argv`` as root holding only ``capabilities``, as in a container that
    drops ALL and adds them (setpriv: for root, the bounding set is what it
    keeps)."""
    bounding = "-all" + "".join(f",+{c.lower()}" for c in capabilities)
    return subprocess.run(["setpriv", "--inh-caps=-all", f"--bounding-set={bounding}", *argv],
                          capture_output=True, text=True, timeout=60)


def test_the_npd_capabilities_are_what_this_kernel_asks_for(built):
    """On this machine's own kernel (no lab: the lab's setpci and dmesg are
    shims), the check's reads succeed with the NPD container's capabilities
    and fail without each one."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (util-linux) to drop capabilities")
    npd = by_name(daemonset(built)["containers"], "node-problem-detector")
    granted = npd["securityContext"]["capabilities"]["add"]
    assert sorted(granted) == sorted(NPD_CAPABILITIES)

    # SYS_ADMIN: PCI config space past its first 64 bytes (ACS is an extended
    # capability, at 0x100 or later; Device Control sits in the PCIe capability, past 0x40)
    config = next((c for c in sorted(Path("/sys/bus/pci/devices").glob("*/config")) if c.stat().st_size > 64), None)
    if config is None:
        pytest.skip("no PCI function with more than 64 bytes of config space here")
    size = [int(with_capabilities(caps, ["sh", "-c", f"wc -c < {config}"]).stdout)
            for caps in (granted, [c for c in granted if c != "SYS_ADMIN"])]
    assert size == [config.stat().st_size, 64], size

    # SYSLOG: the check's own kernel-log probe, parsed as the check parses it
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0 here: anyone may read the kernel log")
    if Path("/run/systemd/system").is_dir():
        pytest.skip("systemd runs here, so the probe reads the journal; the NPD container has no /run/systemd")
    from ccrhost.probes import gpu_health as probe

    def log_error(caps):
        out = with_capabilities(caps, ["sh", "-c", probe.COMMAND_LOG])
        reading = probe.parse_command_output(out.stdout.splitlines())
        assert reading.log_source == "dmesg"
        return reading.log_error

    assert log_error(granted) is None
    assert log_error([c for c in granted if c != "SYSLOG"]) == \
        "dmesg: dmesg: read kernel buffer failed: Operation not permitted"


def tolerated(taint: dict, tolerations: list[dict]) -> bool:
    """Kubernetes' matching (core/v1 Toleration.ToleratesTaint): an empty key
    with Exists matches every key, an empty effect every effect."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key", "") == "" and t.get("operator") == "Exists":
            return True
        if t.get("key") != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def test_tolerations_are_the_gpu_nodes_taint_and_nothing_else(built):
    for profile in PROFILES:
        tolerations = daemonset(built, profile)["tolerations"]
        assert tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        # GKE's taint on GPU nodes, and the same by hand
        assert tolerated({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, tolerations)
        # not a NoExecute taint, which evicts (a drain, a maintenance taint), nor a taint of another owner
        for taint in ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"},
                      {"key": "example.com/maintenance", "value": "true", "effect": "NoExecute"},
                      {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}):
            assert not tolerated(taint, tolerations), taint
    # the helper is live: the old "tolerate everything" matched them all
    assert tolerated({"key": "example.com/maintenance", "effect": "NoExecute"}, [{"operator": "Exists"}])


def test_every_container_requests_cpu_and_memory_and_has_a_memory_limit(built):
    for profile in PROFILES:
        spec = daemonset(built, profile)
        for container in spec["initContainers"] + spec["containers"]:
            resources = container.get("resources", {})
            assert set(resources.get("requests", {})) == {"cpu", "memory"}, container["name"]
            assert "memory" in resources.get("limits", {}), container["name"]


def by_name(items, name):
    return next(i for i in items if i["name"] == name)


def configmap_file(built, container, env_path, profile: str = PROFILE) -> tuple[str, str]:
    """(ConfigMap name, key) the container sees at ``env_path``."""
    spec = daemonset(built, profile)
    volumes = {v["name"]: v for v in spec["volumes"]}
    directory, key = env_path.rsplit("/", 1)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == directory)
    return volumes[mount["name"]]["configMap"]["name"], key


def test_node_data_is_what_both_containers_read(built):
    spec = daemonset(built)
    tune = by_name(spec["initContainers"], "tune")
    data_path = {e["name"]: e["value"] for e in tune["env"]}["CCRHOST_NODE_DATA"]
    name, key = configmap_file(built, tune, data_path)
    assert (name, key) == (f"ccrhost-node-{PROFILE}", "node.yaml")
    data = yaml.safe_load(by_kind(built, "ConfigMap", name)["data"][key])
    from ccrhost.settings import validate_host

    validate_host("node", data)  # the inventory's own schema accepts the shipped data
    rule = npd_monitor(built)["rules"][0]
    assert rule["args"][rule["args"].index("--config") + 1] == data_path
    npd = by_name(spec["containers"], "node-problem-detector")
    assert configmap_file(built, npd, data_path) == (name, key)


def test_npd_monitor_runs_the_check_every_5_minutes_as_a_permanent_condition(built):
    spec = daemonset(built)
    npd = by_name(spec["containers"], "node-problem-detector")
    flag = next(a for a in npd["command"] if a.startswith("--config.custom-plugin-monitor="))
    config_path = flag.split("=", 1)[1]
    assert configmap_file(built, npd, config_path) == ("ccrhost-npd", "ccrhost-monitor.json")
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in npd["env"]
    monitor = npd_monitor(built)
    assert monitor["plugin"] == "custom"
    assert monitor["pluginConfig"]["invoke_interval"] == "5m"
    # with skip_initial_status NPD has no condition for the rule to update
    assert not monitor["pluginConfig"].get("skip_initial_status", False)
    # a changed list of codes updates the message of a condition that stays True
    assert monitor["pluginConfig"]["enable_message_change_based_condition_update"] is True
    assert monitor["pluginConfig"]["max_output_length"] >= formats.NPD_MAX_OUTPUT
    [rule] = monitor["rules"]
    assert rule["type"] == "permanent" and rule["condition"] == "CCRHostUnhealthy" and rule["reason"]
    # NPD refuses a permanent rule without a default condition, and a rule
    # timeout above the global one (types/config.go Validate)
    assert [c["type"] for c in monitor["conditions"]] == ["CCRHostUnhealthy"]
    assert seconds(rule["timeout"]) <= seconds(monitor["pluginConfig"]["timeout"])
    # the check's own probe limit ends before NPD kills it
    assert seconds(rule["args"][rule["args"].index("--probe-timeout") + 1] + "s") < seconds(rule["timeout"])
    assert rule["path"] == "/usr/local/bin/ccrhost" and rule["args"][:3] == ["check", "--format", "npd"]


def seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


# --- the image ---------------------------------------------------------------

def dockerfile() -> list[list[str]]:
    """Instructions as [KEYWORD, arguments...], continuation lines joined."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [[line.split()[0].upper(), line.split(None, 1)[1]] for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_copies_only_what_exists_and_runs_the_cli(built):
    steps = dockerfile()
    froms = [args.split()[0] for kw, args in steps if kw == "FROM"]
    assert froms[-1].startswith("python:3.") and "slim" in froms[-1]  # the official Python image
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    copied = []
    for kw, args in steps:
        if kw != "COPY" or args.startswith("--from="):
            continue
        *sources, _dest = args.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") not in ignored, source
            copied.append(source.rstrip("/"))
    assert {"pyproject.toml", "ccrhost", "deploy/kubernetes"} <= set(copied)
    assert ["WORKDIR", IMAGE_WORKDIR] in steps
    assert any(kw == "RUN" and "pip install --no-cache-dir ." in args for kw, args in steps)
    assert "deploy/image-constraints.txt" in copied
    assert ["ENTRYPOINT", '["ccrhost"]'] in steps
    scripts = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli").loads(
        (REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ccrhost"] == "ccrhost.console:entry"
    # what the manifests run from the image is there
    spec = daemonset(built)
    tune = by_name(spec["initContainers"], "tune")
    assert tune["workingDir"] == IMAGE_WORKDIR
    for arg in tune["command"][1:]:
        if arg.endswith(".py"):
            assert any(arg.startswith(c + "/") for c in copied) and (REPO / arg).is_file(), arg
    npd = by_name(spec["containers"], "node-problem-detector")
    npd_copy = next(args for kw, args in steps if kw == "COPY" and args.startswith("--from=npd"))
    assert npd_copy.split()[-1] == npd["command"][0]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "deploy/image-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.+!]*", version), f"not pinned exactly: {line}"
            pins[canonical(name)] = version
    return pins


def test_image_pins_every_input():
    steps = dockerfile()
    for kw, args in steps:
        if kw == "FROM":
            image = args.split()[0]
            # a full version tag (x.y.z), not a moving one like 3.12 or latest
            assert re.search(r":v?\d+\.\d+\.\d+[^:/]*$", image) or "@sha256:" in image, image
    [install] = [args for kw, args in steps if kw == "RUN" and "apt-get install" in args]
    packages = [w for w in install.split("apt-get install", 1)[1].split("&&")[0].split() if not w.startswith("-")]
    assert packages and all(re.fullmatch(r"[a-z0-9.+-]+=[0-9][\w.:+~-]*", p) for p in packages), packages
    [pip] = [args for kw, args in steps if kw == "RUN" and "pip install" in args]
    # by environment, so that pip's isolated build of ccrhost is held to the pins too
    assert f"PIP_CONSTRAINT={IMAGE_WORKDIR}/deploy/image-constraints.txt pip install" in pip
    assert "[" not in pip.split("pip install", 1)[1]  # no extras in a node agent

    pins = constraints()
    assert "matplotlib" not in pins and "numpy" not in pins
    toml = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli").loads((REPO / "pyproject.toml").read_text())
    from packaging.requirements import Requirement

    wanted = [Requirement(r) for r in toml["project"]["dependencies"] + toml["build-system"]["requires"]]
    for req in wanted:
        assert canonical(req.name) in pins, req.name
        assert req.specifier.contains(pins[canonical(req.name)], prereleases=True), (req, pins[canonical(req.name)])


def test_image_constraints_are_closed_for_python_312_on_linux():
    """Each pinned runtime package's own requirements are pinned too (read from
    the installed distributions' metadata), so pip in the image resolves
    nothing unpinned."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.11", "sys_platform": "linux",
           "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    pins = constraints()
    toml = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli").loads((REPO / "pyproject.toml").read_text())
    todo = [Requirement(r) for r in toml["project"]["dependencies"]]
    seen = set()
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if (req.marker and not req.marker.evaluate(env)) or name in seen:
            continue
        seen.add(name)
        assert name in pins, f"{name} is installed in the image but not pinned in deploy/image-constraints.txt"
        todo += [Requirement(r) for r in metadata.distribution(req.name).requires or []]
    assert seen | {"setuptools"} == set(pins)  # nothing pinned that the image does not install


# --- the NPD line, from verdicts ----------------------------------------------

def test_npd_codes_and_line_per_status():
    ok = evaluate(healthy(), H100)
    assert formats.format_npd(ok) == ("OK: all checks passed\n", 0)
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    fail = evaluate(healthy(ports=ports), H100)
    assert fail.status == FAIL
    line, code = formats.format_npd(fail)
    assert code == 1 and line.startswith("FAIL: port_down,") and line.endswith("; action investigate\n")
    gpus = [gpu(i) for i in range(8)]
    gpus[0] = gpu(0, clock=990, reasons=0x8)
    warn = evaluate(healthy(gpus=gpus), H100)
    assert warn.status == WARN
    assert formats.format_npd(warn) == ("WARN: gpu_throttled; action investigate\n", 0)
    assert formats.format_npd(warn, warn_unhealthy=True) == ("WARN: gpu_throttled; action investigate\n", 1)
    unknown = node_check.unknown("rdma_unreadable", "cannot read the RDMA ports: x")
    assert unknown.status == UNKNOWN
    assert formats.format_npd(unknown) == ("UNKNOWN: rdma_unreadable; action investigate\n", 2)


def test_npd_line_fits_the_default_length_with_every_code_whole():
    from ccrhost.model.status import Reason

    reasons = [Reason(FAIL, f"some_long_reason_code_{i}", "m") for i in range(9)] + [Reason(WARN, "gpu_throttled", "m")]
    verdict = node_check.unknown("check_error", "x")
    verdict = type(verdict)(FAIL, reasons, None, None, verdict.readings)
    line, code = formats.format_npd(verdict)
    assert code == 1 and line.count("\n") == 1
    assert len(line.rstrip("\n").encode()) <= formats.NPD_MAX_OUTPUT
    line, action = line.rstrip("\n").rsplit("; ", 1)
    assert action == "action investigate"  # the action is never cut
    head, more = line.rsplit(" +", 1)
    shown = head.removeprefix("FAIL: ").split(",")
    assert shown == [r.code for r in reasons[:len(shown)]] and more == f"{len(reasons) - len(shown)} more"


def test_warn_setting_is_validated_like_every_key():
    from ccrhost.settings import InventoryDataError, validate_host

    assert validate_host("n", {"verify_npd_warn_unhealthy": True}).verify_npd_warn_unhealthy is True
    with pytest.raises(InventoryDataError, match="verify_npd_warn_unhealthy"):
        validate_host("n", {"verify_npd_warn_unhealthy": "yes"})


# --- what a container cannot see: parsed, then failed (lab tests below) --------

def test_a_missing_modules_tree_is_read_as_such():
    lines = ["@@loaded", "ib_core", "@@builtin", "@@tree", "6.1.0-28-amd64"]
    assert kernel.parse_modules(lines).no_tree == "6.1.0-28-amd64"
    assert kernel.parse_modules(["@@loaded", "ib_core", "@@builtin", "@@tree"]).no_tree is None


def test_systemd_as_pid_1_is_seen_without_its_run_directory():
    reading = qos.parse_qos_dump(["@@systemd", "pid1"])
    assert (reading.systemd, reading.systemd_pid1) == (False, True)
    reading = qos.parse_qos_dump(["@@systemd", "running", "pid1", "enabled"])
    assert (reading.systemd, reading.systemd_pid1, reading.unit_enabled) == (True, True, True)


# --- on lab nodes --------------------------------------------------------------

@pytest.fixture(scope="module")
def lab():
    """node1 healthy (tuned by the init command), node2 WARN, node3 FAIL,
    node4 UNKNOWN (nvidia-smi garbled once it runs); node5 has no peer-memory
    module loaded at boot and the proprietary GPU module: GPUDirect needs
    the module the driver ships."""
    from ccrhost.lab.fleet import Lab, parse_faults

    lab = Lab(LAB_DIR)
    lab.down()
    try:
        lab.up(5, "hgx-h100-8x400", parse_faults(["node2:gpu_throttled=2", "node3:port_down=mlx5_4", "node5:no_peermem"]),
               name=LAB_NAME, subnet=LAB_SUBNET)
        for node in ("node1", "node2", "node3", "node4", "node5"):
            put_node_data(lab, node)
        yield lab
    finally:
        lab.down()


def node_sh(lab, node: str, command: str, stdin: str | None = None, timeout: int = 300):
    """A command on a lab node over its sshd (as conftest.lab_ssh, with input and a longer limit)."""
    return subprocess.run(
        ["ssh", "-i", str(lab.dir / "client_key"), "-o", f"UserKnownHostsFile={lab.dir / 'known_hosts'}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
         f"root@{lab.node(node).address}", command],
        input=stdin, capture_output=True, text=True, timeout=timeout,
    )


def manifests() -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def put_node_data(lab, node: str) -> None:
    """The ccrhost-node ConfigMap's file where the containers mount it (the
    node's /run is its own)."""
    docs = manifests()
    tune = by_name(daemonset(docs)["initContainers"], "tune")
    path = {e["name"]: e["value"] for e in tune["env"]}["CCRHOST_NODE_DATA"]
    name, key = configmap_file(docs, tune, path)
    text = by_kind(docs, "ConfigMap", name)["data"][key]
    put = node_sh(lab, node, f"mkdir -p {shlex.quote(os.path.dirname(path))} && cat > {shlex.quote(path)}", text)
    assert put.returncode == 0, put.stderr


# The image's PATH has pyinfra and ccrhost in /usr/local/bin; here they are
# this interpreter's, ahead of the node's own tools (the lab's shims first).
NODE_PATH = f"{os.path.dirname(sys.executable)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def container_command(container: dict, command: list[str], workdir: str) -> str:
    """``command`` with only the container's environment (no SSH variables),
    from ``workdir`` (the image's WORKDIR holds the repository's paths)."""
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    # COLUMNS only widens pyinfra's results table for PyinfraRun to parse
    env.update(PATH=NODE_PATH, HOME="/root", COLUMNS="200")
    return (f"cd {shlex.quote(workdir)} && env -i "
            + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(command))


def init_command(docs) -> str:
    tune = by_name(daemonset(docs)["initContainers"], "tune")
    assert tune["workingDir"] == IMAGE_WORKDIR
    return container_command(tune, tune["command"], str(REPO))


def npd_command(docs) -> str:
    rule = npd_monitor(docs)["rules"][0]
    assert rule["path"] == "/usr/local/bin/ccrhost"  # pip's console script in the image
    npd = by_name(daemonset(docs)["containers"], "node-problem-detector")
    return container_command(npd, [os.path.join(os.path.dirname(sys.executable), "ccrhost"), *rule["args"]], "/")


def run_result(proc):
    from conftest import PyinfraRun

    return PyinfraRun(proc.returncode, proc.stdout + proc.stderr)


@pytest.mark.lab
def test_init_command_tunes_the_node_from_inside_and_a_second_run_changes_nothing(lab):
    command = init_command(manifests())
    machine = Path("/etc/modules-load.d/ccrhost-rdma.conf")
    machine_before = machine.read_bytes() if machine.exists() else None
    first = run_result(node_sh(lab, "node1", command))
    assert first.rc == 0, first.out
    assert "@local" in first.out and first.changed(), first.out
    # the node's own state changed, not this machine's
    state = node_sh(lab, "node1", "grep -v '^#' /etc/modules-load.d/ccrhost-rdma.conf; "
                                  "cat /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode; "
                                  "ls /sys/module | grep -cx -e ib_uverbs -e rdma_ucm; grep -c NCCL_IB_HCA /etc/nccl.conf")
    assert state.stdout.splitlines() == ["ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm", "RoCE v2", "2", "1"]
    assert (machine.read_bytes() if machine.exists() else None) == machine_before
    second = run_result(node_sh(lab, "node1", command))
    assert second.rc == 0, second.out
    assert not second.changed(), second.results()


@pytest.mark.lab
def test_without_the_hosts_modules_the_modules_stage_fails_and_says_so(lab):
    release = os.uname().release
    hide = node_sh(lab, "node3", f"mv /lib/modules/{release} /lib/modules/hidden-{release}")
    assert hide.returncode == 0, hide.stderr
    try:
        before = node_sh(lab, "node3", "ls /etc/modules-load.d /sys/kernel/config/rdma_cm 2>&1; ls /sys/module")
        run = run_result(node_sh(lab, "node3", init_command(manifests())))
        assert run.rc == 1, run.out
        assert (f"modules not loaded (ib_uverbs, rdma_ucm): /lib/modules/{release} does not exist here, so "
                "modprobe cannot load a module for this kernel (in a container, mount the host's /lib/modules)"
                in run.out), run.out
        after = node_sh(lab, "node3", "ls /etc/modules-load.d /sys/kernel/config/rdma_cm 2>&1; ls /sys/module")
        assert after.stdout == before.stdout  # nothing applied, not even the later stages
    finally:
        node_sh(lab, "node3", f"mv /lib/modules/hidden-{release} /lib/modules/{release}")


@pytest.mark.lab
def test_without_the_hosts_modules_gpudirect_fails_rather_than_skip(lab):
    release = os.uname().release
    # tuned once without GPUDirect: every module the stages need is loaded
    data = node_sh(lab, "node5", "echo 'rdma_gpudirect: false' >> /run/ccrhost-node/node.yaml")
    assert data.returncode == 0
    run = run_result(node_sh(lab, "node5", init_command(manifests())))
    assert run.rc == 0, run.out
    put_node_data(lab, "node5")  # the ConfigMap's data again: GPUDirect on
    hide = node_sh(lab, "node5", f"mv /lib/modules/{release} /lib/modules/hidden-{release}")
    assert hide.returncode == 0, hide.stderr
    try:
        run = run_result(node_sh(lab, "node5", init_command(manifests())))
        assert run.rc == 1, run.out
        assert ("GPUDirect: cannot tell which peer-memory module the driver ships: "
                f"/lib/modules/{release} does not exist here" in run.out), run.out
        assert "modules not loaded" not in run.out
        assert "nvidia_peermem" not in node_sh(lab, "node5", "ls /sys/module").stdout.split()
    finally:
        node_sh(lab, "node5", f"mv /lib/modules/hidden-{release} /lib/modules/{release}")
    # with the modules there, the same data loads the module the driver ships
    run = run_result(node_sh(lab, "node5", init_command(manifests())))
    assert run.rc == 0, run.out
    assert "nvidia_peermem" in node_sh(lab, "node5", "ls /sys/module").stdout.split()


@pytest.mark.lab
def test_systemd_as_pid_1_without_its_run_directory_fails_the_boot_unit_stage(lab):
    # a hostPID container without the host's /run/systemd: PID 1 reads as
    # systemd (bound over /proc/1/comm in the node's own mount namespace)
    fake = node_sh(lab, "node5", "echo systemd > /run/comm && mount --bind /run/comm /proc/1/comm && cat /proc/1/comm")
    assert (fake.returncode, fake.stdout) == (0, "systemd\n"), fake.stderr
    try:
        run = run_result(node_sh(lab, "node5", init_command(manifests())))
        assert run.rc == 1, run.out
        assert ("boot unit: systemd runs this host (PID 1) but /run/systemd/system is not visible here, so "
                "ccrhost-boot.service cannot be enabled (in a container, mount the host's /run/systemd)" in run.out)
        assert "systemd is not running" not in run.out
    finally:
        node_sh(lab, "node5", "umount /proc/1/comm")
    run = run_result(node_sh(lab, "node5", init_command(manifests())))
    assert run.rc == 0 and "systemd is not running: ccrhost-boot.service installed, not enabled" in run.out, run.out


@pytest.mark.lab
def test_npd_plugin_command_gives_npd_codes_and_one_short_line(lab):
    lab.garble("node4", "nvidia-smi", ", 1980, 1980,", ", fast, 1980,")
    command = npd_command(manifests())
    expected = {"node1": (0, "OK: all checks passed"), "node2": (0, "WARN: gpu_throttled; action investigate"),
                "node3": (1, "FAIL: port_down,port_count,ccr_below_expected; action investigate"), "node4": (2, None)}
    for node, (code, line) in expected.items():
        out = node_sh(lab, node, command)
        assert out.returncode == code, (node, out.stdout, out.stderr)
        assert out.stdout.count("\n") == 1 and len(out.stdout.rstrip("\n").encode()) <= formats.NPD_MAX_OUTPUT
        if line is not None:
            assert out.stdout == line + "\n", node
    unknown = node_sh(lab, "node4", command)
    assert unknown.stdout.startswith("UNKNOWN: gpu_"), unknown.stdout
    # the setting turns WARN into NPD's problem, the rest unchanged
    warn_data = node_sh(lab, "node2", "echo 'verify_npd_warn_unhealthy: true' >> /run/ccrhost-node/node.yaml")
    assert warn_data.returncode == 0
    warn = node_sh(lab, "node2", command)
    assert (warn.returncode, warn.stdout) == (1, "WARN: gpu_throttled; action investigate\n")
