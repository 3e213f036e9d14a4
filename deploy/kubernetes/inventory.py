"""pyinfra inventory of the node this container runs on: ``@local`` (pyinfra's
local connector runs every command here, where the host's /sys, network and
PIDs are), with the inventory data of the ``ccrhost-node`` ConfigMap. The data
is validated like any inventory's before a single command runs."""

import os

import yaml

_PATH = os.environ.get("CCRHOST_NODE_DATA", "/run/ccrhost-node/node.yaml")
with open(_PATH) as _file:
    _data = yaml.safe_load(_file) or {}
if not isinstance(_data, dict):
    raise SystemExit(f"ccrhost: {_PATH}: expected a mapping of inventory keys, got {type(_data).__name__}")

node = [("@local", _data)]
