# A production-style inventory: replace the host names with your nodes.
# The compute group's tuning lives in group_data/compute.py, where a merge
# request changes it; `ccrhost ci run` tests that change on lab nodes (docs/ci.md).
from ccrhost.inventory import require_hosts

#
# Host keys are checked strictly against ~/.ssh/known_hosts. pyinfra's own
# default is accept-new (trust on first use), and StrictHostKeyChecking in
# ~/.ssh/config is not read, so it is set here explicitly.
_ssh = {
    "ssh_user": "root",
    "ssh_strict_host_key_checking": "yes",
    "ssh_known_hosts_file": "~/.ssh/known_hosts",
}

compute = require_hosts("compute", (
    [f"gpu-{n:03d}.cluster.example" for n in range(1, 5)],
    _ssh,
))
