"""What ``gpulab tune bcast --export`` writes: the tuner's native choices as MPICH, Open MPI and MVAPICH2 settings.

The input is a table per process count built from native rows (``mpi`` and
``mpi:<MPICH algorithm>``, see ``gpulab.bcast.measurement.native_variants``): ranges of
message sizes, each with the MPICH algorithm measured fastest there
(``tuning.build_table``). Out of it:

- ``mpich_rules``: MPICH's collective-selection JSON (the format of its
  maint/tuning/coll/mpir/generic.json, read through
  MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE). MPICH requires a rule for every
  collective, so the file is the library's own built-in rules with the
  broadcast's tuned communicator sizes put in front of its own.
- ``openmpi_rules``: an Open MPI coll/tuned dynamic-rules file (the classic text
  format of ompi/mca/coll/tuned/coll_tuned_dynamic_file.c), each MPICH algorithm
  mapped to Open MPI's nearest one.
- ``mvapich2_ranges``: MV2_INTER_BCAST_TUNING's ranges, to print.
"""

from __future__ import annotations

import json
import re

from gpulab.bcast.cost.mpich import mpir_rule
from gpulab.bcast.measurement import native_variants as nv

FORMATS = ("mpich", "openmpi", "mvapich2")
OPENMPI_BCAST = 7  # Open MPI's collective id of MPI_Bcast (COLLTYPE in coll_base_functions.h)


def _choice(row_name: str) -> tuple[str, str | None, int | None, int | None]:
    """'mpi:pipelined_tree/kary/1@256K' -> ('pipelined_tree', 'kary', 1, 262144); 'mpi' -> ('mpi', ...None)."""
    if row_name == "mpi":
        return "mpi", None, None, None
    from gpulab.bcast.sizes import parse_size

    base, _, chunk = row_name.partition("@")
    algorithm, tree_type, k = nv.parse(base)
    return algorithm, tree_type, k, (parse_size(chunk) if chunk else None)


# ---- MPICH ------------------------------------------------------------------------------------------
def library_rules(lib_path: str) -> dict:
    """MPICH's built-in MPIR selection rules, read from the JSON text compiled into libmpi."""
    with open(lib_path, "rb") as f:
        data = f.read()
    for match in re.finditer(rb'\{\s*"collective=bcast"', data):
        end = data.find(b"\0", match.start())
        try:
            rules = json.loads(data[match.start():end].decode())
        except ValueError:
            continue
        if "collective=ibcast" in rules:  # the MPIR-level file (the ch4 and posix files cover only a few)
            return rules
    raise ValueError(f"{lib_path}: no MPIR collective-selection rules found inside (is it MPICH's libmpi?)")


def loaded_libmpi() -> str | None:
    """The libmpi this process has mapped (inside an MPI job), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "/libmpi" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def _mpich_ranges(table: dict, own: dict) -> dict:
    """One communicator size's message-size rules: avg_msg_size<=hi-1 per range, '=any' for the last; where
    MPI_Bcast's own choice was kept, MPICH's own rules for this p (``own``) decide inside the range."""
    out = {}
    for r in table["ranges"]:
        key = "avg_msg_size=any" if r["hi"] is None else f"avg_msg_size<={r['hi'] - 1}"
        if r["algorithm"] == "mpi":
            out[key] = own
        else:
            leaf, params = nv.selection_leaf(r["algorithm"])
            out[key] = {leaf: params}
    return out


def _own_rules(builtin_intra: dict, p: int) -> dict:
    """MPICH's built-in bcast rules for p ranks and no node hierarchy: the message-size level."""
    for key, child in builtin_intra.items():
        if _comm_size_matches(key, p):
            return child["comm_hierarchy=any"]
    raise ValueError(f"MPICH's built-in bcast rules have no branch for p={p}")


def _comm_size_matches(key: str, p: int) -> bool:
    value = key.split("=", 1)[1] if "=" in key and "<=" not in key else None
    if value == "any":
        return True
    if value == "pow2":
        return p & (p - 1) == 0
    if key.startswith("comm_size<="):
        return p <= int(key[len("comm_size<="):])
    if key.startswith("comm_size<"):
        return p < int(key[len("comm_size<"):])
    return False


def mpich_rules(tables: dict[int, dict], builtin: dict) -> dict:
    """MPICH's selection JSON: ``builtin`` (``library_rules``) with the tuned bcast rules first.

    For each tuned p, "comm_size<p" keeps MPICH's own rules below it and "comm_size<=p" (so exactly p)
    takes the tuned ranges, for any node hierarchy (the layout it was tuned on is the user's to match).
    """
    intra = builtin["collective=bcast"]["comm_type=intra"]
    tuned = {}
    for p, table in sorted(tables.items()):
        tuned[f"comm_size<{p}"] = intra
        tuned[f"comm_size<={p}"] = {"comm_hierarchy=any": _mpich_ranges(table, _own_rules(intra, p))}
    tuned["comm_size=any"] = intra
    bcast = {**builtin["collective=bcast"], "comm_type=intra": tuned}
    return {"collective=bcast": bcast, **{k: v for k, v in builtin.items() if k != "collective=bcast"}}


# ---- Open MPI ---------------------------------------------------------------------------------------
def openmpi_choice(row_name: str) -> tuple[int, int, int, str]:
    """(algorithm, fan-in/out, segment size, why) of Open MPI's coll_tuned nearest to an MPICH row."""
    algorithm, tree_type, k, chunk = _choice(row_name)
    seg = chunk or 0
    if algorithm == "binomial":
        return 6, 0, 0, "binomial"
    if algorithm == "scatter_recursive_doubling_allgather":
        return 8, 0, 0, "scatter_allgather (binomial scatter, recursive-doubling allgather)"
    if algorithm == "scatter_ring_allgather":
        return 9, 0, 0, "scatter_allgather_ring"
    if algorithm in nv.TREES:
        tree_type, k = tree_type or "kary", k or 2
        seg = seg if algorithm == "pipelined_tree" else 0
        if tree_type == "kary" and k == 1:
            return 2, 1, seg, "chain, one chain (fan-out 1)"
        if tree_type == "kary" and k == 2:
            return 5, 0, seg, "binary tree"
        return 7, 0, seg, f"knomial (radix from coll_tuned_bcast_algorithm_knomial_radix; MPICH used {k})"
    return 0, 0, 0, "Open MPI's own fixed decision (MPICH's own choice was kept, or no equivalent)"


def openmpi_rules(tables: dict[int, dict]) -> str:
    """The classic dynamic-rules text: collectives, then per communicator size its message-size rules.

    Open MPI uses the rule of the largest listed communicator size not above the communicator's, so each
    tuned p is followed (unless p+1 is tuned too) by a rule at p+1 with algorithm 0: its fixed decision.
    """
    sizes = []
    for p, table in sorted(tables.items()):
        sizes.append((p, [(r["lo"], *openmpi_choice(r["algorithm"]), r["algorithm"]) for r in table["ranges"]]))
        if p + 1 not in tables:
            sizes.append((p + 1, [(0, 0, 0, 0, "fixed decision", "-")]))
    lines = ["# Open MPI coll/tuned dynamic rules written by gpulab tune bcast --export openmpi",
             "# use: --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename THIS_FILE",
             "1 # number of collectives", f"{OPENMPI_BCAST} # MPI_Bcast", f"{len(sizes)} # communicator sizes"]
    for p, rules in sizes:
        lines += [f"{p} # communicator size", f"{len(rules)} # message sizes"]
        lines += [f"{lo} {alg} {fan} {seg} # {why} (measured: {name})" for lo, alg, fan, seg, why, name in rules]
    return "\n".join(lines) + "\n"


# ---- MVAPICH2 ---------------------------------------------------------------------------------------
# MV2_INTER_BCAST_TUNING as MVAPICH2 2.3 reads it (src/mpi/coll/tuning/bcast_tuning.c,
# MV2_internode_Bcast_is_define): one number for every size, or comma-separated "alg:min-max" ranges
# matched by the regular expression ([0-9]+):([0-9]+)-([0-9]+|\+), "+" meaning no upper limit. One table
# for every communicator of the job; a message takes the first range whose upper end is at least its size.
MPIR_TO_MVAPICH2 = {"binomial": 1, "scatter_allgather_rd": 3, "scatter_allgather_ring": 5}


def mvapich2_choice(row_name: str, p: int, nbytes: int) -> tuple[int | None, str]:
    """MV2_INTER_BCAST_TUNING's number for a measured row; "mpi" is what MPICH's own rule ran there."""
    algorithm, tree_type, k, _ = _choice(row_name)
    if algorithm == "mpi":
        ran = mpir_rule(nbytes, p)
        return MPIR_TO_MVAPICH2[ran], f"MPICH's own choice, which ran {ran} here"
    if algorithm == "binomial":
        return 1, "binomial"
    if algorithm == "scatter_recursive_doubling_allgather":
        return 3, "scatter + recursive doubling"
    if algorithm == "scatter_ring_allgather":
        return 5, "scatter + ring"
    if algorithm == "pipelined_tree" and (tree_type or "kary") == "kary" and k == 1:
        return 9, "pipelined (MVAPICH2's segment, not MPICH's chunk)"
    if algorithm in nv.TREES and (tree_type or "kary") != "kary":
        return 8, f"k-nomial, MV2_KNOMIAL_INTER_NODE_FACTOR={k or 2}"
    return None, "no MVAPICH2 equivalent: these sizes take the next range's algorithm"


def mvapich2_ranges(tables: dict[int, dict]) -> str:
    """Per p: each range's MVAPICH2 algorithm and the MV2_INTER_BCAST_TUNING value that sets them."""
    lines = []
    for p, table in sorted(tables.items()):
        parts, lines_p = [], []
        for r in table["ranges"]:
            alg, why = mvapich2_choice(r["algorithm"], p, (r.get("measured_at") or [r["lo"]])[0])
            upper = "+" if r["hi"] is None else str(r["hi"] - 1)
            lines_p.append(f"  {r['lo']}-{'inf' if r['hi'] is None else upper} B: "
                           f"{alg if alg is not None else '-'} {why}  [measured: {r['algorithm']}]")
            if alg is not None:
                parts.append(f"{alg}:{r['lo']}-{upper}")
        if parts and "+" not in parts[-1]:  # the largest sizes must land in a range too
            parts[-1] = parts[-1].rsplit("-", 1)[0] + "-+"
        lines.append(f"p={p}:")
        lines += lines_p
        value = parts[0].split(":")[0] if len({q.split(":")[0] for q in parts}) == 1 else ",".join(parts)
        lines.append(f"  MV2_INTER_BCAST_TUNING={value}" if parts else
                     "  (nothing to set: MVAPICH2's own table)")
    if len(tables) > 1:
        lines.append("MV2_INTER_BCAST_TUNING is one table for every communicator of a job: set the line of "
                     "the job's process count.")
    return "\n".join(lines)


def write(fmt: str, path: str | None, tables: dict[int, dict], builtin: dict | None) -> str:
    """Write (mpich, openmpi) or return (mvapich2) the export; the message to print."""
    if fmt == "mvapich2":
        return mvapich2_ranges(tables)
    if fmt == "mpich":
        if builtin is None:
            raise ValueError("--export mpich needs MPICH's built-in rules, read from the libmpi the jobs ran "
                             "with; this MPI library is not MPICH")
        text = json.dumps(mpich_rules(tables, builtin), indent=1)
        use = f"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={path}"
    else:
        text = openmpi_rules(tables)
        use = f"--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename {path}"
    with open(path, "w") as f:
        f.write(text)
    return f"wrote {path}; use it with {use}"
