"""Deep-learning workloads for the broadcast: real networks' parameter lists and their start-up broadcast.

    from gpulab.workloads import load, layer_bytes, NETWORKS
"""

from gpulab.workloads.networks import NETWORKS, PUBLISHED, layer_bytes, load, parameter_count

__all__ = ["NETWORKS", "PUBLISHED", "layer_bytes", "load", "parameter_count"]
