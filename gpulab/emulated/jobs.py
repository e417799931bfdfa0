"""Jobs on the emulated cluster: run one, know which rank is which process, say what failed.

``Jobs`` is mixed into ``EmulatedCluster`` (it needs ``mpiexec_command``, ``topology``, ``faults``,
``links_down``, ``addresses``, ``state``).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

from gpulab.emulated.netns import kill_inside, node_address
from gpulab.procfs import mpi_scratch_held, parent, pids_inside, remove_files


class ClusterJobFailed(RuntimeError):
    """A job on the emulated cluster failed or timed out; the message names what failed."""


class Jobs:
    """Running MPI jobs on the nodes and reporting, when one fails, which rank on which node ended how."""

    def run(self, n: int, python_args: list[str], *, timeout: float | None = None, env: dict | None = None,
            cwd=None) -> subprocess.CompletedProcess:
        """Run ``python *python_args`` on ``n`` ranks; raise :class:`ClusterJobFailed` naming what failed.

        A rank that dies ends the job at once (hydra notices); a link that goes down ends it after
        ``fault_grace`` seconds (the keeper notices); ``timeout`` bounds everything else.
        """
        seen = len(self.faults())
        proc = subprocess.Popen(self.mpiexec_command(n, python_args), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, start_new_session=True)
        start, done, ranks, exits = time.monotonic(), threading.Event(), {}, {"order": [], "complete": False}
        scratch: set[str] = set()
        tracker = threading.Thread(target=self._track_ranks, args=(done, ranks, exits, n, scratch), daemon=True)
        tracker.start()
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.end_jobs()
            proc.kill()
            output, _ = proc.communicate()
            raise ClusterJobFailed(self._diagnosis(f"timed out after {timeout:.0f} s", n, output, seen,
                                                   ranks, exits)) from None
        finally:
            done.set()
            tracker.join()
            if proc.returncode is not None:  # the job is over: a killed or aborted one left these
                remove_files(scratch)
        if proc.returncode != 0:
            elapsed = time.monotonic() - start
            raise ClusterJobFailed(self._diagnosis(f"failed after {elapsed:.1f} s (exit {proc.returncode})", n,
                                                   output, seen, ranks, exits))
        return subprocess.CompletedProcess(proc.args, 0, output, None)

    def end_jobs(self) -> None:
        """Kill every process running on the nodes (the cluster stays up), and remove their MPI scratch files."""
        kill_inside(set(self.state["inodes"]))

    def _track_ranks(self, done, ranks: dict, exits: dict, n: int, scratch: set) -> None:
        """pid -> MPI rank of the processes on the nodes (hydra names a dead process by pid only), and
        the order in which ranks end (``exits["order"]``: (pid, time)). When one rank is killed its
        peers may crash on the broken connection, and hydra reports whichever death it saw first; on a
        busy machine even the order of the exits can put a crashing peer first, so all are listed.
        ``scratch`` collects the MPI scratch files that the live ranks and their proxies hold: once a
        rank is killed, hydra kills the rest, and the dead hold nothing."""
        pidfds: dict[int, int] = {}  # pidfd -> pid
        try:
            while not done.is_set():
                for pid in pids_inside(set(self.state["inodes"])) if len(ranks) < n else []:
                    if pid in ranks:
                        continue
                    try:
                        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    rank = next((v[9:] for v in environ if v.startswith(b"PMI_RANK=")), None)
                    if rank is not None:
                        ranks[pid] = int(rank)
                        try:
                            pidfds[os.pidfd_open(pid)] = pid
                        except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3)
                            pass
                if len(pidfds) == n and not exits["order"]:
                    exits["complete"] = True  # every rank watched before any ended: the order is known
                live = list(pidfds.values())  # not a dead rank's pid: it may be another process's by now
                scratch |= mpi_scratch_held({*live, *map(parent, live)} - {None})
                # wait for rank exits (in order), looking for new ranks every 0.05 s until all are found
                wait = 0.05 if len(ranks) < n else 0.2
                if not pidfds:
                    done.wait(wait)
                _note_exits(pidfds, exits, wait)
            # the job is over: ranks that ended while this loop was busy elsewhere (a busy machine, or
            # hydra ending everything at once) are still waiting to be read; list them too, last
            _note_exits(pidfds, exits, 0)
        finally:
            for fd in pidfds:
                os.close(fd)

    def _diagnosis(self, what: str, n: int, output: str, seen: int, ranks: dict, exits: dict) -> str:
        nodes_of = self.topology(n)["rank_nodes"]
        reasons = [f for f in self.faults()[seen:] if "up again" not in f]
        down = self.links_down()
        if down and not reasons:
            reasons.append("links down: " + ", ".join(f"node {k} ({node_address(k)})" for k in down))
        # hydra: "PID 123 RUNNING AT 10.77.0.2" then "EXIT CODE: 9" (a process killed by signal 9 reads so)
        for match in re.finditer(r"PID (\d+) RUNNING AT (\S+)\s*\n=\s*(KILLED BY SIGNAL: [^\n=]*|EXIT CODE: \d+)",
                                 output):
            pid, host, how = int(match.group(1)), match.group(2), match.group(3).strip()
            node = self.addresses().index(host) + 1 if host in self.addresses() else "?"
            rank = ranks.get(pid)
            who = f"rank {rank}" if rank is not None else "a rank"
            code = re.match(r"EXIT CODE: (\d+)", how)
            if code:
                number = int(code.group(1))
                how = f"exit code {number}" + (f" (how hydra reports a process killed by signal {number}, "
                                               f"{signal.Signals(number).name})" if 0 < number < 32 else "")
            reasons.append(f"{who} (pid {pid}, node {node}, {host}) ended: {how}")
        ended = exits["order"]
        if ended and exits["complete"] and not any("link down" in r for r in reasons):
            t0 = ended[0][1]
            listed = [f"rank {ranks[pid]} (pid {pid}, node {nodes_of[ranks[pid]]}, "
                      f"{node_address(nodes_of[ranks[pid]])}) at +{t - t0:.3f} s" for pid, t in ended[:8]]
            reasons.insert(0, "ranks in the order they ended: " + ", ".join(listed))
        summary = "; ".join(dict.fromkeys(reasons)) or "no fault seen by the cluster; see the output"
        return f"job of {n} ranks on the emulated cluster {what}: {summary}\noutput tail:\n{output[-2000:]}"


def _note_exits(pidfds: dict, exits: dict, wait: float) -> None:
    """Append the ranks whose pidfd turns readable within ``wait`` s (they ended) to the exit order."""
    ready, _, _ = select.select(list(pidfds), [], [], wait) if pidfds else ([], [], [])
    for fd in ready:
        exits["order"].append((pidfds.pop(fd), time.monotonic()))
        os.close(fd)
