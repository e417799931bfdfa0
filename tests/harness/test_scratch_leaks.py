"""The suite's leak check (tests/conftest.py) tells a killed job's MPI scratch files from a running job's.
(That the harness removes what it kills is checked by that same check after test_mpi_harness's deadlock test.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi_harness import leaked_scratch, scratch_on_disk


@pytest.fixture
def planted():
    path = Path(f"/dev/shm/mpich_shm_gpulabtest_{os.getpid()}")
    yield path
    path.unlink(missing_ok=True)


def test_a_file_nobody_holds_is_a_leak(planted):
    before = scratch_on_disk()
    planted.write_bytes(b"x")
    assert leaked_scratch(before, grace=0.5) == {str(planted)}


def test_a_file_a_running_process_holds_is_not(planted):
    before = scratch_on_disk()
    planted.write_bytes(b"x")
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(planted)!r}); print(1, flush=True); "
                               "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "1"
        assert leaked_scratch(before, grace=0.5) == set()
    finally:
        holder.kill()
        holder.wait()

