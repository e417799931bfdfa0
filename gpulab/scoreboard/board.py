"""The scoreboard: every claim's row (paper, this run, the record, the model, a verdict), as text, a Table or JSON.

A verdict is one of ``claim.VERDICTS``: holds here, does not hold here, inconclusive here (the intervals
cannot decide: the row says why, how busy the machine was before the claim's jobs, and what to try), or
needs a GPU. It comes from this run when there is one, else from the recorded run; the recorded run's own
verdict, by the same judge, stands beside it (``recorded_verdict``).
"""

from __future__ import annotations

import datetime
import importlib
import json
import platform
import time

from gpulab.scoreboard.claim import DECISIVE, INCONCLUSIVE, NEEDS_GPU, NotMeasured
from gpulab.scoreboard.jobs import Bench, JobFailed

SCHEMA_VERSION = 2  # 2: values carry intervals, verdicts three outcomes, rows the machine's state
MODULES = ("bcast_claims", "tuned_claims", "engine_claims", "grid_claims", "training_claim")
RECORD_ERRORS = (NotMeasured, KeyError, StopIteration, ZeroDivisionError)  # a record without what a claim reads
FITTED_IN_THE_RUN = "fitted here"  # a model column's source when the run fitted it: part of that run's record


def all_claims() -> dict:
    """{id: Claim} in the issue's order: a, b, c, d, d-gpu, e ... i."""
    found = [c for m in MODULES for c in importlib.import_module(f"gpulab.scoreboard.{m}").CLAIMS]
    return {c.id: c for c in sorted(found, key=lambda c: c.id)}


def _attempt(fn, errors=(NotMeasured, JobFailed)) -> tuple[dict | None, str | None]:
    try:
        return fn(), None
    except errors as err:
        return None, str(err) or type(err).__name__


def evaluate(claim, bench: Bench) -> dict:
    """One claim's row; a part that cannot be had here says why instead (``*_reason``)."""
    start, jobs = time.monotonic(), len(bench.snapshots)
    bench.progress(f"[{claim.id}] {claim.claim} ...")
    live, live_reason = _attempt(lambda: claim.live(bench))
    recorded, recorded_reason = _attempt(claim.recorded, RECORD_ERRORS)
    recorded_model, recorded_model_reason = _attempt(lambda: claim.model(bench), RECORD_ERRORS)  # of the record
    if live is not None and live.get("model") is not None:
        model, model_reason = live.pop("model"), None
    else:
        if live is not None:
            live.pop("model", None)
        model, model_reason = recorded_model, recorded_model_reason
    basis, source = ("this run", live) if live is not None else ("the recorded run", recorded)
    state = max(bench.snapshots[jobs:], key=lambda s: s.load or 0.0, default=None)  # the busiest start
    if source is None:
        verdict = NEEDS_GPU if claim.gpu else INCONCLUSIVE
        why = f"nothing measured: {live_reason}; {recorded_reason}"
    else:
        verdict, why = claim.judge(source["value"], model["value"] if model else None)
        why = f"{why}; from {basis}" + (f" ({live_reason})" if live is None else f", {source['where']}")
        if verdict == INCONCLUSIVE:
            why += "; " + (what_to_try(claim.id, bench, state) if live is not None else
                           "a record of 6 rounds or more could decide (docs/scoreboard.md: recording)")
    row = {"id": claim.id, "claim": claim.claim, "paper": claim.paper, "live": live, "recorded": recorded,
           "model": model, "verdict": verdict, "why": why, "verdict_from": basis if source else None,
           "machine": state.to_dict() if state and live is not None else None, "rounds": bench.rounds,
           "seconds": round(time.monotonic() - start, 1)}
    if recorded is not None:
        row["recorded_verdict"], row["recorded_why"] = claim.judge(
            recorded["value"], recorded_model["value"] if recorded_model else None)
    for part, reason in (("live", live_reason), ("recorded", recorded_reason), ("model", model_reason)):
        if reason:
            row[f"{part}_reason"] = reason
    bench.progress(f"[{claim.id}] {verdict} ({row['seconds']:.0f} s)")
    return row


def what_to_try(claim_id: str, bench: Bench, state) -> str:
    """Why a live measurement may not decide, from the machine's state before its jobs, and what to try."""
    more = f"`gpulab scoreboard --claims {claim_id} --rounds {2 * bench.rounds}`"
    if bench.quick:
        more += " or the full run (no --quick: more iterations per round, larger sizes)"
    if state is None:
        return f"to decide: more rounds ({more})"
    return f"the machine before the jobs: {state.text()}; to decide: {state.advice()}: {more}"


def run(claims=None, quick: bool = True, progress=None, rounds: int | None = None) -> list[dict]:
    """The rows of ``claims`` (ids, default all), measured in quick or full mode, each measurement in ``rounds``
    interleaved rounds (default ``jobs.ROUNDS``); ``progress(line)`` per step."""
    known = all_claims()
    wanted = list(known) if claims is None else list(claims)
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ValueError(f"unknown claim(s) {unknown}; known: {', '.join(known)}")
    bench = Bench(quick=quick, progress=progress, rounds=rounds)
    return [evaluate(known[c], bench) for c in wanted]


def show(claims=None, quick: bool = True, rounds: int | None = None):
    """A notebook's one call: run ``claims`` (printing a line as each starts and ends) and return their table."""
    return table(run(claims, quick=quick, progress=print, rounds=rounds))


def load(path) -> list[dict]:
    """The rows of a record that ``write_json`` wrote (``gpulab scoreboard --json``), for ``table``: the claims'
    words and the papers' numbers as the code states them now, and each model column that the kit computes from
    its code and shipped records alone computed again now (``todays_model``)."""
    with open(path) as f:
        data = json.load(f)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: scoreboard schema {data.get('schema_version')}, this gpulab reads {SCHEMA_VERSION}")
    bench, claims = Bench(quick=data.get("quick", True)), all_claims()
    rows = [{**row, "claim": claims[row["id"]].claim, "paper": claims[row["id"]].paper} if row["id"] in claims
            else row for row in data["rows"]]
    return [todays_model(row, bench) for row in rows]


def todays_model(row: dict, bench: Bench) -> dict:
    """``row`` with today's model column where the kit computes it without measuring (not a model the run
    fitted), and the judge's words that quote it said again: a record cannot show a stale prediction."""
    old, claim = row.get("model"), all_claims().get(row["id"])
    if not old or claim is None or FITTED_IN_THE_RUN in old.get("source", ""):
        return row
    new, _ = _attempt(lambda: claim.model(bench), RECORD_ERRORS)
    if new is None or new == old:
        return row
    row = {**row, "model": new}
    basis = row["live"] if row.get("verdict_from") == "this run" else row.get("recorded")
    if basis is not None:  # the verdict's own sentence starts the why; what evaluate added follows it
        stale, fresh = (claim.judge(basis["value"], m["value"]) for m in (old, new))
        if stale[0] == fresh[0] == row["verdict"] and row["why"].startswith(stale[1]):
            row["why"] = fresh[1] + row["why"][len(stale[1]):]
    if row.get("recorded") is not None and "recorded_verdict" in row:
        row["recorded_verdict"], row["recorded_why"] = claim.judge(row["recorded"]["value"], new["value"])
    return row


def _cell(part: dict | None, reason: str | None, verdict: str | None = None) -> str:
    return (part["text"] + (f" ({verdict})" if verdict else "")) if part else f"- ({reason})"


def table(rows: list[dict]):
    """A notebook's table of the rows (HTML in Jupyter, aligned text elsewhere)."""
    from gpulab.widgets.tables import Table

    return Table([{"claim": f"({r['id']}) {r['claim']}", "paper": r["paper"]["value"],
                   "this run": _cell(r["live"], r.get("live_reason")),
                   "recorded": _cell(r["recorded"], r.get("recorded_reason"), r.get("recorded_verdict")),
                   "model": _cell(r["model"], r.get("model_reason")), "verdict": r["verdict"], "why": r["why"]}
                  for r in rows])


def markdown_rows(rows: list[dict]) -> list[str]:
    """The rows as docs/scoreboard.md tabulates them: each source's text, the verdict with the first two
    clauses of its why (the JSON holds the rest)."""
    def live(r):
        if r["live"]:
            return _cell(r["live"], None)
        return "nothing measured: " + "; ".join(x for x in (r.get("live_reason"), r.get("recorded_reason")) if x)

    def why(r):
        clauses = r["why"].split("; ")
        return "; ".join(clauses[:2]) + ("; ..." if len(clauses) > 2 else "")

    out = []
    for r in rows:
        cells = [f"({r['id']}) {r['claim']}", r["paper"]["value"], live(r),
                 _cell(r["recorded"], None, r.get("recorded_verdict")) if r["recorded"] else "-",
                 _cell(r["model"], None) if r["model"] else "-", f"**{r['verdict']}**: {why(r)}"]
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return out


def outcomes(rows: list[dict]) -> dict:
    """{claim id: verdict} of the rows (a notebook compares a live board's with the recorded one's)."""
    return {r["id"]: r["verdict"] for r in rows}


def contradictions(live: list[dict], recorded: list[dict]) -> list[str]:
    """The claims whose live verdict contradicts a decisive recorded one (holds against does not hold), one line
    each. A live run may be inconclusive where the record decided, or decide where the record could not: neither
    is a contradiction."""
    decided = {r["id"]: r["verdict"] for r in recorded if r["verdict"] in DECISIVE}
    return [f"({r['id']}) {r['verdict']} now, {decided[r['id']]} recorded: {r['why']}" for r in live
            if r["verdict"] in DECISIVE and decided.get(r["id"], r["verdict"]) != r["verdict"]]


def format_rows(rows: list[dict]) -> str:
    """The rows for a terminal: one block per claim, each source with where it comes from."""
    lines = []
    for r in rows:
        lines.append(f"({r['id']}) {r['claim']}")
        lines.append(f"    paper:     {r['paper']['value']}  [{r['paper']['source']}]")
        for label, part, where in (("this run", "live", "where"), ("recorded", "recorded", "source"),
                                   ("model", "model", "source")):
            x = r[part]
            lines.append(f"    {label + ':':<10} " + (f"{x['text']}  [{x[where]}]" if x else
                                                    f"- ({r.get(part + '_reason')})"))
            if part == "recorded" and x:
                lines.append(f"    {'':<10} recorded verdict: {r['recorded_verdict']}: {r['recorded_why']}")
        lines.append(f"    verdict:   {r['verdict'].upper()}: {r['why']}")
    return "\n".join(lines)


def record(rows: list[dict], quick: bool, seconds: float) -> dict:
    """The JSON record of a run (``SCHEMA_VERSION`` says how to read it)."""
    from gpulab.records import provenance

    return {"schema_version": SCHEMA_VERSION,
            "provenance": provenance(f"the scoreboard's rows ({'quick' if quick else 'full'} mode): each claim of "
                                     "the two papers measured here in interleaved rounds, recorded, modelled, "
                                     "judged from the intervals"),
            "quick": quick, "seconds": round(seconds, 1),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "rows": rows}


def write_json(path, rows: list[dict], quick: bool, seconds: float) -> None:
    data = record(rows, quick, seconds)  # before opening: truncating a tracked record would make git call it dirty
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
