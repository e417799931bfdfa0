"""gpulab tune bcast --export: MPICH's selection JSON, Open MPI's dynamic rules, MVAPICH2's ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpulab.bcast.measurement import export
from tests.bcast.openmpi import require_openmpi
from tests.mpi_harness import ROOT

pytestmark = pytest.mark.timeout(300)

# a tuning of 4 ranks: MPICH's own choice kept below 46341 B, the chain inside MPICH above
TABLE = {"p": 4, "margin": 0.1, "ranges": [
    {"lo": 0, "hi": 46341, "algorithm": "mpi", "measured_at": [1024]},
    {"lo": 46341, "hi": 2 << 20, "algorithm": "mpi:scatter_ring_allgather", "measured_at": [65536]},
    {"lo": 2 << 20, "hi": None, "algorithm": "mpi:pipelined_tree/kary/1@256K", "measured_at": [32 << 20]}]}
# the shape of MPICH's built-in rules (maint/tuning/coll/mpir/generic.json), cut down
BUILTIN = {"collective=bcast": {
    "comm_type=intra": {
        "comm_size<8": {"comm_hierarchy=parent": {"avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_smp": {}}},
                        "comm_hierarchy=any": {"avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_binomial": {}}}},
        "comm_size=any": {"comm_hierarchy=any": {
            "avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_scatter_ring_allgather": {}}}}},
    "comm_type=inter": {"algorithm=MPIR_Bcast_inter_remote_send_local_bcast": {}}},
    "collective=allreduce": {"comm_type=intra": {"algorithm=MPIR_Allreduce_intra_recursive_doubling": {}}}}


def _select(rules: dict, p: int, nbytes: int) -> dict:
    """Walk MPICH's decision tree as csel.c does (first matching key at each level), no node hierarchy."""
    node = rules["collective=bcast"]["comm_type=intra"]
    while not any(k.startswith("algorithm=") for k in node):
        for key, child in node.items():
            name, value = key.replace("<=", "=").replace("<", "=").split("=", 1)
            if value == "any":
                hit = True
            elif name == "comm_hierarchy":
                hit = False
            elif name == "comm_size":
                hit = p <= int(value) if "<=" in key else p < int(value)
            else:
                hit = nbytes <= int(value) if "<=" in key else nbytes < int(value)
            if hit:
                node = child
                break
        else:
            raise AssertionError(f"no rule for p={p}, {nbytes} B")
    return node


def test_mpich_rules_choose_the_tuned_algorithm_for_exactly_the_tuned_p():
    rules = export.mpich_rules({4: TABLE}, BUILTIN)
    assert rules["collective=allreduce"] == BUILTIN["collective=allreduce"]  # every other collective kept
    assert rules["collective=bcast"]["comm_type=inter"] == BUILTIN["collective=bcast"]["comm_type=inter"]
    assert _select(rules, 4, 1024) == {"algorithm=MPIR_Bcast_intra_binomial": {}}  # MPICH's own, kept
    assert _select(rules, 4, 46340) == {"algorithm=MPIR_Bcast_intra_binomial": {}}
    assert _select(rules, 4, 46341) == {"algorithm=MPIR_Bcast_intra_scatter_ring_allgather": {}}
    assert _select(rules, 4, 32 << 20) == {"algorithm=MPIR_Bcast_intra_pipelined_tree": {
        "tree_type=kary": {}, "k=1": {}, "chunk_size=262144": {}}}
    for p in (3, 5, 16):  # other sizes: MPICH's own rules
        assert _select(rules, p, 32 << 20) == _select(BUILTIN, p, 32 << 20)


def test_mpich_rules_from_the_wheels_library_are_found():
    lib = next((p for p in (os.path.join(sys.prefix, "lib", "libmpi.so.12"),) if os.path.exists(p)), None)
    if lib is None:
        pytest.skip("no MPICH libmpi beside this Python")
    builtin = export.library_rules(lib)
    assert {"collective=bcast", "collective=allreduce", "collective=ibcast"} <= set(builtin)


def _classic_rules(text: str) -> list[tuple[int, int, list[tuple[int, int, int, int]]]]:
    """Read Open MPI's classic rules format as coll_tuned_dynamic_file.c does: whole numbers, '#' comments,
    anything else skipped; the checks it makes (message rules start at 0), plus increasing sizes."""
    numbers = []
    for line in text.splitlines():
        numbers += [int(tok) for tok in line.split("#", 1)[0].split() if tok.lstrip("-").isdigit()]
    it = iter(numbers)
    out = []
    for _ in range(next(it)):  # collectives
        coll, comms = next(it), []
        for _ in range(next(it)):  # communicator sizes
            size, msgs = next(it), []
            for _ in range(next(it)):  # message sizes
                msgs.append((next(it), next(it), next(it), next(it)))
            assert msgs[0][0] == 0, "Open MPI: the first message rule must be for size 0"
            assert [m[0] for m in msgs] == sorted({m[0] for m in msgs}), "message sizes must increase"
            assert all(0 <= m[1] <= 9 for m in msgs), "bcast algorithms are 0..9 (coll_tuned_bcast_algorithm)"
            comms.append((size, msgs))
        assert [c[0] for c in comms] == sorted({c[0] for c in comms}), "communicator sizes must increase"
        out.append((coll, comms))
    assert next(it, None) is None, "numbers left over: the counts do not match the rules"
    return out


def test_openmpi_rules_follow_the_classic_format_and_map_the_algorithms():
    text = export.openmpi_rules({4: TABLE})
    [(coll, comms)] = _classic_rules(text)
    assert coll == export.OPENMPI_BCAST == 7
    assert comms == [(4, [(0, 0, 0, 0), (46341, 9, 0, 0), (2 << 20, 2, 1, 256 << 10)]),
                     (5, [(0, 0, 0, 0)])]  # p = 5 and up: Open MPI's fixed decision again


BCAST_C = """#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char **v) { int r, n = atoi(v[1]), bad = 0, rc, cls; unsigned char *b = malloc(n);
  MPI_Init(&c, &v); MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  /* an error is printed, not an abort */
  for (int i = 0; i < n; i++) b[i] = r == 0 ? (unsigned char)(i * 31 + 7) : 0;
  rc = MPI_Bcast(b, n, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) { MPI_Error_class(rc, &cls);
    printf("rank %d error class %s\\n", r, cls == MPI_ERR_ARG ? "MPI_ERR_ARG" : "other"); MPI_Finalize(); return 2; }
  for (int i = 0; i < n; i++) bad += b[i] != (unsigned char)(i * 31 + 7);
  printf("rank %d wrong bytes %d\\n", r, bad); MPI_Finalize(); return bad != 0; }
"""


@pytest.fixture(scope="module")
def openmpi_bcast(tmp_path_factory):
    """A C program broadcasting argv[1] bytes, built with Debian's Open MPI (installed when missing)."""
    require_openmpi()
    folder = tmp_path_factory.mktemp("openmpi")
    (folder / "bcast.c").write_text(BCAST_C)
    subprocess.run(["mpicc.openmpi", "-o", str(folder / "bcast"), str(folder / "bcast.c")], check=True, timeout=120)
    return folder / "bcast"


def _openmpi_job(program, rules, nbytes: int) -> tuple[int, list[str], str]:
    """(exit status, what each rank printed, sorted, everything printed) of a 2-rank broadcast of nbytes."""
    run = subprocess.run(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", "2",
                          "--mca", "coll_tuned_use_dynamic_rules", "1",
                          "--mca", "coll_tuned_dynamic_rules_filename", str(rules), str(program), str(nbytes)],
                         capture_output=True, text=True, timeout=120)
    return run.returncode, sorted(line for line in run.stdout.splitlines() if line.startswith("rank ")), \
        run.stdout + run.stderr


def test_openmpi_takes_the_rules_file_and_applies_each_size_range(openmpi_bcast, tmp_path):
    """Open MPI prints nothing about a rules file (it ignores even a missing one), so: jobs given the
    exported file broadcast bit-exactly in each of its ranges, and the same file with the 64 KiB range's
    algorithm made invalid (99) fails that size with MPI_ERR_ARG on both ranks (returned, not aborted:
an abort's message can be lost as mpirun tears the job down) and not the others. So Open MPI read
    this file and chose by its message-size ranges."""
    text = export.openmpi_rules({2: {**TABLE, "p": 2}})
    rules, poisoned = tmp_path / "bcast.rules", tmp_path / "poisoned.rules"
    rules.write_text(text)
    assert "\n46341 9 0 0 " in text, text  # 46341 B .. 2 MiB: scatter + ring all-gather (9)
    poisoned.write_text(text.replace("\n46341 9 0 0 ", "\n46341 99 0 0 "))
    exact = ["rank 0 wrong bytes 0", "rank 1 wrong bytes 0"]
    for nbytes in (1024, 65536, 4 << 20):  # Open MPI's own decision, scatter + ring, the chain
        status, ranks, printed = _openmpi_job(openmpi_bcast, rules, nbytes)
        assert (status, ranks) == (0, exact), printed
    status, ranks, printed = _openmpi_job(openmpi_bcast, poisoned, 65536)
    assert status != 0 and ranks == ["rank 0 error class MPI_ERR_ARG", "rank 1 error class MPI_ERR_ARG"], printed
    for nbytes in (1024, 4 << 20):  # outside the poisoned range
        status, ranks, printed = _openmpi_job(openmpi_bcast, poisoned, nbytes)
        assert (status, ranks) == (0, exact), f"{nbytes} B: {printed}"


def test_mvapich2_ranges_name_the_tuning_values():
    """In the syntax MVAPICH2 2.3 parses (bcast_tuning.c: ranges matched by ([0-9]+):([0-9]+)-([0-9]+|\\+))."""
    import re

    text = export.mvapich2_ranges({4: TABLE})
    value = next(line for line in text.splitlines() if "MV2_INTER_BCAST_TUNING=" in line).split("=", 1)[1]
    assert value == "1:0-46340,5:46341-2097151,9:2097152-+", text
    assert all(re.fullmatch(r"([0-9]+):([0-9]+)-([0-9]+|\+)", part) for part in value.split(","))
    assert "MPICH's own choice, which ran binomial here" in text  # the 'mpi' range at p = 4, 1 KiB
    one = export.mvapich2_ranges({4: {**TABLE, "ranges": TABLE["ranges"][2:]}})
    assert "MV2_INTER_BCAST_TUNING=9\n" in one + "\n"  # one algorithm for every size: the bare number


def _gpulab(*args):
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_CLUSTER" and not k.startswith("MPIR_CVAR_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                          timeout=240, env=env, cwd=ROOT)


def test_tune_export_writes_files_mpich_accepts(tmp_path):
    selection, rules, record = tmp_path / "sel.json", tmp_path / "ompi.rules", tmp_path / "tune.json"
    run = _gpulab("tune", "bcast", "-n", "2", "--sizes", "1K,64K", "--only-native", "--native",
                  "mpi:binomial,mpi:pipelined_tree/kary/1", "--chunks", "16K", "--time-budget", "0.01",
                  "--export", "mpich", str(selection), "--json", str(record), "--quiet")
    assert run.returncode == 0, run.stderr[-3000:]
    native = json.loads(record.read_text())["2"]["native"]
    assert sorted({r["algorithm"] for r in native}) == ["mpi", "mpi:binomial", "mpi:pipelined_tree/kary/1@16K"]
    assert all(r["valid"] for r in native)
    probe = ("import numpy as np; from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "b = np.arange(1 << 16, dtype=np.uint8) if c.rank == 0 else np.zeros(1 << 16, np.uint8); "
             "c.Bcast(b, 0); assert (b == np.arange(1 << 16, dtype=np.uint8)).all(), c.rank; print('exact')")
    from gpulab.launch import mpiexec_command

    job = subprocess.run(mpiexec_command(2, ["-c", probe]), capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(selection)})
    assert job.returncode == 0 and job.stdout.count("exact") == 2, job.stderr[-3000:]
    ompi = _gpulab("tune", "bcast", "-n", "2", "--sizes", "1K", "--only-native", "--native", "mpi:binomial",
                   "--time-budget", "0.01", "--export", "openmpi", str(rules), "--quiet")
    assert ompi.returncode == 0, ompi.stderr[-3000:]
    _classic_rules(rules.read_text())


@pytest.mark.parametrize("args, why", [
    (["--export", "lam"], "--export takes mpich FILE"),
    (["--export", "mpich"], "--export takes mpich FILE"),
    (["--native", "mpi:binomial"], "go with --export"),
    (["--export", "mvapich2", "--native", "mpi:nope"], "MPICH has no broadcast algorithm 'nope'")])
def test_tune_export_usage_errors(args, why):
    run = _gpulab("tune", "bcast", "-n", "2", *args)
    assert run.returncode == 2 and why in run.stderr, run.stderr[-2000:]
