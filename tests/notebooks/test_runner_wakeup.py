"""The notebook runner never sleeps through an execute_reply (nbrun.py's ``wake_pending_poll``).

While a cell runs, nbclient waits for the reply with one asyncio poll on the
shell socket; its stand-in for an ``ipywidgets.Output`` answers each display
with a comm_msg on the same socket. A raw send there clears the socket's
edge-triggered readiness, so a reply that arrives just before is noticed only
at the cell timeout. Both tests below stall for their whole timeout when
``wake_pending_poll`` is not applied (tried by removing it).
"""

import asyncio
import time

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session
from nbclient import output_widget

from tests.notebooks.nbrun import StrictClient, wake_pending_poll

POLL_TIMEOUT = 10.0  # seconds; a woken poll returns in milliseconds


async def _reply_then_send(session: Session) -> tuple[dict, float]:
    """The race, made deterministic: the reply is queued, then a send happens before the loop looks."""
    kernel = zmq.Context().socket(zmq.ROUTER)
    port = kernel.bind_to_random_port("tcp://127.0.0.1")
    ctx = zmq.asyncio.Context()
    channel = wake_pending_poll(AsyncZMQSocketChannel(ctx.socket(zmq.DEALER), session))
    channel.socket.connect(f"tcp://127.0.0.1:{port}")
    try:
        channel.send(session.msg("execute_request", content={"code": ""}))
        assert kernel.poll(5000), "the request never reached the kernel socket"
        ident, request = session.feed_identities(kernel.recv_multipart())
        parent = session.deserialize(request)
        pending = asyncio.ensure_future(channel.get_msg(timeout=POLL_TIMEOUT))
        await asyncio.sleep(0.1)  # the poll is now registered with the event loop
        session.send(kernel, "execute_reply", content={"status": "ok"}, parent=parent, ident=ident)
        time.sleep(0.2)  # the reply arrives while the loop is busy (blocked here)...
        channel.send(session.msg("comm_msg", content={"data": {}}))  # ...and a widget answers first
        start = time.monotonic()
        reply = await pending
        return reply, time.monotonic() - start
    finally:
        channel.close()
        kernel.close(linger=0)
        ctx.term()


def test_poll_wakes_for_a_reply_that_arrived_before_a_send():
    reply, waited = asyncio.run(_reply_then_send(Session(key=b"k")))
    assert reply["msg_type"] == "execute_reply"
    assert waited < POLL_TIMEOUT / 2, f"the poll slept {waited:.1f} s of its {POLL_TIMEOUT} s timeout"


OUTPUT_WIDGET_CELLS = [
    "import ipywidgets, time\nout = ipywidgets.Output()\ndisplay(out)",
    "for i in range(5):\n    with out:\n        print(i)\n    time.sleep(0.05)",
    "with out:\n    print('done')",
]


def test_cells_printing_into_an_output_widget_do_not_stall(tmp_path, monkeypatch):
    """A slow widget stand-in (its answer leaves after the reply arrived) must not stall the cell."""
    answer = output_widget.OutputWidget.send

    def late_answer(self, *args, **kwargs):
        time.sleep(0.3)  # the kernel's execute_reply is queued by now
        return answer(self, *args, **kwargs)

    monkeypatch.setattr(output_widget.OutputWidget, "send", late_answer)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in OUTPUT_WIDGET_CELLS])
    client = StrictClient(nb, timeout=POLL_TIMEOUT, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})
    start = time.monotonic()
    client.execute()
    took = time.monotonic() - start
    widget_sends = 6  # one comm_msg per print into the widget, each 0.3 s late
    assert took < POLL_TIMEOUT, f"3 cells took {took:.1f} s: a reply waited for the cell timeout"
    assert [c.execution_count for c in nb.cells] == [1, 2, 3]
    assert took > widget_sends * 0.3 * 0.9, "the widget stand-in was not exercised"
