"""The embedded backend: workloads as process groups on this host."""

from suanli.backends.local.backend import LocalBackend
from suanli.backends.local.nvml import DiscoveredGpu, discover_gpus

__all__ = ["DiscoveredGpu", "LocalBackend", "discover_gpus"]
