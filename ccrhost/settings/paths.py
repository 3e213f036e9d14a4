"""The rules of the settings that name a path: which files ccrhost may write
on a node, and how a path is named plainly."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

# Paths written into shell scripts and slurm.conf: absolute, no white space or shell metacharacters.
AbsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_.+@/-]{0,254}$")]
SearchPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_.+@/-]*(:/[A-Za-z0-9_.+@/-]*){0,31}$")]
# --- settings that name a path -------------------------------------------------
# A path setting must name one file plainly: no "." or ".." component (they
# would walk past every rule below), no empty one, no trailing "/".
# The files ccrhost writes on a node (slurm_fragment, verify_link_state) must
# also be its own; refused, and why:
# - Slurm's own configuration files, by name wherever they live (a site keeps
#   them in /etc/slurm, /etc/slurm-llnl or /usr/local/etc): the man pages of
#   slurm.conf(5), slurmdbd.conf(5), cgroup.conf(5), gres.conf(5),
#   topology.conf(5), acct_gather.conf(5), burst_buffer.conf(5),
#   helpers.conf(5), job_container.conf(5), mpi.conf(5), oci.conf(5), and
#   spank(8)'s plugstack.conf; and the slurm_conf value itself.
SLURM_OWN = ("slurm.conf", "slurmdbd.conf", "cgroup.conf", "gres.conf", "topology.conf", "acct_gather.conf",
             "burst_buffer.conf", "helpers.conf", "job_container.conf", "mpi.conf", "oci.conf", "plugstack.conf")
# - ccrhost's own files of another key (ccrhost/model/managed.py WHAT), NCCL's /etc/nccl.conf among them.
# - The trees of the package manager (/usr, /bin, /sbin, /lib*), of boot
#   (/boot) and the kernel's interfaces (/dev, /proc, /sys): nothing there is
#   a site's file to replace. Two sub-trees are: /usr/local/etc is Slurm's
#   configuration folder when built with the default prefix, and /dev/shm is
#   a plain tmpfs (a state file there lasts until reboot, as under /run).
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/libexec", "/boot", "/dev",
                "/proc", "/sys")
SYSTEM_TREE_EXCEPTIONS = ("/usr/local/etc", "/dev/shm")
# - A file directly in /etc (passwd, shadow, group, fstab, hosts, sudoers,
#   nccl.conf...) is the system's, unless its name starts with "ccrhost".
# - /etc folders whose every file the system parses or runs: a JSON file or
#   a slurm.conf fragment there breaks sudo, cron, PAM, logins or the boot.
ETC_DROPIN_FOLDERS = ("/etc/sudoers.d", "/etc/cron.d", "/etc/cron.hourly", "/etc/cron.daily", "/etc/cron.weekly",
                      "/etc/cron.monthly", "/etc/profile.d", "/etc/pam.d", "/etc/security", "/etc/ssh",
                      "/etc/systemd", "/etc/modprobe.d", "/etc/modules-load.d", "/etc/sysctl.d", "/etc/ld.so.conf.d",
                      "/etc/udev", "/etc/init.d", "/etc/default", "/etc/apt", "/etc/yum.repos.d", "/etc/logrotate.d",
                      "/etc/network", "/etc/netplan", "/etc/NetworkManager", "/etc/tmpfiles.d", "/etc/rc.d")


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def file_name_problem(path: str) -> str | None:
    """Why ``path`` does not plainly name one file, or None."""
    if path == "/" or path.endswith("/"):
        return "names a folder; allowed: the path of a file"
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component; allowed: a plain absolute path"
    return None


def system_tree(path: str) -> str | None:
    """The system tree that ``path`` (absolute, plain) is in, or None."""
    if any(within(path, ok) for ok in SYSTEM_TREE_EXCEPTIONS):
        return None
    return next((tree for tree in SYSTEM_TREES if within(path, tree)), None)


def _not_ours(path: str) -> str | None:
    """Why ccrhost may not write the file ``path``, or None (the rules above)."""
    from ccrhost.model.managed import WHAT

    name = path.rsplit("/", 1)[-1]
    if name in SLURM_OWN:
        return f"is Slurm's own {name}"
    if path in WHAT:
        return f"is {WHAT[path]}"
    tree = system_tree(path)
    if tree:
        return f"is a system file (under {tree})"
    folder = next((f for f in ETC_DROPIN_FOLDERS if within(path, f)), None)
    if folder:
        return f"is in {folder}, whose every file the system reads"
    if path.count("/") == 2 and path.startswith("/etc/") and not name.startswith("ccrhost"):
        return "is a system file directly in /etc"
    return None


def written_file(path: str, example: str) -> str:
    problem = file_name_problem(path)
    why = _not_ours(path) if problem is None else None
    if problem:
        raise ValueError(problem)
    if why:
        raise ValueError(f"{why}; allowed: a file of ccrhost's own, such as {example}")
    return path


# - A folder ccrhost writes into (verify_evidence_dir) is none of these
#   trees nor /etc or a top-level folder itself (/var, /run, /tmp...): its
#   bundles are pruned by name, and a bundle is a folder of ccrhost's own.
TOP_LEVEL_FOLDERS = ("/etc", "/var", "/run", "/home", "/root", "/opt", "/srv", "/tmp", "/mnt", "/media")


def written_folder(path: str, example: str) -> str:
    """``path`` when ccrhost may write folders into it (written_file's
    rules for a folder); else ValueError saying why and what is allowed."""
    if any(p in ("", ".", "..") for p in path.split("/")[1:]) or path == "/":
        raise ValueError("is the root folder or has an empty, '.' or '..' component; allowed: a plain absolute "
                         f"path of a folder of ccrhost's own, such as {example}")
    tree = system_tree(path)
    folder = next((f for f in ETC_DROPIN_FOLDERS if within(path, f)), None)
    if tree or folder or path in TOP_LEVEL_FOLDERS:
        where = f"under {tree}" if tree else f"in {folder}" if folder else "a top-level system folder"
        raise ValueError(f"is a system folder ({where}); allowed: a folder of ccrhost's own, such as {example}")
    return path


# Every setting naming a file ccrhost replaces (the state files on each
# check): one validator (written_file) and one distinctness rule against
# every other path setting; a new one is added here and nowhere else.
STATE_PATHS = ("verify_link_state", "verify_gpu_state", "verify_allreduce_state", "verify_history", "verify_dcgm_state",
               "host_health_state", "accept_certificate")
WRITTEN_PATHS = ("slurm_fragment", *STATE_PATHS, "slurm_drain_cap_textfile")
# the folder the evidence bundles go into (written_folder): no file setting may be it
WRITTEN_FOLDERS = ("verify_evidence_dir",)
PATH_SETTINGS = (*WRITTEN_PATHS, *WRITTEN_FOLDERS, "slurm_ccrhost", "slurm_conf")
# the files ccrhost writes beside a setting's file: the history's lock
# (node/history_file.py), the GPU resets' times (node/gpu_reset.py)
BESIDE = {"verify_history": ".lock", "verify_gpu_state": ".resets"}
STATE_EXAMPLE = "/run/ccrhost/counters.json"
EVIDENCE_EXAMPLE = "/var/lib/ccrhost/evidence"
