"""`gpulab model memory`: the breakdown it prints, its JSON, and bad input as one line."""

import json

import pytest

from gpulab.cli import main
from gpulab.engine.parallel.collectives import wire_bytes
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.memory_model import machine_precision, memory_breakdown
from gpulab.engine.perf.predict import DEFAULT_OVERLAP, gpt_config

ISSUE = ["model", "memory", "--model", "gpt-80b", "--mesh", "8,1,4,8", "--pipe", "4", "--micro-batches", "16",
         "--schedule", "1f1b", "--recompute", "full", "--zero", "1", "--global-batch", "1024",
         "--machine", "perlmutter"]


def test_the_issue_command_prints_every_kind_and_the_total_against_the_device(capsys):
    assert main(ISSUE) == 0
    out = capsys.readouterr().out
    for label in ("weights", "gradients", "optimizer state", "activations", "gathered weights (overlap)",
                  "communication buffers", "total"):
        assert f"  {label} " in out
    assert "11 layers, recomputed" in out and "x 4 micro-batches in flight" in out  # stage 0: ceil(42/4), 1F1B
    assert "of 36.0 GB usable (40 GB device): fits" in out


def test_selective_recomputation_and_sequence_parallelism_shrink_the_activations(capsys):
    def activations(*extra):
        assert main(["model", "memory", "--mesh", "8,1,4,8", "--no-flash", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["breakdown"]["activations"]

    plain = activations()
    assert activations("--recompute", "selective") < plain  # the T x T probabilities are not kept
    assert activations("--sequence-parallel") < plain  # LayerNorm and residual: T/row positions
    assert main(["selective" if a == "full" else a for a in ISSUE]) == 0
    assert "11 layers, attention recomputed" in capsys.readouterr().out


def test_json_is_the_functions_numbers(capsys):
    assert main(["model", "memory", "--mesh", "4,2,2,8", "--global-batch", "64", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    m = machine("perlmutter")
    want = memory_breakdown(gpt_config("gpt-80b"), (4, 2, 2, 8), global_batch=64, precision=machine_precision(m),
                            overlap=Overlap.parse(DEFAULT_OVERLAP, bucket_bytes=64 << 20), flash_attention=True)
    assert printed["breakdown"] == pytest.approx(want)
    assert printed["fit"]["fits"] is (want["total"] <= 0.9 * 40e9)


def test_what_does_not_fit_comes_with_advice(capsys):
    assert main(["model", "memory", "--mesh", "1,1,1,64", "--global-batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "to fit, try:" in out and "saves ~" in out


BAD = [(["--mesh", "3,1,1,1"], "vocab_size (51200) must be divisible by row (3)"),
       (["--mesh", "1,2"], "--mesh must be four positive ints"),
       (["--mesh", "1,1,1,1", "--model", "gpt-81b"], "unknown model 'gpt-81b'"),
       (["--mesh", "1,1,1,1", "--machine", "summit"], "unknown machine 'summit'"),
       (["--mesh", "1,1,1,1", "--pipe", "64"], "n_layer (42) must be at least pipe (64)"),
       (["--mesh", "1,1,1,1", "--micro-batches", "3"],
        "--global-batch (1024) must be divisible by --micro-batches (3)"),
       (["--mesh", "1,1,1,1", "--zero", "5"], "argument --zero: invalid choice: 5")]


@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["model", "memory", *argv])
    printed = capsys.readouterr()
    lines = printed.err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and says in lines[0], printed.err
    assert not printed.out and "Traceback" not in printed.err


def test_recorded_wire_bytes_are_the_ring_algorithms():
    assert wire_bytes("all_reduce", 4, 800) == (1200.0, 1200.0)  # 2 (p-1)/p
    assert wire_bytes("all_gather", 4, 800) == (600.0, 600.0)  # (p-1)/p of the gathered result
    assert wire_bytes("reduce_scatter", 2, 800) == (400.0, 400.0)
    assert wire_bytes("send", 2, 800) == (800.0, 0.0) and wire_bytes("recv", 2, 800) == (0.0, 800.0)
