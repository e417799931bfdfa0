"""Machines: one description with a schema version, one loader, one link type, profiles with sources, the
interface each model reads, and the line both fits use."""

import json
from dataclasses import fields
from pathlib import Path

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
from gpulab.machines import ENV, SCHEMA_VERSION, Description, Link, LinkLevel, SchemaError, load, profiles
from gpulab.machines.description import GPU_KEYS, PROBE_KEYS
from gpulab.machines.interface import ComputeMachine, LinkMachine, Profile
from gpulab.machines.linefit import relative_line

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


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


def test_every_machine_has_one_name_and_one_description():
    assert set(MACHINES) <= set(PROFILES) == set(profiles.links())
    assert not any("links" in spec or "description" in spec for spec in profiles.gpus().values())
    for alias, name in machines.ALIASES.items():
        assert alias not in PROFILES and name in PROFILES
        assert load(alias) == load(name) and profile(alias) == profile(name) and machine(alias) == machine(name)
        assert machine(alias).name == profile(alias).name == name
    for name in PROFILES:
        d = load(name)
        assert d.name == name and d.about and d.ranks_per_node and (d.gpu is not None) == (name in MACHINES)
        assert d.probes is None and d.pingpong is None and d.fitted_ranks is None


def test_one_link_type_both_models_read_the_same_numbers():
    for name in MACHINES:
        d, gpu, hockney = load(name), machine(name), profile(name)
        for level in ("intra", "inter"):
            raw = profiles.links()[name][level]
            link = getattr(d, level)
            assert link.large is None and link.switch is None  # a profile: plain Hockney
            assert link.small.alpha == pytest.approx(raw["alpha_us"] * 1e-6, rel=1e-12)
            assert link.small.bandwidth == pytest.approx(raw["bandwidth_GBps"] * 1e9, rel=1e-12)
            assert getattr(gpu, level) == getattr(hockney, level).small == link.small
            assert type(getattr(gpu, level)) is LinkLevel
        assert gpu.ranks_per_node == hockney.ranks_per_node == d.ranks_per_node
        assert hockney.notes["sources"] == d.link_sources() and len(d.link_sources()) == 5
        assert all(v.startswith(f"link profile {name!r}: ") for k, v in gpu.sources.items() if k.startswith("links"))
    assert LinkLevel.of_bandwidth(1e-6, 2e9) == LinkLevel(1e-6, 5e-10) and Link.plain(1e-6, 5e-10).small.time(10) \
        == pytest.approx(1e-6 + 5e-9)


def test_every_machine_round_trips_through_one_description():
    hockney, engine = fitted_bcast_machine(), fitted_engine_machine()
    for m in (hockney, profile("kesch"), profile("frontier")):
        d = m.describe()
        assert Machine.from_description(Description.from_dict(json.loads(json.dumps(d.to_dict())))) == m
    assert hockney.describe().pingpong == {"overhead": hockney.overhead, "call": hockney.call}
    assert hockney.describe().fitted_ranks == 2 and "samples" in hockney.describe().notes
    d = engine.describe()
    assert d.probes is not None and d.intra is None and set(d.probes) == set(PROBE_KEYS)
    assert FittedMachine.from_description(Description.from_dict(json.loads(json.dumps(d.to_dict())))) == engine
    gpu = load("perlmutter")
    assert set(gpu.gpu) == set(GPU_KEYS) and Description.from_dict(json.loads(json.dumps(gpu.to_dict()))) == gpu
    assert GPUMachine.from_description(gpu) == machine("perlmutter")


def test_the_schema_names_every_field_each_model_builds_from():
    """The probes part is FittedMachine's fields but those the description holds itself; the GPU part is
    GPUMachine's numbers: a field added to either needs the schema (and its version) to follow."""
    assert set(PROBE_KEYS) == {f.name for f in fields(FittedMachine)} - {"name", "ranks", "cores", "sources"}
    assert set(GPU_KEYS) == {f.name for f in fields(GPUMachine)} - {"name", "description", "ranks_per_node", "intra",
                                                                     "inter", "sources"}


def test_load_takes_names_files_tuning_files_and_the_site_default(tmp_path, monkeypatch):
    assert isinstance(machine("perlmutter"), GPUMachine)
    assert profile("kesch") == Machine.from_description(load("kesch"))
    fitted = fitted_engine_machine()
    fitted.save(tmp_path / "engine.json")
    assert machine(tmp_path / "engine.json") == fitted and machine(str(tmp_path / "engine.json")) == fitted
    hockney = fitted_bcast_machine()
    (tmp_path / "machine.json").write_text(dumps(hockney))
    assert profile(tmp_path / "machine.json") == hockney
    tuning.update(tmp_path / "tuning.json", p=2, model=hockney.to_dict())
    assert profile(tmp_path / "tuning.json", p=4) == hockney  # the nearest fit
    assert machine(default="frontier").name == "frontier"
    monkeypatch.setenv(ENV, "h100")
    assert machine(default="frontier").name == "dgx-h100" and load().name == "dgx-h100"
    assert machine("perlmutter").name == "perlmutter"  # a name given wins over the site's
    monkeypatch.setenv(ENV, str(tmp_path / "engine.json"))
    assert machine() == fitted
    tuning.forget()


def test_load_errors_name_the_known_machines_and_the_fix(monkeypatch, tmp_path):
    with pytest.raises(KeyError, match=r"unknown machine 'summit'; known profiles: \['dgx-h100', 'frontier', "
                                       r"'kesch', 'perlmutter'\] \(aliases: h100 = dgx-h100\)"):
        load("summit")
    with pytest.raises(KeyError, match=r"'kesch' has no GPU numbers or fit for the engine's model: name one of "
                                       r"\['dgx-h100', 'frontier', 'perlmutter'\]"):
        machine("kesch")  # a link profile only
    with pytest.raises(KeyError, match=f"{ENV}=summit: unknown machine 'summit'"):
        monkeypatch.setenv(ENV, "summit")
        machine()
    monkeypatch.delenv(ENV)
    with pytest.raises(ValueError, match=f"no machine named.*{ENV}"):
        machine()
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.json")
    fitted_engine_machine().save(tmp_path / "engine.json")
    with pytest.raises(ValueError, match="has no links for the broadcast's model"):
        profile(tmp_path / "engine.json")
    (tmp_path / "empty.json").write_text(json.dumps({"version": 1, "models": {}, "tables": {}}))
    with pytest.raises(FileNotFoundError, match="no fitted model.*gpulab tune fit"):
        load(tmp_path / "empty.json")


def test_a_file_of_another_schema_is_refused_with_the_fix(tmp_path):
    """A fit saved as its old fields (no schema_version), a newer version, a part that is not the schema's."""
    old = tmp_path / "old.json"
    fields_only = {f.name: getattr(fitted_engine_machine(), f.name) for f in fields(FittedMachine)}
    old.write_text(json.dumps(fields_only))
    with pytest.raises(SchemaError, match=rf"old.json: no schema_version, this kit reads machine files of schema "
                                          rf"{SCHEMA_VERSION}; refit with `gpulab model fit`.*`gpulab tune fit`"):
        machine(old)
    newer = fitted_engine_machine().describe().to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(SchemaError, match=f"schema_version {SCHEMA_VERSION + 1}, this kit reads"):
        load(tmp_path / "newer.json")
    d = fitted_engine_machine().describe().to_dict()
    d["probes"]["contended"] = True
    with pytest.raises(SchemaError, match=r"keys missing or unknown: \[\"probes: \['contended'\]\"\]"):
        Description.from_dict(d)
    tuning.update(tmp_path / "tuning.json", p=2, model=fields_only)
    with pytest.raises(SchemaError, match="tuning.json, its fit for 2 ranks: no schema_version"):
        load(tmp_path / "tuning.json", p=2)
    tuning.forget()


def _is_description(o) -> bool:
    return isinstance(o, dict) and {"schema_version", "probes", "pingpong"} <= set(o)


def _descriptions(o):
    if isinstance(o, dict):
        if _is_description(o):
            yield o
        else:
            for v in o.values():
                yield from _descriptions(v)
    elif isinstance(o, list):
        for v in o:
            yield from _descriptions(v)


def _machines(o):
    """The machines a record holds in the shapes older kits wrote (a Hockney fit, a FittedMachine's fields)."""
    if isinstance(o, dict) and not _is_description(o):
        if "matmul_rate" in o and "collectives" in o or isinstance(o.get("intra"), dict) and "small" in o["intra"]:
            yield o
        for v in o.values():
            yield from _machines(v)
    elif isinstance(o, list):
        for v in o:
            yield from _machines(v)


def test_every_machine_the_kit_ships_is_of_the_current_schema():
    """The fits in docs/results (tuning file, fitted machines, the fits inside records) read as descriptions,
    each by the model it belongs to; none is left in an older shape."""
    found = set()
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text())
        assert not list(_machines(data)), f"{path.name} holds a machine of no schema version"
        for raw in _descriptions(data):
            d = Description.from_dict(raw, path.name)
            built = FittedMachine.from_description(d) if d.probes is not None else Machine.from_description(d)
            assert built.name == d.name
            found.add(path.name)
    assert {"bcast_tuning.json", "engine_machine_p4.json", "fit_cupy_p2.json", "engine_grid_p4.json",
            "emulated_engine_100mbit.json", "engine_accuracy_1x4_machine_run1.json"} <= found


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
    assert fitted.inter == LinkLevel(1e-4, 2e-9)  # a send of n bytes: a 2-rank all-gather of 2n


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
