"""Deep-learning workloads for the broadcast: real networks' parameter lists and their start-up broadcast,
the gradient synchronisation priced by the cost model (``gradient_sync``) and run for real by
training the engine's GPT with a reduce + broadcast (``reduce_bcast_training``). They sit above both
``gpulab.bcast`` and ``gpulab.engine``: neither imports them.

    from gpulab.workloads import load, layer_bytes, NETWORKS
"""

from gpulab.workloads.networks import NETWORKS, PUBLISHED, layer_bytes, load, parameter_count

__all__ = ["NETWORKS", "PUBLISHED", "layer_bytes", "load", "parameter_count"]
