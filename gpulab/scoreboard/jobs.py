"""How the scoreboard measures: MPI jobs through ``gpulab.launch``, on an emulated cluster where one can be made.

    bench = Bench(quick=True)
    with bench.cluster(nodes=4, ranks_per_node=1, link="1gbit") as where:   # where.cluster is None on one machine
        machine = bench.bcast_fit(where, ranks=4)                             # cached per cluster shape
        rows = bench.on_ranks(4, "times", {...}, table=machine)

Every job has a time limit; when it is passed, or the job fails, ``JobFailed`` says why
(and the claim's row says it instead of a live value).
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

    def __init__(self, quick: bool = True, progress=None):
        self.quick = quick
        self.progress = progress or (lambda line: None)
        self._fits: dict = {}

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
        timeout = round(host.time_limit(JOB_TIMEOUT[self.quick], ranks))  # for this machine, read before the job
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

        key = (json.dumps(where.topology, sort_keys=True), ranks)
        if key not in self._fits:
            machine = self.on_ranks(ranks, "fit", {"sizes": QUICK_FIT_SIZES if self.quick else FIT_SIZES})
            machine.get("notes", {}).pop("samples", None)
            self._fits[key] = at_most_link_rate(machine, where.topology.get("link_bytes_per_s"))
        return self._fits[key]

    def cached(self, key, compute):
        """``compute()`` once per run for ``key`` (a fit, a sweep, a prediction that several claims use)."""
        if key not in self._fits:
            self._fits[key] = compute()
        return self._fits[key]

    def engine_fit(self, ranks: int):
        """The performance model of the engine fitted on this machine's ``ranks`` ranks, once per run."""
        from gpulab.engine.perf.fitted_machine import FittedMachine
        from gpulab.machines import Description

        return self.cached(("engine", ranks), lambda: FittedMachine.from_description(Description.from_dict(
            self.cli(ranks, ["model", "fit", "--reps", "1" if self.quick else "3"]), "`gpulab model fit`'s file")))

    def engine_rows(self, ranks: int, shapes: str, overlap: str = "none", progress: str = "poll") -> list[dict]:
        """``gpulab bench engine`` rows (best round of each shape x overlap), cached per request in a run."""
        iters, rounds = ("3", "2") if self.quick else ("5", "3")
        return self.cached(("bench engine", ranks, shapes, overlap, progress), lambda: self.cli(
            ranks, ["bench", "engine", "--shapes", shapes, "--overlap", overlap, "--progress", progress,
                    "--iters", iters, "--rounds", rounds, "--warmup", "1"]))
