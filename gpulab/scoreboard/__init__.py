"""The scoreboard of the two papers' claims, built by running the kit: ``gpulab scoreboard [--quick]``.

    from gpulab.scoreboard import run, table
    rows = run(claims=("a", "b"), quick=True)      # measured here, read from docs/results, modelled, judged
    table(rows)                                     # an HTML table in a notebook, aligned text elsewhere
    show(("e", "f"))                                # both in one call, a line per claim as it runs
    table(load("docs/results/scoreboard_quick.json"))   # a recorded run's rows

Claims (a)-(d) and (i) are the broadcast paper's (Awan et al. 2018), measured on an emulated
cluster where this machine can make one; (e)-(h) the AxoNN paper's (Singh et al. 2023), measured
with the 4D engine on 4 ranks. Each row holds the paper's number and source, this run's
measurement (or why there is none), the recorded one from docs/results, the model's prediction,
and a verdict computed from them (``claim``: the verdicts; each claim module: its thresholds).
Importing this package starts nothing and never initialises MPI.
"""

from __future__ import annotations

from gpulab.lazy_exports import lazy_exports

_PUBLIC = {name: "board" for name in ("run", "table", "show", "load", "format_rows", "write_json", "all_claims",
                                      "SCHEMA_VERSION")} | {"VERDICTS": "claim"}


lazy_exports(globals(), {name: f"{__name__}.{module}" for name, module in _PUBLIC.items()})
