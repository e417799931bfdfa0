"""Why docs/cluster.md exports MPIR_CVAR_CH4_NETMOD=ofi under ``srun --mpi=pmi2``: Slurm's pmi2 plugin
reads each PMI-1 request (the wire protocol the ``mpich`` wheel speaks) with one read of at most 1024
bytes, so a longer put arrives cut in two and the key-value store keeps a truncated value. MPICH's
UCX business card travels in puts of up to 1022 hex characters (plus the command around them); its
OFI card is 64 bytes.

The task below speaks PMI-1 to its slurmstepd itself (no MPI), which makes the cut deterministic.
If the errors ever stop, Slurm reads whole lines and the setting is no longer needed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PMI1_CLIENT = r"""
import json, os, socket
pmi = socket.socket(fileno=int(os.environ["PMI_FD"]))
pmi.settimeout(20)
pending = b""

def ask(line):
    global pending
    pmi.sendall(line.encode())
    while b"\n" not in pending:
        pending += pmi.recv(4096)
    reply, pending = pending.split(b"\n", 1)
    return dict(item.split("=", 1) for item in reply.decode().split(" ") if "=" in item)

ask("cmd=init pmi_version=1 pmi_subversion=1\n")
kvs = ask("cmd=get_my_kvsname\n")["kvsname"]
short = "a" * 900  # a put line of about 935 bytes
ask(f"cmd=put kvsname={kvs} key=short value={short}\n")
ask("cmd=barrier_in\n")
got = ask(f"cmd=get kvsname={kvs} key=short\n").get("value", "")
# about 1035 bytes; the last request: the cut-off rest, read as a request of its own, gets no reply and
# would swallow any request sent after it
ask(f"cmd=put kvsname={kvs} key=long value={'b' * 1000}\n")
print(json.dumps({"short": [len(short), len(got), got == short]}))
"""


@pytest.mark.parametrize("slurm", ["loopback"], indirect=True)  # Slurm's plugin, wherever the nodes are
def test_slurms_pmi2_plugin_cuts_pmi1_requests_at_1024_bytes(slurm_env):
    done = subprocess.run(["srun", "-N", "1", "-n", "1", "--mpi=pmi2", sys.executable, "-c", PMI1_CLIENT],
                          env=slurm_env.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    lengths = json.loads(done.stdout.strip().splitlines()[-1])  # key: [sent, got back, equal]
    assert lengths["short"] == [900, 900, True], lengths
    # slurmstepd read the long put's first 1024 bytes (without the newline that ends it) and the rest apart
    assert "value not properly terminated in client request" in done.stderr, done.stderr
    assert "request not begin with 'cmd='" in done.stderr and "full request is: bbb" in done.stderr, done.stderr
    print(f"\nPMI-1 through Slurm's pmi2 plugin: a 900-character value round-trips {lengths['short']}; "
          "a 1000-character one is cut")
