"""Run a check (or a timing) on a notebook's MPI engines, with the learner's function from the kernel.

    engines = start_engines(4)
    print(on_engines(engines, check_bcast, linear_bcast, shape="linear"))   # what passed, or CheckFailed

The learner's function is defined in the notebook's kernel; cloudpickle sends
it to the engines by value, with the helpers and modules it uses, so it needs
no ``%%px`` cell. The check runs on every engine (rank) and gives the same
verdict on all of them; rank 0's comes back. ``Engines.run`` bounds the time,
and a learner's loop that never ends comes back as EngineTimeout.

In an nbgrader test cell, print the result: a cell whose value is a string
would be read as a partial score, and any stderr output scores zero.
"""

from __future__ import annotations

from gpulab.exercises.report import CheckFailed


def _call(check, pickled: bytes, args: tuple, kwargs: dict):
    """On an engine: ("ok", result) or ("failed", the check's message)."""
    import cloudpickle

    fn = cloudpickle.loads(pickled)
    try:
        return "ok", check(fn, None, *args, **kwargs)
    except CheckFailed as failed:
        return "failed", str(failed)


def on_engines(engines, check, fn, *args, timeout: float = 240, **kwargs):
    """``check(fn, comm, *args, **kwargs)`` on every engine; rank 0's result, or CheckFailed with its message."""
    import cloudpickle

    verdicts = engines.run(_call, check, cloudpickle.dumps(fn), args, kwargs, timeout=timeout,
                           what=f"{getattr(check, '__name__', check)}({getattr(fn, '__name__', fn)})")
    status, result = verdicts[0]
    if status == "failed":
        raise CheckFailed(result)
    return result
