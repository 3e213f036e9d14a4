#!/usr/bin/env python3
"""Lab ip, ``ip link set ...`` (the ``ip`` shim hands only those here): on
an emulated netdev (one that /sys/class/net shows but the node's network
namespace does not have) ``ip link set [dev] NETDEV mtu N`` changes its
MTU the way the kernel does: within the device's range (mlx5: 68 to 9978),
refused with dev_validate_mtu()'s messages otherwise; ``ip link set [dev]
NETDEV down|up`` sets it administratively down or up: its operstate reads
"down", and its carrier file fails (EINVAL, net-sysfs.c carrier_show: the
netdev is not running; the lab removes it, which reads the same to
``grep -s``), until it is set up again. Changes last until the next boot.
Every other command is the real ip."""

import os
import sys

REAL = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.access(p, os.X_OK)), None)
MIN_MTU, MAX_MTU = 68, 9978  # ETH_MIN_MTU; mlx5e's max_mtu on ConnectX


def emulated(netdev):
    return (os.path.exists(f"/sys/class/net/{netdev}/mtu")
            and not os.path.exists(f"/proc/sys/net/ipv4/conf/{netdev}"))


def link_set(argv):
    """``link set [dev] NAME ...`` -> [NAME, ...], or None for any other command."""
    if argv[:2] != ["link", "set"]:
        return None
    rest = argv[2:]
    return rest[1:] if rest[:1] == ["dev"] else rest


def set_mtu(argv):
    """``link set [dev] NAME mtu N`` -> (name, value) or None."""
    rest = link_set(argv)
    return (rest[0], rest[2]) if rest and len(rest) == 3 and rest[1] == "mtu" else None


def set_admin(argv):
    """``link set [dev] NAME up|down`` -> (name, "up"|"down") or None."""
    rest = link_set(argv)
    return (rest[0], rest[1]) if rest and len(rest) == 2 and rest[1] in ("up", "down") else None


def admin(netdev, state):
    base = f"/sys/class/net/{netdev}"
    with open(f"{base}/operstate", "w") as f:
        f.write(f"{state}\n")
    if state == "down":
        try:
            os.unlink(f"{base}/carrier")
        except FileNotFoundError:
            pass
    else:
        with open(f"{base}/carrier", "w") as f:
            f.write("1\n")


def main(argv):
    wanted = set_admin(argv)
    if wanted is not None and emulated(wanted[0]):
        admin(*wanted)
        return
    target = set_mtu(argv)
    if target is None or not emulated(target[0]):
        if REAL is None:
            sys.exit("ip: the real ip (iproute2) is not installed")
        os.execv(REAL, ["ip", *argv])
    netdev, value = target
    if not value.isdigit():
        sys.stderr.write(f'Error: argument "{value}" is wrong: Invalid "mtu" value\n\n')
        sys.exit(255)
    mtu = int(value)
    if mtu < MIN_MTU or mtu > MAX_MTU:
        word = "less than device minimum" if mtu < MIN_MTU else "greater than device maximum"
        sys.stderr.write(f"Error: mtu {word}.\n")
        sys.exit(2)
    with open(f"/sys/class/net/{netdev}/mtu", "w") as f:
        f.write(f"{mtu}\n")


main(sys.argv[1:])
