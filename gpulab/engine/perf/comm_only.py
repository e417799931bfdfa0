"""AxoNN's published performance model: grid shapes ranked by communication time alone.

    rows = comm_only_rank(gpt_config("gpt-80b"), world=1024, batch_size=1024, machine=machine("perlmutter"))
    rows[0]["shape"], rows[0]["comm_s"], rows[0]["groups"]      # the pick, its seconds, seconds per group

As Megatron-AxoNN's ``examples/comm_model.py`` (``model_v2``,
``get_configs_for_transformer``) ranks them: per transformer block its four
layers (QKV [3H, H] and FC1 [4H, H] plain, the attention and MLP
projections [H, H] and [H, 4H] transposed), each group's values from
``terms.axonn_layer_volumes`` (activation recomputation included: forward
terms twice), in bf16 bytes, over the bandwidth that the machine's table
gives that group (``Machine.bandwidth``: AxoNN's measured table where the
profile has one, keyed by the group's size and by how many ranks apart its
members sit; else the link's bandwidth), summed over the groups and times
the layers; a machine fitted here (``fitted_machine.FittedMachine``, no table) gives
each group the rate its fitted all-reduce sends at (``wire_bandwidth``).
No latency, no computation, no overlap: what the full model (``predict``)
adds. Shapes must split the model and the batch, and fit in
memory by the full model's count (AxoNN's script asks for a minimum degree
of tensor parallelism instead), so that both rank the same candidates.
"""

from __future__ import annotations

from gpulab.engine.perf.predict import candidate_shapes, predict
from gpulab.engine.perf.rings import ring
from gpulab.engine.perf.terms import axonn_layer_volumes, stride

# (K, transposed) of a block's layers, in AxoNN's order: QKV, attention projection, FC1, FC2
BLOCK_LAYERS = ((3, False), (1, True), (4, False), (4, True))


def wire_bandwidth(machine, size: int, stride: int, nbytes: float = 4 << 20) -> float:
    """Bytes per second one member of a group sends: the machine's table or link (``bandwidth``) where
    it has one; for a fitted machine, a ring all-reduce's wire bytes of an ``nbytes`` buffer over the
    time the fit adds for them above its latency (the fit's slope, not its start-up)."""
    if hasattr(machine, "bandwidth"):
        return machine.bandwidth(size, stride)
    seconds = machine.collective_s("all_reduce", size, stride, nbytes) - machine.collective_s(
        "all_reduce", size, stride, 0)
    return ring("all_reduce", size)[1] * nbytes / seconds


def comm_only_s(config, shape, batch_size: int, machine, *, seq_len: int | None = None,
                axonn_bug: bool = False) -> dict:
    """Seconds of communication per iteration on grid ``shape`` by AxoNN's model, and per group."""
    T = seq_len or config.block_size
    groups: dict[str, float] = {}
    for K, transposed in BLOCK_LAYERS:
        volumes = axonn_layer_volumes(K, config.n_embd, batch_size, T, shape, transposed, axonn_bug=axonn_bug)
        for group, values in volumes.items():
            size = {"row": shape[0], "col": shape[1], "depth": shape[2], "data": shape[3]}[group]
            if size > 1:
                nbytes = values * machine.value_bytes * config.n_layer
                groups[group] = groups.get(group, 0.0) + nbytes / wire_bandwidth(machine, size, stride(group, shape))
    return {"shape": list(shape), "comm_s": sum(groups.values()), "groups": groups}


def comm_only_rank(config, world: int, batch_size: int, machine, overlap=None, *, seq_len: int | None = None,
                   recompute: bool = True, flash_attention: bool = True, axonn_bug: bool = False) -> list[dict]:
    """Every fitting grid shape of ``world`` ranks, least communication first; each row also carries
    the full model's prediction of that shape (``full``: iteration seconds and its place)."""
    full = [predict(config, s, batch_size, machine, overlap, seq_len=seq_len, recompute=recompute,
                    flash_attention=flash_attention) for s in candidate_shapes(config, world, batch_size)]
    fitting = sorted((p for p in full if p["fits"]), key=lambda p: p["iter_s"])
    place = {tuple(p["shape"]): i + 1 for i, p in enumerate(fitting)}
    rows = [{**comm_only_s(config, tuple(p["shape"]), batch_size, machine, seq_len=seq_len, axonn_bug=axonn_bug),
             "full_iter_s": p["iter_s"], "full_place": place[tuple(p["shape"])]} for p in fitting]
    return sorted(rows, key=lambda r: r["comm_s"])
