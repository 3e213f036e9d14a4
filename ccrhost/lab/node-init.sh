#!/bin/sh
# Boot one emulated node. Runs as the first process of the node's private
# mount namespace (inside its network namespace) and stays as its holder.
# $1: the node's folder, prepared by the lab controller; $2: the shim folder.
set -eu
N=$1
# its own UTS namespace: the node answers to its lab name (hostname, Slurm)
hostname "$(basename "$N")"
mount -t tmpfs -o mode=0755 lab-sysfs /sys
cp -a "$N/image/sys/." /sys/
# The node's kernel command line and NVIDIA driver, not the machine's.
mount --bind "$N/boot/cmdline" /proc/cmdline
# The host baseline's files (lab/host.py): CPUs, memory and swap, and a data mount of its own.
for f in cpuinfo meminfo swaps; do mount --bind "$N/boot/$f" "/proc/$f"; done
mount -t tmpfs -o mode=0755 lab-mnt /mnt
mkdir /mnt/scratch
mount -t tmpfs -o "size=64m$([ -e "$N/boot/scratch_readonly" ] && echo ,ro)" scratch /mnt/scratch
if [ -e "$N/boot/nvidia_version" ]; then
    mount -t tmpfs -o mode=0755 lab-procdriver /proc/driver
    mkdir /proc/driver/nvidia
    cp "$N/boot/nvidia_version" /proc/driver/nvidia/version
fi
if [ -e "$N/boot/configfs_mounted" ]; then
    mount -t tmpfs -o mode=0755 configfs /sys/kernel/config
fi
for d in $(cat "$N/boot/readonly" 2>/dev/null); do
    mount --bind "$d" "$d" && mount -o remount,bind,ro "$d"
done
if [ -e "$N/boot/etc_full" ]; then
    # a small filesystem under the overlay's writable layer, filled up
    mkdir -p "$N/etc-small" && mount -t tmpfs -o size=256k etc-small "$N/etc-small"
    mkdir -p "$N/etc-small/upper" "$N/etc-small/work"
    cp -a "$N/etc/upper/." "$N/etc-small/upper/" 2>/dev/null || true
    dd if=/dev/zero of="$N/etc-small/filler" bs=4k 2>/dev/null || true
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$N/etc-small/upper,workdir=$N/etc-small/work" /etc
else
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$N/etc/upper,workdir=$N/etc/work" /etc
fi
# Name service as a container gets it: the node resolves its own name
# (sudo looks it up on every run) and has no DNS server, so no query ever
# leaves the lab (glibc falls back to a resolver on loopback).
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(basename "$N")" > "$N/boot/hosts"
: > "$N/boot/resolv.conf"
mount --bind "$N/boot/hosts" /etc/hosts
mount --bind "$N/boot/resolv.conf" /etc/resolv.conf
[ -e "$N/boot/etc_readonly" ] && mount -o remount,ro /etc
mount -t overlay overlay -o "lowerdir=/usr/lib,upperdir=$N/usrlib/upper,workdir=$N/usrlib/work" /usr/lib
# /usr/local is the node's own too: deploys/install.py puts ccrhost there
# (a venv, the /usr/local/bin/ccrhost link) on this node alone, and this
# machine's /usr/local/bin holds no ccrhost the node could run instead.
mkdir -p "$N/usrlocal/upper" "$N/usrlocal/work"  # a lab made before this layer had none
mount -t overlay overlay -o "lowerdir=/usr/local,upperdir=$N/usrlocal/upper,workdir=$N/usrlocal/work" /usr/local
mount --bind "$2" /usr/local/sbin
mount -o remount,bind,ro /usr/local/sbin
# /var/lib/ccrhost is the node's own: its state files (stored results,
# certificates, the failure history) are its disk's, kept across its reboots,
# never this machine's nor another node's. A lab folder under it (the
# default, /var/lib/ccrhost/lab) stays this machine's: parked on the node's
# own /mnt, moved back over the node's folder.
mkdir -p "$N/varlib" /var/lib/ccrhost
L=$(dirname "$(dirname "$N")")
case "$L/" in /var/lib/ccrhost/*) mkdir -p /mnt/.lab && mount --bind "$L" /mnt/.lab ;; esac
mount --bind "$N/varlib" /var/lib/ccrhost
case "$L/" in /var/lib/ccrhost/*) mkdir -p "$L" && mount --move /mnt/.lab "$L" && rmdir /mnt/.lab ;; esac
# Root's home is the controller machine's. bash run by sshd sources
# ~/.bashrc for every remote command, and a developer's one (pyenv init)
# cost each command 0.17 s of CPU and put the controller's toolchains on
# the node's PATH. The node's root gets an empty one.
home=$(awk -F: '$1 == "root" {print $6}' /etc/passwd)
if [ -n "$home" ] && [ -f "$home/.bashrc" ]; then
    : > "$N/boot/empty-bashrc"
    mount --bind "$N/boot/empty-bashrc" "$home/.bashrc"
fi
# The controller's own install, when it sits under /tmp or /run, stays
# visible so `ccrhost check` can run on the node: park it before those two
# are replaced, move it back after (a bind from another namespace is refused).
i=0
for p in $(cat "$N/boot/share" 2>/dev/null); do
    /bin/mkdir -p "$N/share/$i" && /bin/mount --bind "$p" "$N/share/$i"
    i=$((i + 1))
done
mount -t tmpfs -o mode=0755 lab-run /run
/bin/mkdir -p /run/sshd /run/ccrhost-lab
cp "$N/node.json" "$N/node.marshal" /run/ccrhost-lab/
mount -t tmpfs -o mode=1777 lab-tmp /tmp
i=0
for p in $(cat "$N/boot/share" 2>/dev/null); do
    /bin/mkdir -p "$p" && /bin/mount --move "$N/share/$i" "$p"
    i=$((i + 1))
done
if [ -e "$N/boot/imex_channel" ]; then  # an NVLink rack's tray: the IMEX channel device (lab/rack.py)
    c=$(cat "$N/boot/imex_channel") && mkdir -p "${c%/*}" && mknod "$c" c 234 0
fi
"$(cat "$N/boot/python")" "$2/labsysfsd.py" </dev/null >>"$N/sysfsd.log" 2>&1 &
: > "$N/boot/ready"
exec sleep infinity
