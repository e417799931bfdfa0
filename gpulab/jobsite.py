"""Where a job runs: the nodes a launch goes to, how its ranks are placed on them, and what records say.

A job runs on one of three kinds of place, read here without starting anything:

- a cluster described by a state file: the one entered in this process (``enter``), else the one
  named by $GPULAB_CLUSTER. Whatever made its nodes (``gpulab.emulated`` writes these files) says
  in the file how to reach them: the argv that starts mpiexec on the head node, the nodes'
  addresses, the environment its ranks need, the links. ``mpiexec_command`` wraps a job for it and
  gives every rank $GPULAB_TOPOLOGY, the layout it was launched with;
- a Slurm job (the layout Slurm gives: nodes, tasks per node);
- a plain machine.

``record_topology`` (collective, in the ranks) adds what MPI itself sees; ``topology_metadata`` is what
every record says about where it ran. Only the standard library is imported here (mpi4py inside
``record_topology``): ``gpulab.launch`` reads this on every launch.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

ENV_STATE = "GPULAB_CLUSTER"  # path (or name) of the state file of the cluster that launches use
ENV_TOPOLOGY = "GPULAB_TOPOLOGY"  # JSON layout, set in every rank of a job launched onto such a cluster
STATE_DIR = Path(tempfile.gettempdir()) / "gpulab-clusters"  # state files of named clusters
PLACEMENTS = ("block", "round-robin")
FIELDS = ("emulated", "nodes", "ranks_per_node", "placement", "link", "link_bytes_per_s", "transport", "rank_nodes",
          "node_cpus")


class ClusterUnavailable(RuntimeError):
    """The cluster a job should run on cannot be had: this machine cannot host it, or it is no longer
    up (the message says why and what would help)."""


# ---- the cluster that launches go to ---------------------------------------------------------------
_ENTERED: list[str] = []  # state files of the clusters entered in this process, innermost last


def enter(state_file: str) -> None:
    """Launches from this process go to this cluster until ``leave`` (innermost wins over $GPULAB_CLUSTER)."""
    _ENTERED.append(state_file)


def leave(state_file: str) -> None:
    if state_file in _ENTERED:
        _ENTERED.remove(state_file)


def state_path(name_or_path: str) -> str:
    """A cluster's state file, from its name (``gpulab cluster up NAME``) or the path itself."""
    return name_or_path if os.sep in name_or_path else str(STATE_DIR / f"{name_or_path}.json")


def read_state(name_or_path: str) -> dict:
    path = state_path(name_or_path)
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ClusterUnavailable(f"no emulated cluster {name_or_path!r} is up (no {path})") from None


def cluster_alive(state: dict) -> bool:
    """Whether the process that holds the cluster's nodes (its keeper) still holds them: the node
    namespace it opened is still the one behind its descriptor."""
    try:
        return os.stat(f"/proc/{state['pid']}/fd/{state['fds'][0]}").st_ino == state["inodes"][0]
    except (OSError, KeyError, IndexError):
        return False


def launch_state() -> dict | None:
    """The state of the cluster launches go to (see the module docstring), or None for this machine."""
    if _ENTERED:
        return read_state(_ENTERED[-1])
    name = os.environ.get(ENV_STATE)
    if not name:
        return None
    state = read_state(name)
    if not cluster_alive(state):
        raise ClusterUnavailable(f"the emulated cluster {name!r} (${ENV_STATE}) is no longer up")
    return state


# ---- placement: which node each rank runs on ---------------------------------------------------------
def placement_hosts(nodes: int, n: int, ranks_per_node: int | None,
                    placement: str) -> tuple[list[tuple[int, int]], int]:
    """[(node k, slots)] for hydra's -hosts, and the ranks per node used."""
    rpn = ranks_per_node if ranks_per_node and ranks_per_node * nodes >= n else math.ceil(n / nodes)
    used = min(nodes, math.ceil(n / rpn)) if placement == "block" else min(nodes, n)
    slots = rpn if placement == "block" else 1
    return [(k, slots) for k in range(1, used + 1)], rpn


def rank_nodes(nodes: int, n: int, ranks_per_node: int | None = None, placement: str = "block") -> list[int]:
    """The node (1-based) of every rank, as hydra places them."""
    hosts, rpn = placement_hosts(nodes, n, ranks_per_node, placement)
    if placement == "block":
        return [hosts[r // rpn][0] for r in range(n)]
    return [hosts[r % len(hosts)][0] for r in range(n)]


def topology(state: dict, n: int) -> dict:
    """What a result records about where ``n`` ranks launched onto this cluster ran."""
    nodes_of = rank_nodes(state["nodes"], n, state["ranks_per_node"], state["placement"])
    per_node = [nodes_of.count(k) for k in sorted(set(nodes_of))]
    return {"emulated": state.get("emulated", False), "nodes": len(per_node), "ranks_per_node": max(per_node),
            "placement": state["placement"], "link": state["link"] or "unlimited",
            "link_bytes_per_s": state.get("link_bytes_per_s"), "transport": state.get("transport"),
            "rank_nodes": nodes_of, "mode": state.get("mode"), "node_cpus": state.get("cpus")}


# ---- launching onto it ---------------------------------------------------------------------------
def mpiexec_args(state: dict, n: int) -> list[str]:
    """Hosts and environment for ``n`` ranks (the part after ``-n N``)."""
    hosts, _ = placement_hosts(state["nodes"], n, state["ranks_per_node"], state["placement"])
    args = ["-hosts", ",".join(f"{state['hosts'][k - 1]}:{slots}" for k, slots in hosts)]
    for key, value in {**state.get("mpi_env", {}), ENV_TOPOLOGY: json.dumps(topology(state, n))}.items():
        args += ["-genv", key, value]
    return args


def mpiexec_command(state: dict, n: int, program: list[str]) -> list[str]:
    """argv that starts ``program`` on ``n`` ranks of the cluster: mpiexec as the state file says
    (``mpiexec``, the part before ``-n N``), then hosts and environment."""
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    return [*state["mpiexec"], "-n", str(n), *mpiexec_args(state, n), *program]


# ---- what records say ----------------------------------------------------------------------------
_RECORDED: dict | None = None


def record_topology(comm) -> dict:
    """Collective: nodes and ranks per node as MPI sees them (Split_type), plus how the job was launched."""
    global _RECORDED
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    first = comm.allgather(shared.allreduce(comm.rank, op=MPI.MIN))
    local_sizes = comm.allgather(shared.size)
    shared.Free()
    names = list(dict.fromkeys(first))
    node = [names.index(f) for f in first]
    launched = json.loads(os.environ[ENV_TOPOLOGY]) if ENV_TOPOLOGY in os.environ else {}
    placement = launched.get("placement") or ("block" if node == sorted(node) else "interleaved")
    _RECORDED = {"emulated": bool(launched.get("emulated")), "nodes": len(names),
                 "ranks_per_node": max(local_sizes), "placement": placement,
                 "link": launched.get("link"), "link_bytes_per_s": launched.get("link_bytes_per_s"),
                 "transport": launched.get("transport", "as the MPI library chose"), "rank_nodes": node,
                 "node_cpus": launched.get("node_cpus")}
    return _RECORDED


def topology_metadata() -> dict:
    """The topology of this job for a result's metadata: as recorded, else as launched, else as Slurm
    laid the job out, else unknown."""
    if _RECORDED is not None:
        return dict(_RECORDED)
    if ENV_TOPOLOGY in os.environ:
        launched = json.loads(os.environ[ENV_TOPOLOGY])
        return {k: launched.get(k) for k in FIELDS}
    return {"emulated": False, "nodes": _slurm_int("SLURM_JOB_NUM_NODES"),
            "ranks_per_node": _slurm_int("SLURM_NTASKS_PER_NODE"), "placement": None, "link": None,
            "transport": "as the MPI library chose"}


def _slurm_int(name: str) -> int | None:
    """A number from the Slurm job this process runs in (None outside one, or where Slurm leaves it unset)."""
    value = os.environ.get(name, "") if "SLURM_JOB_ID" in os.environ else ""
    return int(value) if value.isdigit() else None
