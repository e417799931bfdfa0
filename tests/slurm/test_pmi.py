"""Why docs/cluster.md exports MPIR_CVAR_CH4_NETMOD=ofi under ``srun --mpi=pmi2``: Slurm's pmi2 plugin
reads each PMI-1 request (the wire protocol the ``mpich`` wheel speaks) with one read of at most 1024
bytes, so a longer put arrives cut in two and the key-value store keeps a truncated value. MPICH's
UCX business card travels in puts of up to 1022 hex characters (plus the command around them); its
OFI card is 64 bytes.

The task below speaks PMI-1 to its slurmstepd itself (no MPI), which makes the cut deterministic.
If the long value ever survives, Slurm reads whole lines and the setting is no longer needed.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
sent = {"short": "a" * 900, "long": "b" * 1000}  # put lines of 935 and 1034 bytes
for key, value in sent.items():
    ask(f"cmd=put kvsname={kvs} key={key} value={value}\n")
ask("cmd=barrier_in\n")
got = {key: ask(f"cmd=get kvsname={kvs} key={key}\n").get("value", "") for key in sent}
ask("cmd=finalize\n")
print(json.dumps({key: [len(sent[key]), len(got[key]), got[key] == sent[key]] for key in sent}))
"""


def test_slurms_pmi2_plugin_cuts_pmi1_requests_at_1024_bytes(slurm_env):
    done = subprocess.run(["srun", "-N", "1", "-n", "1", "--mpi=pmi2", sys.executable, "-c", PMI1_CLIENT],
                          env=slurm_env.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    lengths = json.loads(done.stdout.strip().splitlines()[-1])  # key: [sent, got back, equal]
    assert lengths["short"] == [900, 900, True], lengths
    # the first 1024 bytes were read: "cmd=put kvsname=K key=long value=" and the value's first ~990
    # characters, without the newline that ends the request; the rest was read as a request of its own
    assert lengths["long"][2] is False and lengths["long"][1] < 1000, lengths
    assert "value not properly terminated" in done.stderr, done.stderr
    print(f"\nPMI-1 put through Slurm's pmi2 plugin, [sent, got back, intact]: {lengths}")
