"""IMEX and NVLink tray keys: the IMEX service, its channel device, and the
rack (NVLink domain) a tray belongs to (model/imex.py, fleet/rack.py;
issue 49). Read where ``imex_enable`` is on: model/verdict.py tray_reasons."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from ccrhost.model.imex import ImexPolicy
from ccrhost.settings.paths import AbsPath

# a systemd unit name as `systemctl is-active` takes it (it goes into the probe's command line)
UnitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9:_.@-]{1,128}$")]
# a rack's name as Slurm's topology.conf takes a BlockName (no spaces, no '=' or '#')
RackName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class ImexSettings(BaseModel, defer_build=True):
    # IMEX and the NVLink tray (model/imex.py; shared/reference/platforms.md)
    imex_enable: bool = Field(
        False, description="Read and judge the node's IMEX domain (nvidia-imex-ctl -N), its IMEX unit and channel "
        "device, its GPUs' NVLink fabric membership and health, and its NVLinks against the platform's figures: for "
        "the trays of rack-scale NVLink systems (GB200/GB300 NVL72). Off elsewhere: an HGX node has no IMEX.",
    )
    imex_unit: UnitName = Field(
        "nvidia-imex", description="The IMEX systemd service (NVIDIA IMEX guide: the package registers "
        "`nvidia-imex`); not active FAILs the node (imex_unit_inactive).",
    )
    imex_channel: AbsPath = Field(
        "/dev/nvidia-caps-imex-channels/channel0", description="The IMEX channel device a job imports GPU memory "
        "through; not a character device FAILs the node (imex_channel_missing).",
    )
    imex_config: AbsPath = Field(
        "/etc/nvidia-imex/config.cfg", description="The IMEX configuration nvidia-imex-ctl -N reads (its -c; "
        "the tool's default).",
    )
    imex_rack: RackName | None = Field(
        None, description="The rack (NVLink domain) the inventory puts this tray in: the rack checks compare it with "
        "the cluster UUID and clique its GPUs report, and the Slurm block topology names its block after it. "
        "None: the tray is in no rack the inventory knows (rack_unreadable). Kept in check.yaml: a tray's reading "
        "says which rack it is in.",
    )

    def imex_policy(self) -> ImexPolicy:
        return ImexPolicy(enabled=self.imex_enable, unit=self.imex_unit, channel=self.imex_channel)
