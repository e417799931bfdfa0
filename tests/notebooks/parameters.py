"""The notebooks' parameters under test: smaller than their defaults, the same code paths.

Executed notebooks (tests/notebooks) and the browser test (tests/browser, which serves
copies of the notebooks with these injected after the "parameters" cell) both use them.
"""

# 4 ranks everywhere, so that trees and chains differ
PARAMETERS = {
    # the recorded board only: one claim alone took 84-89 s at load 20 (g, h); tests/scoreboard runs them live
    "00_start_here": {"NBYTES": 1 << 16, "ITERS": 5, "SCOREBOARD_LIVE": ()},
    "01_broadcast_algorithms": {"SIZES": [1 << 10, 1 << 16], "ITERS": 5},
    # the scoreboard's rows live are tests/scoreboard's: here the recorded ones only
    "02_broadcast_explorer": {"SIZES": (1 << 10, 1 << 14), "ITERS": 5, "DENSE_SIZES": (1 << 10, 1 << 12),
                              "SCOREBOARD_LIVE": ()},
    # 10 Gbit/s: the start-up broadcast of ResNet-50 (102 MB, six times) took 10.8 s of the test at 1 Gbit/s
    "03_model_and_tuning": {"LINK": "10gbit", "FIT_SIZES": [64, 8192, 1 << 20], "CHECK_SIZES": [1 << 12, 1 << 20],
                            "CHUNK_MESSAGE": 1 << 20, "CHUNKS": [1 << 16, 1 << 18], "TUNE_SIZES": [1 << 10, 1 << 18],
                            "NETWORKS": ["resnet50"],
                            "TRAIN_STEPS": 3, "SCOREBOARD_LIVE": ()},  # the live training: 2 steps counted
    "04_tensor_parallel_3d": {},  # already small: one 8 x 12 layer on 4 ranks
    "05_mesh_explorer": {"ITERS": 2, "ROUNDS": 2, "FIT_REPS": 1},  # every 4-rank grid, overlap on and off
    "06_scaling_on_paper": {"WEAK": [("gpt-5b", 64), ("gpt-80b", 1024), ("gpt-640b", 16384)]},
    # every strategy live, both pipelines
    "07_axonn_vs_baselines": {"ITERS": 2, "FIT_REPS": 1, "MICRO": 4, "SCOREBOARD_LIVE": ()},
    "08_calculator": {"VOLUME_GPUS": [8, 16, 32]},  # arithmetic only; fewer points of the 1D vs 3D search
}
