"""Write each compute NIC's firmware settings that differ from the profile
(docs/nic-firmware.md); opt-in: run this deploy.

    pyinfra -y INVENTORY deploys/nic_firmware.py

`mlxconfig -d <bdf> -y set ...` writes the values for the next boot; only
what differs is written, so a second run changes nothing. It never reboots:
each host that owes a reboot says "reboot required" and the parameters.
Roll the reboots through Slurm (drain, `scontrol reboot`, verify, resume).
"""

from ccrhost.deploys import nic_firmware_stage

nic_firmware_stage()
