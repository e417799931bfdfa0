"""Machine profiles: one name per machine, one reader of the links, one resolver, one interface, one line fit."""

import numpy as np
import pytest

from gpulab import machines
from gpulab.bcast.cost.hockney import Machine, dumps
from gpulab.bcast.cost.profiles import PROFILES, profile
from gpulab.bcast.measurement.pingpong_fit import _lsq, fit_machine
from gpulab.bcast.selection import tuning
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.machines import MACHINES, GPUMachine, machine
from gpulab.engine.perf.probes import fit_line
from gpulab.machines.interface import ComputeMachine, LinkMachine, Profile
from gpulab.machines.linefit import relative_line
from gpulab.machines.resolver import ENV, resolve


def fitted_engine_machine(name="fitted") -> FittedMachine:
    return FittedMachine(name=name, ranks=2, cores=2, collectives={"all_gather/2": [1e-4, 1e-9]}, matmul_rate=1e10,
                         elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=2e10,
                         overlap={"poll": 0.5}, memory_bytes=1e9)


def fitted_bcast_machine() -> Machine:
    """A ping-pong fit on 2 ranks from synthetic samples: 2 us + 1 ns/B on one node."""
    sizes = [8, 1024, 65536, 1 << 20]
    samples = [{"peer": 1, "level": "intra", "nbytes": n, "via": "mpi", "seconds": 2e-6 + n * 1e-9, "iters": 10}
               for n in sizes]
    return fit_machine(samples, p=2, cores=2, switch=None, name="fitted here")


@pytest.fixture(autouse=True)
def no_site_machine(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_every_machine_has_one_name_in_both_files():
    for name, spec in machines.gpus().items():
        assert spec["links"] == name, f"{name}'s network is link profile {spec['links']!r}: one machine, two names"
    assert set(MACHINES) <= set(PROFILES)
    for alias, name in machines.ALIASES.items():
        assert alias not in PROFILES and alias not in MACHINES and name in PROFILES
        assert profile(alias) == profile(name) and machine(alias) == machine(name)
        assert resolve(alias, kind="engine").name == resolve(alias, kind="bcast").name == name


def test_both_models_read_the_same_link_numbers():
    for name in MACHINES:
        links, gpu, hockney = machines.link_profile(name), machine(name), profile(name)
        for level in ("intra", "inter"):
            raw = machines.links()[name][level]
            assert getattr(links, level).alpha == pytest.approx(raw["alpha_us"] * 1e-6, rel=1e-12)
            assert getattr(links, level).bandwidth == pytest.approx(raw["bandwidth_GBps"] * 1e9, rel=1e-12)
            assert getattr(gpu, level).alpha == getattr(hockney, level).small.alpha == getattr(links, level).alpha
            assert getattr(gpu, level).bandwidth == 1 / getattr(hockney, level).small.beta
        assert gpu.ranks_per_node == hockney.ranks_per_node == links.ranks_per_node
        assert hockney.notes["sources"] == links.sources
        assert all(v.startswith(f"link profile {name!r}: ") for k, v in gpu.sources.items() if k.startswith("links"))


def test_resolve_names_files_and_the_site_default(tmp_path, monkeypatch):
    assert isinstance(resolve("perlmutter", kind="engine"), GPUMachine)
    assert resolve("kesch", kind="bcast") == profile("kesch")
    fitted = fitted_engine_machine()
    fitted.save(tmp_path / "engine.json")
    assert resolve(tmp_path / "engine.json", kind="engine") == fitted
    assert resolve(str(tmp_path / "engine.json"), kind="engine") == fitted
    hockney = fitted_bcast_machine()
    (tmp_path / "machine.json").write_text(dumps(hockney))
    assert resolve(tmp_path / "machine.json", kind="bcast") == hockney
    tuning.update(tmp_path / "tuning.json", p=2, model=hockney.to_dict())
    assert resolve(tmp_path / "tuning.json", kind="bcast", p=4) == hockney  # the nearest fit
    monkeypatch.setenv(tuning.ENV, str(tmp_path / "tuning.json"))
    assert resolve(kind="bcast", p=2) == hockney  # no name, no site choice: this computer's fit
    assert resolve(kind="engine", default="frontier").name == "frontier"
    monkeypatch.setenv(ENV, "h100")
    assert resolve(kind="engine", default="frontier").name == "dgx-h100"
    assert resolve(kind="bcast").name == "dgx-h100"
    assert resolve("perlmutter", kind="engine").name == "perlmutter"  # a name given wins over the site's
    monkeypatch.setenv(ENV, str(tmp_path / "engine.json"))
    assert resolve(kind="engine") == fitted
    tuning.forget()


def test_resolve_errors_name_the_known_machines(monkeypatch, tmp_path):
    with pytest.raises(KeyError, match=r"unknown machine 'summit'; known profiles: \['dgx-h100', 'frontier', "
                                       r"'perlmutter'\] \(aliases: h100 = dgx-h100\)"):
        resolve("summit", kind="engine")
    with pytest.raises(KeyError, match="known profiles: .*'kesch'"):
        resolve("summit", kind="bcast")
    with pytest.raises(KeyError, match=f"{ENV}=kesch: unknown machine 'kesch'"):
        monkeypatch.setenv(ENV, "kesch")  # a link profile only: the engine's model has no GPU numbers for it
        resolve(kind="engine")
    monkeypatch.delenv(ENV)
    with pytest.raises(ValueError, match=f"no machine named.*{ENV}"):
        resolve(kind="engine")
    with pytest.raises(FileNotFoundError):
        resolve(tmp_path / "missing.json", kind="engine")
    with pytest.raises(ValueError, match="kind must be one of"):
        resolve("perlmutter", kind="gpu")


def test_every_machine_class_offers_what_its_model_reads():
    gpu, fitted, hockney, measured = machine("frontier"), fitted_engine_machine(), profile("kesch"), \
        fitted_bcast_machine()
    for m in (gpu, fitted, hockney, measured):
        assert isinstance(m, Profile) and m.name and isinstance(m.assumptions(), list)
    assert isinstance(gpu, ComputeMachine) and isinstance(fitted, ComputeMachine)
    assert isinstance(hockney, LinkMachine) and isinstance(measured, LinkMachine)
    assert not isinstance(hockney, ComputeMachine) and not isinstance(gpu, LinkMachine)
    assert hockney.assumptions()[0].startswith("ranks_per_node: ") and len(hockney.assumptions()) == 5
    assert measured.assumptions() == ["fit: ping-pong on 2 ranks"]


def test_relative_line_matches_a_weighted_polyfit_and_both_fits_use_it():
    rng = np.random.default_rng(0)
    x = np.geomspace(8, 64 << 20, 25)
    t = (3e-6 + 2e-10 * x) * rng.uniform(0.9, 1.1, x.size)
    beta, alpha = np.polyfit(x, t, 1, w=1 / t)  # minimises sum(((t - line) / t)^2): the reference
    assert relative_line(x, t) == pytest.approx((alpha, beta), rel=1e-9)
    assert relative_line(x, 3e-6 + 2e-10 * x) == pytest.approx((3e-6, 2e-10), rel=1e-9)
    h = _lsq(x, t)
    assert (h.alpha, h.beta) == pytest.approx((alpha, beta), rel=1e-12)
    assert fit_line(x, t) == pytest.approx((alpha, beta), rel=1e-12)
    # each keeps its own reading of a negative slope: the broadcast's pure latency, the engine's tiny rate
    flat = np.array([2.0, 1.9, 1.8]) * 1e-6
    assert _lsq(np.array([1.0, 2.0, 3.0]), flat).beta == 0.0
    assert fit_line([1.0, 2.0, 3.0], flat)[1] == 1e-30
