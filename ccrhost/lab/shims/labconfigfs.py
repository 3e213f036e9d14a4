"""Lab mkdir under /sys/kernel/config/rdma_cm, for what the ``mkdir`` shim
does not do in shell (several paths, other options, the rdma_vanish
fault): the kernel only creates a group for an existing RDMA device
(make_cma_dev(), -ENODEV otherwise) and then adds ports/<n>/ with their
attributes. Elsewhere it is plain mkdir."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import labkernel  # noqa: E402

CM = "/sys/kernel/config/rdma_cm"


def make_group(path):
    dev = os.path.basename(path)
    ports = f"/sys/class/infiniband/{dev}/ports"
    if not os.path.isdir(ports):
        labkernel.die(f"mkdir: cannot create directory '{path}': No such device")
    if os.path.isdir(path):
        labkernel.die(f"mkdir: cannot create directory '{path}': File exists")
    os.mkdir(path)
    for port in sorted(os.listdir(ports)):
        os.makedirs(f"{path}/ports/{port}")
        # cma_add_one() defaults: the first supported GID type (RoCE v1), ToS 0.
        with open(f"{path}/ports/{port}/default_roce_mode", "w") as f:
            f.write("IB/RoCE v1\n")
        with open(f"{path}/ports/{port}/default_roce_tos", "w") as f:
            f.write("0\n")


args = sys.argv[1:]
paths = [a for a in args if not a.startswith("-")]
if paths and all(os.path.dirname(os.path.abspath(p)) == CM for p in paths):
    labkernel.hot_unplug()
    for p in paths:
        if "-p" in args and os.path.isdir(os.path.abspath(p)):
            continue
        make_group(os.path.abspath(p))
    sys.exit(0)
os.execv("/bin/mkdir", ["mkdir"] + args)
