"""Bad input fails with a clear error before any message is sent (single rank, COMM_SELF)."""

import numpy as np
import pytest
from mpi4py import MPI

from gpulab.bcast import ALGORITHMS, bcast, option_names, select
from gpulab.bcast.selection.auto import reload

SELF = MPI.COMM_SELF


def test_non_contiguous_buffer_is_refused():
    with pytest.raises(ValueError, match="C-contiguous"):
        ALGORITHMS["binomial"](np.zeros((4, 4))[:, 1], 0, SELF)


def test_read_only_buffer_is_refused():
    buf = np.zeros(8)
    buf.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ALGORITHMS["chain"](buf, 0, SELF)
    with pytest.raises(ValueError, match="read-only"):
        bcast(b"immutable bytes", comm=SELF, algorithm="linear")


@pytest.mark.parametrize("algorithm", ["binomial", "mpi", "auto"])
@pytest.mark.parametrize("root", [-1, 1, 2.0, "0", None, 2**70])
def test_a_bad_root_is_refused_on_every_path(root, algorithm):
    bcast(np.zeros(3), 0, SELF, algorithm=algorithm)  # remembered: the fast path meets the bad root first
    with pytest.raises(ValueError, match=r"root must be a rank in \[0, 1\)"):
        bcast(np.zeros(3), root=root, comm=SELF, algorithm=algorithm)


def test_auto_passes_options_to_the_algorithm_it_chose():
    buf = np.arange(3.0)
    assert bcast(buf, comm=SELF, path="staged") is buf  # every algorithm takes the device options
    with pytest.raises(TypeError, match=r"'mpi' does not take option\(s\) \['chunk_bytes'\]"):
        bcast(buf, comm=SELF, chunk_bytes=64)  # one rank, no table: auto chose MPI_Bcast


def test_unknown_algorithm_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown broadcast algorithm 'ring'.*'binomial'.*'chain'"):
        bcast(np.zeros(3), comm=SELF, algorithm="ring")


@pytest.mark.parametrize("algorithm,options,message", [
    ("chain", {"chunk_bytes": 0}, "chunk_bytes must be a positive integer"),
    ("binary_tree", {"chunk_bytes": -64}, "chunk_bytes must be a positive integer"),
    ("split_binary_tree", {"chunk_bytes": 1.5}, "chunk_bytes must be a positive integer"),
    ("knomial", {"radix": 1}, "radix must be an integer >= 2"),
    ("knomial", {"radix": 0}, "radix must be an integer >= 2"),
    ("hierarchical", {"ranks_per_node": 0}, "ranks_per_node must be a positive integer"),
    ("hierarchical", {"inter": "hierarchical"}, "not a flat algorithm"),
    ("hierarchical", {"intra_options": {"radix": 1}, "intra": "knomial"}, "radix must be"),
])
def test_bad_options(algorithm, options, message):
    with pytest.raises(ValueError, match=message):
        ALGORITHMS[algorithm](np.zeros(3), 0, SELF, **options)


def test_unknown_option_names_the_accepted_ones():
    with pytest.raises(TypeError, match=r"'binomial' does not take option\(s\) \['chunk_bytes'\]"):
        ALGORITHMS["binomial"](np.zeros(3), 0, SELF, chunk_bytes=64)
    assert option_names("knomial") == ("radix",)


def test_buffer_protocol_objects_and_single_rank_are_accepted():
    buf = bytearray(b"abc")
    assert bcast(buf, comm=SELF, algorithm="scatter_allgather_rd") is buf and buf == b"abc"


def test_auto_without_sources_runs_mpi_bcast_and_names_mpichs_rule(tmp_path, monkeypatch):
    class Comm:
        def __init__(self, size):
            self.size = size

    # no tuning table, no fitted model, no machine profile, no cluster link: MPI_Bcast itself, and the
    # reason says what MPICH runs for it (the MPIR rule's thresholds, tests/bcast/test_mpich_rule.py)
    monkeypatch.setenv("GPULAB_TUNING_TABLE", str(tmp_path / "none.json"))
    for name in ("GPULAB_MACHINE", "GPULAB_TOPOLOGY"):
        monkeypatch.delenv(name, raising=False)
    reload()  # select() reads the variables and the file once per process
    assert select(100, Comm(16)).source == "native"
    assert select(100, Comm(16)).name == "mpi"
    assert "binomial on 16" in select(100, Comm(16)).reason
    assert "binomial on 4" in select(100_000, Comm(4)).reason  # MPICH: p < 8 always binomial
    assert "scatter_allgather_rd on 16" in select(100_000, Comm(16)).reason
    assert "scatter_allgather_ring on 12" in select(1 << 20, Comm(12)).reason
    assert "scatter_allgather_ring on 16" in select(1 << 20, Comm(16)).reason
