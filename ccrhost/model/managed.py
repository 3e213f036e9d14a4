"""Every file ccrhost manages on a node. The node snapshot reads them all in
its one command, so each is named here once."""

# The first line of every file ccrhost writes whole.
MANAGED_HEADER = "# Managed by ccrhost: local edits are overwritten on the next deploy.\n"

MODULES_FILE = "/etc/modules-load.d/ccrhost-rdma.conf"
PEERMEM_FILE = "/etc/modules-load.d/ccrhost-peermem.conf"  # the one peer-memory module, when ccrhost loads it
NCCL_CONF = "/etc/nccl.conf"  # NCCL's own file: only ccrhost's marked block is ours
NCCL_PROFILE = "/etc/profile.d/ccrhost-nccl.sh"
BOOT_SCRIPT = "/etc/ccrhost/boot-apply.sh"
QOS_INTERFACES = "/etc/ccrhost/qos-interfaces"  # written by the QoS stage: interfaces it finished
UNIT = "ccrhost-boot.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
UNIT_WANTS = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"  # exists once the unit is enabled

FILES = (MODULES_FILE, NCCL_CONF, NCCL_PROFILE, BOOT_SCRIPT, UNIT_PATH, QOS_INTERFACES, PEERMEM_FILE)

# The Slurm integration's files (deploys/slurm.py writes them; ccrhost/fleet/slurm.py
# names them too, and a test holds the two alike).
CHECK_CONFIG = "/etc/ccrhost/check.yaml"
SLURM_PROLOG = "/etc/ccrhost/slurm-prolog.sh"
SLURM_HEALTHCHECK = "/etc/ccrhost/slurm-healthcheck.sh"
# slurm_healthcheck: nhc. NHC sources every $INCDIR/*.nhc (default /etc/nhc/scripts);
# nhc.conf, the site's own file, names the check: `* || check_ccrhost`.
NHC_CHECK = "/etc/nhc/scripts/ccrhost.nhc"

# Each file above and what it is, for messages that refuse a setting naming one.
WHAT = {
    MODULES_FILE: "ccrhost's RDMA module list",
    PEERMEM_FILE: "ccrhost's peer-memory module file",
    NCCL_CONF: "NCCL's own /etc/nccl.conf",
    NCCL_PROFILE: "ccrhost's NCCL environment profile",
    BOOT_SCRIPT: "ccrhost's boot script",
    UNIT_PATH: "ccrhost's boot unit",
    UNIT_WANTS: "ccrhost's boot unit link",
    QOS_INTERFACES: "ccrhost's QoS interface list",
    CHECK_CONFIG: "the check's settings (check.yaml)",
    SLURM_PROLOG: "ccrhost's Slurm prolog",
    SLURM_HEALTHCHECK: "ccrhost's Slurm health check",
    NHC_CHECK: "ccrhost's check for LBNL NHC",
}
# Every drain reason ccrhost sets starts with this; others' reasons are never touched.
DRAIN_PREFIX = "ccrhost:"
