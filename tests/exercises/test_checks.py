"""Each exercise's check passes the reference solution (from the nbgrader source notebook) and fails a
planted wrong one with a message that names the fault: the rank, the bytes, the step, the peer, the gradient.

All calls of one rank count share one MPI job (tests.mpi_harness.batched_jobs); a planted deadlock ends
at the check's own deadline, and the job has its timeout on top.
"""

from __future__ import annotations

import re

import pytest

from tests.mpi_harness import batched_jobs

RANKS = 4
B, C, S, T, P, A = ("01_broadcast", "02_chain", "03_scatter_allgather", "04_tensor_parallel_3d",
                    "05_one_f_one_b", "06_alpha_beta")

# name -> (assignment, check, functions, check kwargs, what the message must say: None = it passes)
CASES = {
    "linear": (B, "check_bcast", ["ref:linear_bcast"], {"shape": "linear"}, None),
    "binomial": (B, "check_bcast", ["ref:binomial_bcast"], {"shape": "binomial"}, None),
    "linear_forgets_last_rank": (B, "check_bcast", ["planted:linear_forgets_last_rank"], {"shape": "linear"},
                                 (r"root 0, 4099 B:\n  rank 3 has 4099 wrong byte\(s\) at \[0, 4099\).*none of them was ever "
                                 r"written; it received no message")),
    "linear_always_from_rank_0": (B, "check_bcast", ["planted:linear_always_from_rank_0"], {"shape": "linear"},
                                  (r"root 1, 4099 B:\n  rank 0 has 4099 wrong byte.*it received no message\n"
                                  r"  rank 1 has .* came in the receive at step 1 from rank 0")),
    "binomial_relative_peers": (B, "check_bcast", ["planted:binomial_relative_peers"], {"shape": "binomial"},
                                (r"root 1, 4099 B:\n  rank \d sent 4099 B to rank \d \(tag 0\) at step \d, and rank \d never "
                                r"received it(.|\n)*rank \d stopped waiting: receiving from rank \d \(tag 0, 4099 B\) "
                                r"did not complete within 5 s")),
    "binomial_is_linear": (B, "check_bcast", ["planted:binomial_is_linear"], {"shape": "binomial"},
                           (r"gives the right bytes but not in a binomial pattern(.|\n)*it took 3 steps; a binomial "
                           r"tree on 4 ranks needs ceil\(log2 4\) = 2 \(rank \d received at step 3")),
    "binomial_shifted_by_one": (B, "check_bcast", ["planted:binomial_shifted_by_one"], {"shape": "binomial"},
                                (r"root 0, 4099 B:\n  rank 1 has \d+ wrong byte(.|\n)*the root's bytes from offset 1 "
                                r"\(an offset \+1 too far\)")),
    "chain": (C, "check_chain", ["ref:chain_bcast"], {}, None),
    "chain_drops_last_chunk": (C, "check_chain", ["planted:chain_drops_last_chunk"], {},
                               (r"chunk_bytes=1000\) is wrong on 4 ranks, root 0, 4099 B:\n  rank 1 has 99 wrong byte\(s\) at "
                               r"\[4000, 4099\).*none of them was ever written; none of its receives covered byte 4000")),
    "chain_whole_buffer": (C, "check_chain", ["planted:chain_whole_buffer"], {},
                           (r"right bytes but not in a chain pattern on 4 ranks, root 0, 4099 B:\n  rank 0 sent 1 message\(s\) "
                           r"to rank\(s\) \[1\]: in the chain it forwards 5 chunk\(s\), all to rank 1\n  rank 1 "
                           r"received 1 message\(s\) from rank\(s\) \[0\]: in the chain it receives 5 chunk\(s\)")),
    "scatter": (S, "check_scatter", ["ref:scatter"], {}, None),
    "ring_allgather": (S, "check_ring_allgather", ["ref:ring_allgather"], {}, None),
    "scatter_allgather": (S, "check_bcast", ["ref:scatter_allgather_bcast"], {}, None),
    "scatter_whole_buffer": (S, "check_scatter", ["planted:scatter_whole_buffer"], {},
                             r"not in a scatter pattern on 4 ranks, root 0, 4099 B:\n  rank 1 received 4099 B, the whole buffer"),
    "ring_sends_own_block": (S, "check_ring_allgather", ["planted:ring_sends_own_block_every_step"], {},
                             r"root 0, 4099 B:\n  rank 0 has 2050 wrong byte\(s\) at \[1025, 3075\).*none of them was ever written"),
    "ring_to_rank_0": (S, "check_ring_allgather", ["planted:ring_to_rank_0"], {},
                       (r"root 0, 4099 B:\n(.|\n)*rank 2 sent 1025 B to rank 0 \(tag 0\) at step 1, and rank 0 never received "
                       r"it\n  rank 0 stopped waiting after step 2: receiving from rank 3")),
    "tp3d": (T, "check_tp3d", ["ref:tp_forward", "ref:tp_backward"], {}, None),
    "forward_without_allreduce": (T, "check_tp3d", ["planted:forward_without_allreduce", "ref:tp_backward"], {},
                                  (r"mesh row=1, col=2, depth=2(.|\n)*rank 0 \(row 0, col 0, depth 0\): y differs by "
                                  r"up to [0-9.e+-]+ of its largest value(.|\n)*missing the all-reduce over col")),
    "backward_without_depth_sum": (T, "check_tp3d", ["ref:tp_forward", "planted:backward_without_depth_sum"], {},
                                   (r"depth=4(.|\n)*rank 1 \(row 0, col 0, depth 1\): dW differs by up to(.|\n)*missing the sum over "
                                   r"mesh.depth_comm")),
    "one_f_one_b": (P, "check_1f1b", ["ref:one_f_one_b"], {}, None),
    "gpipe_order": (P, "check_1f1b", ["planted:gpipe_order"], {},
                    (r"differs from the engine's 1F1B order at pipe=1, stage=0, micro=2: position 1 is \('F', 1\), "
                    r"the engine runs \('B', 0\)(.|\n)*holds 2 micro-batches' activations; 1F1B holds at most")),
    "backward_before_forward": (P, "check_1f1b", ["planted:backward_before_forward"], {},
                                (r"deadlocks on 4 stages with 6 micro-batches:\n  stage 0 stopped waiting at its step "
                                r"\d+: receiving from rank 1")),
    "alpha_beta": (A, "check_alpha_beta", ["ref:pingpong", "ref:fit_alpha_beta", "ref:predict_bcast"], {}, None),
    "pingpong_round_trip": (A, "check_alpha_beta", ["planted:pingpong_round_trip", "ref:fit_alpha_beta",
                                                    "ref:predict_bcast"], {}, r"the round trip, not one way"),
    "fit_swapped": (A, "check_alpha_beta", ["ref:pingpong", "planted:fit_swapped", "ref:predict_bcast"], {},
                    r"fit_alpha_beta gave alpha 0.0001 us, beta 2000 ns/B \(alpha and beta swapped\?\)"),
    "predict_floor_log": (A, "check_alpha_beta", ["ref:pingpong", "ref:fit_alpha_beta", "planted:predict_floor_log"],
                          {}, r"predict_bcast\('binomial', 1024, p=3, .*the model gives [0-9.]+ us = 2 x"),
}

job = batched_jobs({name: (RANKS, "tests.exercises.cases:run_check",
                           {"assignment": a, "check": c, "functions": f, "kwargs": k})
                    for name, (a, c, f, k, _) in CASES.items()}, timeout=400)


@pytest.mark.timeout(480)
@pytest.mark.parametrize("name", list(CASES))
def test_check(name):
    results = job(name)
    assert len(set(results)) == 1, f"the ranks disagree: {results}"
    verdict, expected = results[0], CASES[name][4]
    if expected is None:
        assert verdict.startswith("passed: "), verdict
    else:
        assert verdict.startswith("failed: "), f"the planted fault passed: {verdict}"
        assert re.search(expected, verdict), f"the message does not name the fault:\n{verdict}"
