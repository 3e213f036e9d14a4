"""Inventory data the deploys read: the keys, their defaults, and validation.

Every host's data is validated before any host is touched. A key that
starts with one of ccrhost's prefixes but is not known (``roce_dcsp``) is an
error, not silently ignored: a typo would otherwise leave the default in
force on a whole cluster.

One module per domain holds its keys as a model (``qos.py``: QosSettings, ...);
``host.py`` joins them into HostSettings, every key a top-level field;
``validate.py`` checks a host's data against it.
"""

from ccrhost.settings.accept import AcceptSettings
from ccrhost.settings.active import ActiveSettings
from ccrhost.settings.baseline import BaselineSettings, MountSpec
from ccrhost.settings.ccr import CcrSettings, Precision
from ccrhost.settings.datapath import (
    DEFAULT_MODULES,
    DatapathSettings,
    DevicePattern,
    ModuleName,
    ReadReq,
    RoceMtu,
    VersionText,
)
from ccrhost.settings.evidence import EvidenceSettings
from ccrhost.settings.fabric import FabricCounter, FabricSettings, LinkCounter
from ccrhost.settings.gpu import GpuHealthSettings
from ccrhost.settings.history import HistorySettings
from ccrhost.settings.host import DOMAINS, HostSettings
from ccrhost.settings.install import InstallSettings
from ccrhost.settings.keys import CONTROLLER_ONLY, OWNED_PREFIXES, REMOVED_KEYS
from ccrhost.settings.measure import MeasureSettings
from ccrhost.settings.monitor import MonitorSettings
from ccrhost.settings.nccl import NCCL_TWINS, HcaList, IfnameList, NcclName, NcclSettings, NcclValue
from ccrhost.settings.nicfw import NicFwSettings
from ccrhost.settings.paths import (
    ETC_DROPIN_FOLDERS,
    PATH_SETTINGS,
    SLURM_OWN,
    STATE_PATHS,
    SYSTEM_TREE_EXCEPTIONS,
    SYSTEM_TREES,
    WRITTEN_PATHS,
    AbsPath,
    SearchPath,
)
from ccrhost.settings.qos import DcqcnName, EightBuffers, EightSizes, Priority, QosSettings
from ccrhost.settings.report import ReportSettings
from ccrhost.settings.slurm import HEALTHCHECK_STATES, SlurmSettings
from ccrhost.settings.validate import DataError, InventoryDataError, owned_keys, validate_all, validate_host
from ccrhost.settings.workload import Workload

__all__ = [
    "CONTROLLER_ONLY", "DEFAULT_MODULES", "DOMAINS", "ETC_DROPIN_FOLDERS", "HEALTHCHECK_STATES", "NCCL_TWINS",
    "OWNED_PREFIXES", "PATH_SETTINGS", "REMOVED_KEYS", "SLURM_OWN", "STATE_PATHS", "SYSTEM_TREES",
    "SYSTEM_TREE_EXCEPTIONS", "WRITTEN_PATHS",
    "AbsPath", "DcqcnName", "DevicePattern", "EightBuffers", "EightSizes", "FabricCounter", "HcaList", "IfnameList",
    "LinkCounter", "ModuleName", "NcclName", "NcclValue", "Precision", "Priority", "ReadReq", "RoceMtu",
    "SearchPath", "VersionText",
    "AcceptSettings", "ActiveSettings", "BaselineSettings", "MountSpec", "CcrSettings", "DatapathSettings", "EvidenceSettings", "FabricSettings", "GpuHealthSettings",
    "HistorySettings", "InstallSettings", "MeasureSettings", "MonitorSettings", "NcclSettings", "NicFwSettings",
    "QosSettings", "ReportSettings", "SlurmSettings",
    "HostSettings", "Workload", "DataError", "InventoryDataError", "owned_keys", "validate_all", "validate_host",
]
