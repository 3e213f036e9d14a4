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

# The Slurm integration's own files (deploys/slurm.py); slurm_fragment is a setting.
CHECK_CONFIG = "/etc/ccrhost/check.yaml"
PROLOG = "/etc/ccrhost/slurm-prolog.sh"
HEALTHCHECK = "/etc/ccrhost/slurm-healthcheck.sh"
# Every drain reason ccrhost sets starts with this; others' reasons are never touched.
DRAIN_PREFIX = "ccrhost:"
