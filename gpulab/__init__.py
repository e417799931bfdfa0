"""gpulab: learn and measure how deep-learning training moves data between GPUs.

Two halves share one harness:
- ``gpulab.bcast``: MPI broadcast algorithms on point-to-point calls, a cost
  model and an autotuner (Awan et al., "MPI or NCCL?").
- ``gpulab.engine``: a 4D-parallel (3D tensor x data) GPT in numpy/CuPy with
  hand-written backward passes (Singh et al., AxoNN).
"""

__version__ = "0.1.0"
