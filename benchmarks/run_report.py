"""The command line both engine benchmark scripts share: ``run`` (measure, write JSON) and ``report``
(render docs/*.md from the JSON), so that a record can be re-rendered without re-measuring."""

from __future__ import annotations

import argparse


def main(doc: str, run, report, *, world: bool = False) -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="measure and write docs/results/*.json")
    if world:
        r.add_argument("--world", type=int, required=True, help="MPI ranks")
    r.add_argument("--iters", type=int, default=5, help="timed iterations per setting")
    r.add_argument("--rounds", type=int, default=6,
                   help="interleaved rounds (6: the fewest whose range is a 95%% interval of the median)")
    r.add_argument("--out", default=None, help="the record to write (default: the one report renders)")
    r.set_defaults(func=run)
    sub.add_parser("report", help="render the docs record from the JSON").set_defaults(func=report)
    args = parser.parse_args()
    args.func(args)
