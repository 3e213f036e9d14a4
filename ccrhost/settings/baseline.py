"""Host baseline keys: what a node of its build must look like (CPUs, memory,
swap, hugepages, mounts, kernel modules, command line, sysctls, clocksource,
version pins); model/baseline.py judges them, docs/host-baseline.md. Each
key's empty value (None, (), {}) leaves its check off: a platform file or the
site sets what its nodes must have."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ccrhost.settings.datapath import ModuleName, VersionText

# a path under /proc/self/mounts: absolute, no whitespace (the kernel writes it as \040)
MountPoint = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9_./@+-]{0,255}$")]
# a /proc/cmdline word: a flag or key=value, as the kernel splits them (no spaces, no quotes)
CmdlineWord = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:/=+-]{1,255}$")]
# a sysctl name as sysctl(8) writes it (kernel.numa_balancing), read under /proc/sys with '.' as '/'
SysctlName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+){1,7}$")]
# a hugepage size as sysfs names it: /sys/kernel/mm/hugepages/hugepages-<size>
HugepageSize = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,12}kB$")]
# what a kernel release begins with: 5.15.0-1061 for 5.15.0-1061-azure
KernelText = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}([._-][0-9]{1,9}){0,15}$")]


class MountSpec(BaseModel):
    """One required mount (NHC's check_fs_mount_rw, check_fs_free, check_fs_inodes)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    fstype: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.]{1,32}$")] | None = Field(
        None, description="The filesystem type /proc/self/mounts must show (ext4, xfs, nfs4, tmpfs); None: any.")
    rw: bool = Field(True, description="Mounted read-write (its options begin rw); false: either.")
    min_free_pct: float | None = Field(
        None, ge=0, le=100, description="Least free space, percent of the size (statvfs f_bavail / f_blocks).")
    min_free_inodes_pct: float | None = Field(
        None, ge=0, le=100, description="Least free inodes, percent (statvfs f_favail / f_files); a filesystem "
        "without inode counts (f_files 0) is not judged.")


class BaselineSettings(BaseModel, defer_build=True):
    # CPUs: /sys/devices/system/cpu/{online,possible}, /proc/cpuinfo
    baseline_cpus_all_online: bool = Field(
        False, description="Every possible CPU is online: /sys/devices/system/cpu/online equals .../possible "
        "(NVIDIA Health Validation's cpu check); a CPU taken offline FAILS the node (host_cpus_offline).",
    )
    baseline_cpu_sockets: int | None = Field(
        None, ge=1, le=64, description="CPU sockets (distinct `physical id` in /proc/cpuinfo; NHC's "
        "check_hw_cpuinfo first figure).",
    )
    baseline_cpu_cores: int | None = Field(
        None, ge=1, le=65536, description="Physical cores, all sockets (distinct `physical id`/`core id` pairs in "
        "/proc/cpuinfo; NHC's check_hw_cpuinfo second figure).",
    )
    baseline_cpu_threads: int | None = Field(
        None, ge=1, le=65536, description="Logical CPUs online (`processor` entries in /proc/cpuinfo; NHC's "
        "check_hw_cpuinfo third figure; Azure's H100 file: 2 96 96).",
    )
    baseline_cpu_model: str | None = Field(
        None, min_length=1, max_length=200, description="The CPU model every processor must show, as "
        "/proc/cpuinfo's `model name` reads (e.g. \"AMD EPYC 9V84 96-Core Processor\").",
    )
    # memory: /proc/meminfo
    baseline_memory_total_kib: int | None = Field(
        None, ge=1, description="Expected MemTotal of /proc/meminfo in kB (KiB, as the kernel prints it); "
        "a node short by more than baseline_memory_tolerance_pct FAILS (host_memory_short), one over by more "
        "WARNS (host_memory_over). Azure's H100 file: 1915071 MB at 5% (NHC check_hw_physmem).",
    )
    baseline_memory_tolerance_pct: float = Field(
        5, ge=0, le=50, description="Percent baseline_memory_total_kib may differ either way (NHC's "
        "check_hw_physmem tolerance; Azure uses 5% for H100, 3% for H200).",
    )
    baseline_swap_max_kib: int | None = Field(
        None, ge=0, description="Most SwapTotal (/proc/meminfo, kB) allowed: 0 means swap off (Azure's "
        "check_hw_swap 0kB); more swap FAILS the node (host_swap_on). None: swap is not judged.",
    )
    baseline_hugepages: dict[HugepageSize, Annotated[int, Field(ge=0)]] = Field(
        {}, description="Hugepages each size must have, by the size sysfs names "
        "(/sys/kernel/mm/hugepages/hugepages-<size>/nr_hugepages): {\"2048kB\": 5128, \"1048576kB\": 2} "
        "(NVIDIA's GB200 tuned profile). Fewer FAIL (host_hugepages); a size the kernel lacks is FAIL too.",
    )
    baseline_mounts: dict[MountPoint, MountSpec] = Field(
        {}, description="Mounts the node must have, by mount point: each {fstype, rw, min_free_pct, "
        "min_free_inodes_pct} (NHC's check_fs_mount_rw, check_fs_free, check_fs_inodes), read from "
        "/proc/self/mounts and statvfs. Missing, read-only, of another type, short of space or of inodes: "
        "each its own code.",
    )
    baseline_modules: tuple[ModuleName, ...] = Field(
        (), description="Kernel modules that must be loaded or built in (/sys/module, modules.builtin), beyond "
        "rdma_modules (which the deploy loads): for instance ib_umad, which Fabric Manager's precheck needs "
        "on HGX B200.",
    )
    baseline_cmdline: tuple[CmdlineWord, ...] = Field(
        (), description="Words /proc/cmdline must hold, each a flag (`init_on_alloc=0` style key=value or a bare "
        "word): iommu=pt (AMD's cluster validation), iommu.passthrough=1 (NVIDIA's GB200 tuned profile). A key "
        "given with another value, or missing, FAILS (host_cmdline); the last value of a key is the one in force.",
    )
    baseline_sysctl: dict[SysctlName, Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        {}, description="Sysctls and the value each must have, read from /proc/sys (kernel.numa_balancing: "
        "\"0\"); values are compared word by word, as sysctl prints them. Another value FAILS (host_sysctl).",
    )
    baseline_clocksource: str | None = Field(
        None, pattern=r"^[a-z0-9_-]{1,32}$", description="The clocksource in use "
        "(/sys/devices/system/clocksource/clocksource0/current_clocksource), e.g. tsc (gcm's check_processor); "
        "another WARNS (host_clocksource).",
    )
    # version pins: the oldest allowed, compared number by number (model.datapath.compare_versions); the
    # NVIDIA driver's pin is verify_required_nvidia and the mlx5 driver's verify_required_mlx5 (data path)
    baseline_kernel_min: KernelText | None = Field(
        None, description="Oldest kernel allowed: its release (uname -r, /proc/sys/kernel/osrelease) up to the "
        "first word, 5.15.0-1061 of 5.15.0-1061-azure (host_kernel_version).",
    )
    baseline_cuda_min: VersionText | None = Field(
        None, description="Oldest CUDA toolkit allowed: /usr/local/cuda/version.json's cuda version, else "
        "version.txt's (host_cuda_version).",
    )
    baseline_nccl_min: VersionText | None = Field(
        None, description="Oldest NCCL library allowed: the version in the name of the file libnccl.so.2 "
        "resolves to (ldconfig's cache; libnccl.so.2.21.5) (host_nccl_version).",
    )
    baseline_ofed_min: VersionText | None = Field(
        None, description="Oldest MLNX_OFED/DOCA-OFED allowed: `ofed_info -s` (MLNX_OFED_LINUX-24.10-1.1.4.0); "
        "a node without ofed_info runs the upstream (inbox) stack and FAILS such a pin (host_ofed_version).",
    )

    def baseline_ask(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(sysctl names, mount points) the host baseline probe reads beyond its fixed files."""
        return tuple(sorted(self.baseline_sysctl)), tuple(sorted(self.baseline_mounts))

    def baseline_policy(self):
        """How a check judges the node's baseline reading; None when no baseline key is set (then
        nothing of it is judged and a check never imports it)."""
        from ccrhost.model.baseline import BaselinePolicy, Mount

        policy = BaselinePolicy(
            cpus_all_online=self.baseline_cpus_all_online, cpu_sockets=self.baseline_cpu_sockets,
            cpu_cores=self.baseline_cpu_cores, cpu_threads=self.baseline_cpu_threads,
            cpu_model=self.baseline_cpu_model, memory_total_kib=self.baseline_memory_total_kib,
            memory_tolerance_pct=self.baseline_memory_tolerance_pct, swap_max_kib=self.baseline_swap_max_kib,
            hugepages=tuple(sorted(self.baseline_hugepages.items())),
            mounts=tuple(Mount(path, m.fstype, m.rw, m.min_free_pct, m.min_free_inodes_pct)
                         for path, m in sorted(self.baseline_mounts.items())),
            modules=tuple(self.baseline_modules), cmdline=tuple(self.baseline_cmdline),
            sysctl=tuple(sorted(self.baseline_sysctl.items())), clocksource=self.baseline_clocksource,
            kernel_min=self.baseline_kernel_min, cuda_min=self.baseline_cuda_min, nccl_min=self.baseline_nccl_min,
            ofed_min=self.baseline_ofed_min)
        return policy if policy.any() else None
