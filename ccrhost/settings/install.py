"""Install keys: how deploys/install.py puts ccrhost on the compute nodes
(read by the controller only)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ccrhost.settings.keys import CONTROLLER_ONLY
from ccrhost.settings.paths import AbsPath


class InstallSettings(BaseModel, defer_build=True):
    # ccrhost on the compute nodes (deploys/install.py)
    ccrhost_install_dir: AbsPath = Field(
        "/usr/local/lib/ccrhost",
        description="Where deploys/install.py puts ccrhost on the node: a venv in `venv/`, the wheels it came from "
        "in `wheels/`; `slurm_ccrhost` becomes a link to `venv/bin/ccrhost`.",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_wheelhouse: str = Field(
        "ccrhost-wheelhouse", pattern=r"^[A-Za-z0-9_./-]{1,255}$",
        description="Folder on the controller with the ccrhost wheel of the controller's version and the wheels of "
        "its dependencies (`pip wheel --wheel-dir ccrhost-wheelhouse .` in the checkout); deploys/install.py "
        "uploads it, so the nodes need no network.",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_index_url: str | None = Field(
        None, pattern=r"^(https?://|file:///)[A-Za-z0-9_.:/@%+~-]{1,500}$",
        description="A package index the nodes reach (a site mirror: `https://`, or `file:///` on a shared "
        "folder; PEP 503 simple layout): the dependencies come from it, ccrhost itself still from the wheelhouse, "
        "which may then hold ccrhost's wheel alone. Default: none, the wheelhouse alone (pip --no-index).",
        json_schema_extra=CONTROLLER_ONLY,
    )
    ccrhost_python: str = Field(
        "python3", pattern=r"^(/[A-Za-z0-9_.+@/-]{1,254}|[A-Za-z0-9_.+-]{1,64})$",
        description="The node's Python (3.10 or later, with its venv module) that the venv is made with.",
        json_schema_extra=CONTROLLER_ONLY,
    )
