"""The scoreboard of the two papers' claims, built by running the kit: ``gpulab scoreboard [--quick]``.

    from gpulab.scoreboard import run, table
    rows = run(claims=("a", "b"), quick=True)      # measured here, read from docs/results, modelled, judged
    table(rows)                                     # an HTML table in a notebook, aligned text elsewhere
    show(("e", "f"))                                # both in one call, a line per claim as it runs
    table(load("docs/results/scoreboard_quick.json"))   # a recorded run's rows
    outcomes(rows)                                  # {"a": "holds here", "b": "inconclusive here", ...}
    contradictions(rows, load("docs/results/scoreboard_quick.json"))   # [] unless holds meets does not hold

Claims (a)-(d) and (i) are the broadcast paper's (Awan et al. 2018), measured on an emulated
cluster where this machine can make one; (e)-(h) the AxoNN paper's (Singh et al. 2023), measured
with the 4D engine on 4 ranks. Each row holds the paper's number and source, this run's
measurement (or why there is none), the recorded one from docs/results, the model's prediction,
and a verdict computed from them: holds here, does not hold here, inconclusive here (``claim``:
the verdicts; ``evidence``: from intervals to a verdict; each claim module: its thresholds). Every
quantity measured here is a median over interleaved rounds with its 95% interval.
Importing this package starts nothing and never initialises MPI.
"""

from __future__ import annotations

from gpulab.lazy_exports import lazy_exports

_PUBLIC = {name: "board" for name in ("run", "table", "show", "load", "format_rows", "write_json", "all_claims",
                                      "outcomes", "contradictions", "SCHEMA_VERSION")} | \
    {name: "claim" for name in ("VERDICTS", "DECISIVE", "HOLDS", "DOES_NOT_HOLD", "INCONCLUSIVE", "NEEDS_GPU")}


lazy_exports(globals(), {name: f"{__name__}.{module}" for name, module in _PUBLIC.items()})
