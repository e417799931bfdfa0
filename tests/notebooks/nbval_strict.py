"""A pytest plugin that makes ``pytest --nbval-lax notebooks/`` strict (``--nbval`` too).

nbval passes a cell whose execute_reply says "error" when no error *output*
was sent: a ``%%px`` that fails with a UsageError (the magic not on the first
line, say) only writes a stderr line. It also passes a cell that hit its
timeout under ``--nbval-lax``. This plugin records every reply's status and
fails the cell on anything but "ok", and fails timed-out cells.

    pytest -p tests.notebooks.nbval_strict --nbval-lax notebooks/   # default parameters, ~1-2 min each
    pytest tests/notebooks                          # the suite's way: nbclient, smaller parameters

A notebook that leaves engines behind (a killed kernel) is cleaned up by
gpulab.cluster's reaper once its kernel is gone.
"""

import pytest


def _strict_await_reply(self, msg_id, timeout=None):
    """nbval's RunningKernel.await_reply, keeping the reply's status instead of dropping it."""
    while True:
        msg = self.get_message(stream="shell", timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id:
            self.last_reply = msg["content"]
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            return


def pytest_configure(config):
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        from nbval.kernel import RunningKernel

        RunningKernel.await_reply = _strict_await_reply


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    kernel = getattr(getattr(item, "parent", None), "kernel", None)
    if kernel is not None:
        kernel.last_reply = None
    outcome = yield
    if kernel is None or outcome.excinfo is not None:
        return
    reply = kernel.last_reply or {}
    if getattr(item.parent, "timed_out", False):
        pytest.fail(f"cell {item.name} hit the cell timeout", pytrace=False)
    if reply.get("status") != "ok" and not item.options.get("check_exception"):
        pytest.fail(f"cell {item.name}: the kernel replied {reply.get('status')!r}: "
                    f"{reply.get('ename')}: {reply.get('evalue')}\n{item.cell.source}", pytrace=False)
