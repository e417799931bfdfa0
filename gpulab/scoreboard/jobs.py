"""How the scoreboard measures: MPI jobs through ``gpulab.launch``, on an emulated cluster where one can be made.

    bench = Bench(quick=True)                # bench.rounds: interleaved rounds per measurement (6 quick, 10 full)
    with bench.cluster(nodes=4, ranks_per_node=1, link="1gbit") as where:   # where.cluster is None on one machine
        machine = bench.bcast_fit(where, ranks=4)                             # cached per cluster shape
        rows = bench.on_ranks(4, "times", {..., "rounds": bench.rounds}, table=machine)

Every job has a time limit; when it is passed, or the job fails, ``JobFailed`` says why
(and the claim's row says it instead of a live value). Before each job the machine's state is read
(``gpulab.host.snapshot``: load, ranks per core) and kept in ``snapshots``, for a verdict that cannot decide.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpulab import host
from gpulab.launch import job_environment, mpiexec_command

FIT_SIZES = [8, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20]  # as benchmarks/emulated_bcast.py fits
QUICK_FIT_SIZES = FIT_SIZES[:-1]  # 4 MiB ping-pongs take 40 s over a 100 Mbit/s link; the line through 1 MiB
# extends to larger messages (the large-message regime is a straight line in the fit)
ROUNDS = {True: 6, False: 10}  # 6: the fewest samples whose range covers the median with 95% (order statistics)
JOB_TIMEOUT = {True: 240, False: 1200}  # seconds per job, quick and full: a hung rank must not hang the board


class JobFailed(RuntimeError):
    """A measurement job failed or ran out of time; the message says which and how."""


@dataclass
class Where:
    """Where a claim's ranks run: an emulated cluster (and its topology), or this machine and why."""

    cluster: object = None
    topology: dict = field(default_factory=dict)
    reason: str = ""

    def describe(self, ranks: int) -> str:
        if self.cluster is None:
            return f"this machine, {ranks} ranks (no emulated cluster: {self.reason})"
        t = self.topology
        return (f"emulated cluster: {t['nodes']} nodes x {t['ranks_per_node']} ranks, {t['link'] or 'unlimited'} "
                f"links, {t['placement']} placement")


class Bench:
    """What one scoreboard run shares between claims: quick or full, a fit per cluster shape, progress lines."""

    def __init__(self, quick: bool = True, progress=None, rounds: int | None = None):
        self.quick = quick
        self.rounds = rounds or ROUNDS[quick]
        self.progress = progress or (lambda line: None)
        self.snapshots: list = []  # the machine before each job (``gpulab.host.Snapshot``)
        self._fits: dict = {}
        self._fit_snapshots: dict = {}

    @contextmanager
    def cluster(self, nodes: int, ranks_per_node: int, link: str | None, placement: str = "block"):
        """An emulated cluster for the block's jobs, or this machine (``Where.cluster`` None, with the reason)."""
        from gpulab.emulated import ClusterUnavailable, EmulatedCluster

        try:
            cluster = EmulatedCluster(nodes=nodes, ranks_per_node=ranks_per_node, link=link, placement=placement)
            cluster.start()
        except ClusterUnavailable as err:
            yield Where(reason=str(err).splitlines()[0])
            return
        with cluster:
            yield Where(cluster, cluster.topology(nodes * ranks_per_node))

    def run(self, ranks: int, python_args: list[str], env: dict | None = None) -> None:
        """``python *python_args`` on ``ranks`` ranks (the active emulated cluster's, if any), within the limit."""
        state = host.snapshot(ranks)  # before the job: its own busy ranks would raise the load
        self.snapshots.append(state)
        timeout = round(host.time_limit(JOB_TIMEOUT[self.quick], ranks, state))  # stretched for this machine
        proc = subprocess.Popen(mpiexec_command(ranks, python_args), env=job_environment(ranks, env),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank it started: its own session
            proc.communicate()
            raise JobFailed(f"{' '.join(python_args[:4])} on {ranks} ranks passed its {timeout} s limit") from None
        if proc.returncode != 0:
            raise JobFailed(f"{' '.join(python_args[:4])} on {ranks} ranks failed (exit {proc.returncode}): "
                            + output.strip()[-600:])

    def on_ranks(self, ranks: int, task: str, args: dict, table: dict | None = None):
        """One ``gpulab.scoreboard.on_ranks`` task; ``table``: a fitted broadcast model that ``auto`` decides from."""
        with tempfile.TemporaryDirectory() as tmp:
            out, env = os.path.join(tmp, "out.json"), {}
            if table is not None:  # auto's "model" source, as the emulated benchmarks set it up
                env["GPULAB_TUNING_TABLE"] = os.path.join(tmp, "tuning.json")
                Path(env["GPULAB_TUNING_TABLE"]).write_text(
                    json.dumps({"version": 1, "models": {str(ranks): table}, "tables": {}}))
            self.run(ranks, ["-m", "gpulab.scoreboard.on_ranks", task, json.dumps(args), out], env)
            return json.loads(Path(out).read_text())

    def cli(self, ranks: int, argv: list[str], out_flag: str = "--out"):
        """``gpulab *argv OUT_FLAG FILE`` inside a job of ``ranks``; what it wrote to FILE."""
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            self.run(ranks, ["-m", "gpulab.cli", *argv, out_flag, out])
            return json.loads(Path(out).read_text())

    def bcast_fit(self, where: Where, ranks: int) -> dict:
        """The broadcast cost model fitted on these ranks (two levels on a cluster), with no inter-node byte
        cheaper than the link allows; fitted once per cluster shape in a run."""
        from gpulab.bcast.cost.link_floor import at_most_link_rate

        def fit():
            machine = self.on_ranks(ranks, "fit", {"sizes": QUICK_FIT_SIZES if self.quick else FIT_SIZES})
            machine.get("notes", {}).pop("samples", None)
            return at_most_link_rate(machine, where.topology.get("link_bytes_per_s"))
        return self.cached(("bcast fit", json.dumps(where.topology, sort_keys=True), ranks), fit)

    def cached(self, key, compute):
        """``compute()`` once per run for ``key`` (a fit, a sweep, a prediction that several claims use); a
        claim that reuses it gets the snapshots its jobs took too."""
        if key not in self._fits:
            start = len(self.snapshots)
            self._fits[key] = compute()
            self._fit_snapshots[key] = self.snapshots[start:]
        else:
            self.snapshots.extend(self._fit_snapshots[key])
        return self._fits[key]

    def engine_fit(self, ranks: int):
        """The performance model of the engine fitted on this machine's ``ranks`` ranks, once per run."""
        from gpulab.engine.perf.fitted_machine import FittedMachine
        from gpulab.machines import Description

        return self.cached(("engine", ranks), lambda: FittedMachine.from_description(Description.from_dict(
            self.cli(ranks, ["model", "fit", "--reps", "1" if self.quick else "3"]), "`gpulab model fit`'s file")))

    def engine_rounds(self, ranks: int, shapes, overlaps: list[str], progress: str = "poll") -> list[dict]:
        """Engine iterations of each grid (``shapes``: "all" or a list) and overlap setting in ``rounds``
        interleaved rounds (``on_ranks.engine``), a warm-up and 1 timed iteration each (quick) or 3; cached."""
        args = {"shapes": shapes, "overlaps": overlaps, "progress": progress, "batch_size": 16,
                "iters": 1 if self.quick else 3, "warmup": 1, "rounds": self.rounds}
        return self.cached(("engine", ranks, json.dumps(args)), lambda: self.on_ranks(ranks, "engine", args))
