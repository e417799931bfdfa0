"""``gpulab scoreboard``: every claim of the two papers, measured here, read from the records, modelled, judged.

    gpulab scoreboard --quick                      # a few minutes on a laptop (emulated cluster where possible)
    gpulab scoreboard --claims a,d,i --json out.json
    gpulab scoreboard --quick --claims e --rounds 12   # more rounds: narrower intervals, fewer inconclusive rows

Progress goes to stderr, one line as each claim starts and ends; the table to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time

from gpulab.cli.checks import output_path, positive_int, usage_error


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("scoreboard", help="the papers' claims: paper, this run, record, model, verdict",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes and few iterations (a few minutes)")
    p.add_argument("--claims", default=None, help="comma-separated claim ids (default: all, a ... i)")
    p.add_argument("--rounds", type=positive_int, default=None,
                   help="interleaved rounds per measurement (default 6 quick, 10 full; 6 is the fewest that "
                        "give a 95%% interval)")
    p.add_argument("--json", dest="json_path", type=output_path, help="write the rows as JSON")
    p.set_defaults(func=main)


def main(args) -> int:
    from gpulab.scoreboard.board import all_claims, format_rows, run, write_json

    claims = None if args.claims is None else [c.strip() for c in args.claims.split(",") if c.strip()]
    unknown = [c for c in claims or [] if c not in all_claims()]
    if unknown or claims == []:
        usage_error(f"gpulab scoreboard: error: unknown claim(s) {unknown}; known: {','.join(all_claims())}")
    start = time.monotonic()
    rows = run(claims, quick=args.quick, progress=lambda line: print(line, file=sys.stderr, flush=True),
               rounds=args.rounds)
    seconds = time.monotonic() - start
    print(format_rows(rows))
    print(f"{len(rows)} claims in {seconds:.0f} s ({'quick' if args.quick else 'full'} mode)")
    if args.json_path:
        write_json(args.json_path, rows, args.quick, seconds)
        print(f"wrote {args.json_path}")
    return 0
