#!/bin/sh
# Boot one emulated node. Runs as the first process of the node's private
# mount namespace (inside its network namespace) and stays as its holder.
# $1: the node's folder, prepared by the lab controller; $2: the shim folder.
set -eu
N=$1
mount -t tmpfs -o mode=0755 lab-sysfs /sys
cp -a "$N/image/sys/." /sys/
if [ -e "$N/boot/configfs_mounted" ]; then
    mount -t tmpfs -o mode=0755 configfs /sys/kernel/config
fi
for d in $(cat "$N/boot/readonly" 2>/dev/null); do
    mount --bind "$d" "$d" && mount -o remount,bind,ro "$d"
done
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$N/etc/upper,workdir=$N/etc/work" /etc
mount -t overlay overlay -o "lowerdir=/usr/lib,upperdir=$N/usrlib/upper,workdir=$N/usrlib/work" /usr/lib
mount --bind "$2" /usr/local/sbin
mount -o remount,bind,ro /usr/local/sbin
mount -t tmpfs -o mode=0755 lab-run /run
mkdir -p /run/sshd /run/ccrhost-lab
cp "$N/node.json" /run/ccrhost-lab/node.json
mount -t tmpfs -o mode=1777 lab-tmp /tmp
# The controller's own install, when it sits under /tmp or /run, stays
# visible so `ccrhost check` can run on the node (pid 1 still sees it).
for p in $(cat "$N/boot/share" 2>/dev/null); do
    mkdir -p "$p" && mount --bind "/proc/1/root$p" "$p"
done
"$(cat "$N/boot/python")" "$2/labsysfsd.py" </dev/null >>"$N/sysfsd.log" 2>&1 &
: > "$N/boot/ready"
exec sleep infinity
