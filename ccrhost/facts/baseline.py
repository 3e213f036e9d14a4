"""The versions a node's active results ran under (driver, NCCL library,
NIC firmware), as a fact for deploys/baseline.py: the same script
``ccrhost baseline results`` runs on the node itself."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.node.baseline_results import VERSIONS_SCRIPT


class BaselineVersions(FactBase):
    """The script's lines, parsed by ``node.baseline_results.parse_versions`` on the controller."""

    def default(self):
        return ""

    def command(self):
        return VERSIONS_SCRIPT

    def process(self, output):
        return "\n".join(output)
