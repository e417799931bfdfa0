"""tests/bcast: MPI ranks that wait spin (MPICH's default), unlike the rest of the suite (tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True)
def spinning_waits(monkeypatch):
    """These jobs pass tens of thousands of tiny messages (3-7-byte chunks), one after another: a receiver
    that sleeps between polls pays a wake-up (about 90 us) on nearly every one, more than spinning costs."""
    monkeypatch.setenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", "0")
