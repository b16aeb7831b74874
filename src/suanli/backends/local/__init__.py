"""The embedded backend: workloads on this host, in containers (or, with no engine, as
host processes with no isolation)."""

from suanli.backends.local.backend import PROCESS_LABEL, LocalBackend
from suanli.backends.local.nvml import DiscoveredGpu, discover_gpus

__all__ = ["PROCESS_LABEL", "DiscoveredGpu", "LocalBackend", "discover_gpus"]
