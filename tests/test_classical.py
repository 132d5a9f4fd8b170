"""Classical real-time hybrid testing (hbtest.realtime.classical): the time-domain loop against the
delay-equation analysis of hbtest.realtime.stability, compensators, identification, CLI."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.integrate

from hbtest.realtime import classical as cl
from hbtest.method import harmonics
from hbtest.realtime import stability as st
from hbtest.cli import main
from hbtest.store import RunStore, open_run

M, C, K, KS = 1.0, 6.3, 4000.0, 4000.0
DT = 2e-4


@pytest.fixture(scope="module")
def sdof():
    return cl.sdof_benchmark(M, C, K, KS)


@pytest.fixture(scope="module")
def tau_c():
    return st.sdof_critical_delay(M, C, K, KS).delay_s


# ---------------------------------------------------------------------------------------
# building blocks


def test_foh_discretisation_is_exact_for_linear_input():
    rng = np.random.default_rng(1)
    A = np.array([[0.0, 1.0], [-400.0, -3.0]])
    B = rng.normal(size=(2, 2))
    h = 3e-3
    Phi, Ga, Gb = cl.discretize_foh(A, B, h)
    x0, u0, u1 = rng.normal(size=2), rng.normal(size=2), rng.normal(size=2)
    sol = scipy.integrate.solve_ivp(lambda t, x: A @ x + B @ (u0 + (u1 - u0) * t / h), (0, h), x0, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Phi @ x0 + Ga @ u0 + Gb @ u1, sol.y[:, -1], rtol=1e-9, atol=1e-12)


def test_ps_state_space_is_the_condensed_dynamic_stiffness():
    from hbtest.method.substructure import split_beam

    _, ps, _ = split_beam(0.53, 0.17, 0.0254, 1e-3, 217e9, 8210.0, elements_per_metre=40, zeta_mass=0.9, zeta_stiffness=7e-5)
    A, B, Cm, D = cl.ps_state_space(ps)
    for f in (3.0, 18.0, 140.0):
        s = 2j * np.pi * f
        G = Cm @ np.linalg.solve(s * np.eye(A.shape[0]) - A, B) + D  # (2, 6): inputs x, x', x''
        Dp = G[:, 0:2] + s * G[:, 2:4] + s * s * G[:, 4:6]
        np.testing.assert_allclose(Dp, ps.dynamic_stiffness(s), rtol=1e-8, atol=1e-10 * np.abs(Dp).max())


@pytest.mark.parametrize("tr", [cl.TransferSystem("lag1", 1e-3, time_constant=4e-3), cl.TransferSystem("lag2", 6e-4, natural_frequency_hz=60.0, damping_ratio=0.6)])
def test_transfer_system_response_matches_its_frequency_response(tr):
    f, dt = 12.0, 1e-4
    t = dt * np.arange(int(1.0 / dt))
    x = tr.respond(np.cos(2 * np.pi * f * t), dt)
    last = t >= 0.5  # settled, whole periods
    c = harmonics.fit(t[last], x[last], f, (0, 1)).coefficients[1]
    assert abs(c - tr.frequency_response(2j * np.pi * f)) < 1e-4


def test_growth_rate_of_exponential_sinusoids():
    t = np.arange(0, 2.0, 1e-4)
    for sigma in (-2.0, 0.0, 3.5):
        y = np.exp(sigma * t) * np.cos(2 * np.pi * 13.0 * t + 0.3)
        g = cl.growth_rate(t, y)
        assert g.rate == pytest.approx(sigma, abs=0.01)
        assert g.unstable == (sigma > 0)
        assert g.frequency_hz == pytest.approx(13.0, abs=0.7)
    # with a forced steady part at another frequency
    y = 0.5 * np.sin(2 * np.pi * 4.0 * t) + 0.2 * np.exp(1.2 * t) * np.cos(2 * np.pi * 13.0 * t)
    assert cl.growth_rate(t, y, forcing_hz=4.0).rate == pytest.approx(1.2, rel=0.03)


def test_polynomial_predictor_weights_are_textbook_square_case():
    # via hbtest.realtime.stability (reused, not re-implemented): order N through N + 1 samples
    np.testing.assert_allclose(st.polynomial_predictor_weights(2, 3, 1.0), [3, -3, 1], atol=1e-12)
    np.testing.assert_allclose(st.polynomial_predictor_weights(1, 2, 1.0), [2, -1], atol=1e-12)
    np.testing.assert_allclose(st.polynomial_predictor_weights(3, 4, 1.0), [4, -6, 4, -1], atol=1e-12)
    p = cl.PolynomialPredictor(2, 3, horizon=DT)
    p.start(DT, 1, 10)
    np.testing.assert_allclose(p.weights, [3, -3, 1], atol=1e-9)


# ---------------------------------------------------------------------------------------
# the loop against the delay equation


@pytest.mark.parametrize("factor", [0.5, 2.0, 4.0, 8.0])
def test_sdof_growth_rate_matches_rightmost_root(sdof, tau_c, factor):
    tau = factor * tau_c
    root = st.sdof_system(M, C, K, KS).equation(tau).rightmost()
    res = cl.simulate(sdof, cl.TransferSystem("delay", tau), None, DT, 2.5, initial_displacement=[1e-3], emulated=False)
    g = res.growth()
    assert g.rate == pytest.approx(root.real, rel=0.02)
    assert g.frequency_hz == pytest.approx(root.imag / (2 * np.pi), rel=0.06)
    assert res.stable == (root.real < 0)


def test_three_mass_chain_growth_matches_stability(tmp_path):
    sysm = cl.three_mass_benchmark()
    sd = st.chain_hybrid([1.0, 0.5, 1.0], [1000.0, 2000.0, 2000.0, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True,
                         interface=[0, 2], physical_masses=[1], physical_links=[1, 2])
    tau = 6e-3
    root = sd.equation(tau).rightmost()
    res = cl.simulate(sysm, cl.TransferSystem("delay", tau), None, DT, 2.0, initial_displacement=[1e-3, -5e-4], emulated=False)
    assert root.real > 0
    assert res.growth().rate == pytest.approx(root.real, rel=0.03)


def test_delay_free_limit_matches_emulated_steady_state(sdof):
    f = 9.0
    res = cl.simulate(sdof, cl.TransferSystem("delay", DT), cl.PolynomialPredictor(2, 3, DT), DT, 4.0, cl.Excitation(f, 2.0))
    Z = res.steady_amplitude(10)[0]
    Ze = 2.0 * sdof.interface_response(f)[0]
    assert abs(Z - Ze) / abs(Ze) < 2e-3
    zem_amp = harmonics.fit(res.t[-2000:], res.z_emulated[-2000:, 0], f, (0, 1)).coefficients[1]
    assert abs(zem_amp - Ze) / abs(Ze) < 3e-3  # the emulated run has (nearly) settled too
    assert res.rms_global_error() < 2e-3 * np.abs(Ze)


def test_prediction_extends_stable_delay_range_as_predicted(sdof, tau_c):
    make_poly = lambda tau: cl.PolynomialPredictor(2, 3, tau)  # noqa: E731
    tc_none = cl.critical_delay_predicted(sdof, lambda tau: None, DT)
    assert tc_none == pytest.approx(tau_c, rel=5e-3)
    tc_poly = cl.critical_delay_predicted(sdof, make_poly, DT, tau_min=tau_c)
    assert tc_poly > 3 * tc_none
    # between the two: the plain loop grows, the predicted one decays — in simulation too
    tau = 2.0 * tau_c
    plain = cl.simulate(sdof, cl.TransferSystem("delay", tau), None, DT, 2.0, initial_displacement=[1e-3], emulated=False)
    comp = make_poly(tau)
    pred = cl.simulate(sdof, cl.TransferSystem("delay", tau), comp, DT, 2.0, initial_displacement=[1e-3], emulated=False)
    assert not plain.stable and pred.stable
    root = cl.predicted_rightmost(sdof, cl.TransferSystem("delay", tau), comp, DT)
    assert pred.growth().rate == pytest.approx(root.real, rel=0.03)
    # beyond the compensated critical delay the simulation follows the compensated roots
    tau = 1.15 * tc_poly
    comp = make_poly(tau)
    res = cl.simulate(sdof, cl.TransferSystem("delay", tau), comp, DT, 1.5, initial_displacement=[1e-3], emulated=False)
    root = cl.predicted_rightmost(sdof, cl.TransferSystem("delay", tau), comp, DT)
    assert root.real > 0 and not res.stable
    assert res.growth().rate == pytest.approx(root.real, rel=0.05)


def test_afp_adapts_and_matches_its_frozen_prediction(sdof, tau_c):
    tau = 6 * tau_c  # far beyond the uncompensated critical delay
    comp = cl.AdaptiveForwardPredictor(2, 3, rho0=0.0)
    res = cl.simulate(sdof, cl.TransferSystem("delay", tau), comp, DT, 3.0, initial_displacement=[1e-3], emulated=False)
    assert res.stable and comp.events > 50
    assert comp.rho[0] == pytest.approx(tau, rel=0.15)
    root = cl.predicted_rightmost(sdof, cl.TransferSystem("delay", tau), comp, DT)  # frozen at the adapted rho, sigma
    assert res.growth(0.5).rate == pytest.approx(root.real, rel=0.05)


@pytest.fixture(scope="module")
def lag_runs():
    """SDOF with a softer physical spring behind a first-order lag plus one-step delay,
    forced at 5 Hz: stable but out of sync without compensation."""
    sysm = cl.sdof_benchmark(ks=1000.0)
    tr = cl.TransferSystem("lag1", 1e-3, time_constant=5e-3)
    ex = cl.Excitation(5.0, 10.0)
    out = {}
    for name, comp in (("none", None), ("afp", cl.AdaptiveForwardPredictor(2, 3)), ("mcs", cl.MinimalControlSynthesis())):
        out[name] = cl.simulate(sysm, tr, comp, DT, 3.0, ex)
    return out


def test_afp_reduces_synchronisation_error_on_a_lag(lag_runs):
    none, afp = lag_runs["none"], lag_runs["afp"]
    assert none.stable and afp.stable
    assert afp.rms_sync_error() < 0.2 * none.rms_sync_error()
    assert afp.rms_global_error() < 0.2 * none.rms_global_error()
    rho = afp.trace["rho_s"][-1, 0]
    assert 4e-3 < rho < 8e-3  # towards the lag's low-frequency delay tau + T = 6 ms
    assert afp.trace["sigma"][-1, 0] == pytest.approx(1.0, abs=0.1)


def test_mcs_reduces_synchronisation_error_on_a_lag(lag_runs):
    none, mcs = lag_runs["none"], lag_runs["mcs"]
    assert mcs.stable
    assert mcs.rms_sync_error() < 0.7 * none.rms_sync_error()
    assert mcs.trace["Kr"][-1, 0] > 1.0 and mcs.trace["K"][-1, 0] < 0.0  # lead by feeding back -x, amplify r


def test_inverse_model_identification_recovers_a_first_order_lag():
    tr = cl.TransferSystem("lag1", 1.4e-3, time_constant=8e-3)
    m = cl.identify_lag(tr, DT, noise_rms=1e-6, seed=3)
    assert m.time_constant == pytest.approx(8e-3, rel=0.01)
    assert m.delay == pytest.approx(1.4e-3, rel=0.03)
    assert m.gain == pytest.approx(1.0, rel=0.01)


def test_inverse_model_compensation_synchronises(sdof):
    sysm = cl.sdof_benchmark(ks=1000.0)
    tr = cl.TransferSystem("lag1", 1e-3, time_constant=5e-3)
    comp = cl.InverseModelCompensator(cl.identify_lag(tr, DT))
    ex = cl.Excitation(5.0, 10.0)
    none = cl.simulate(sysm, tr, None, DT, 2.0, ex)
    inv = cl.simulate(sysm, tr, comp, DT, 2.0, ex)
    assert inv.rms_sync_error() < 0.01 * none.rms_sync_error()


def test_delay_and_amplification():
    f = 10.0
    t = np.arange(0, 1.0, 1e-4)
    z = np.cos(2 * np.pi * f * t)
    x = 1.01 * np.cos(2 * np.pi * f * (t - 2e-4))
    d, a = cl.delay_and_amplification(t, z, x, f)
    assert d[0] == pytest.approx(2e-4, rel=1e-6) and a[0] == pytest.approx(0.01, rel=1e-6)


def test_loop_needs_a_delay_of_one_step(sdof):
    with pytest.raises(ValueError, match="one time step"):
        cl.simulate(sdof, cl.TransferSystem("delay", 0.5 * DT), None, DT, 0.1)


def test_classical_point_frf_matches_delayed_loop_steady_state(sdof, tau_c):
    tau, f = 0.5 * tau_c, 8.0
    p = cl.classical_point(sdof, cl.TransferSystem("delay", tau), f, DT, 6.0, 1.0)
    assert p["stable"]
    T = st.sdof_system(M, C, K, KS).equation(tau).matrix(2j * np.pi * f)
    H_loop = 1.0 / T[0, 0]  # steady state of the delayed loop
    H_em = complex(*p["emulated_frf_m_per_n"])
    assert abs(complex(*p["frf_m_per_n"]) - H_loop) < 1e-3 * abs(H_loop)
    assert p["frf_error"] == pytest.approx(abs(H_loop - H_em) / abs(H_em), rel=0.02)


def test_cantilever_classical_unstable_at_one_millisecond(tmp_path):
    from hbtest.config import load_sweep

    cfg = load_sweep("sweeps/paper-cantilever.toml")
    sysm = cl.cantilever_benchmark(cfg)
    p = cl.classical_point(sysm, cl.TransferSystem("delay", 1e-3), 18.0, DT, 2.0, cfg.excitation.amplitude)
    assert not p["stable"] and p["growth_rate_per_s"] > 100
    # the neutral root chain of the split beam (interface inertia through the delay): the
    # simulated growth converges to the delay equation's root near 500 Hz as dt shrinks
    fine = cl.classical_point(sysm, cl.TransferSystem("delay", 1e-3), 18.0, 5e-5, 0.5, cfg.excitation.amplitude)
    s0 = fine["growth_rate_per_s"] + 2j * np.pi * fine["dominant_frequency_hz"]
    roots, ok = sysm.stability_system().equation(1e-3).polish(np.array([s0]))  # Newton on det T(s) from the simulated root
    assert ok[0]
    assert fine["growth_rate_per_s"] == pytest.approx(roots[0].real, rel=0.05)
    assert fine["dominant_frequency_hz"] == pytest.approx(abs(roots[0].imag) / (2 * np.pi), rel=0.02)


def test_registries_build_every_kind_by_name():
    tr = cl.make_transfer("lag1", 1e-3, cl.LagParameters(time_constant=4e-3))
    assert tr == cl.TransferSystem("lag1", 1e-3, time_constant=4e-3)
    assert tr.low_frequency_delay == pytest.approx(5e-3)
    assert set(cl.TRANSFERS) == {"delay", "lag1", "lag2"}
    for kind in cl.TRANSFERS:
        assert cl.make_transfer(kind, 2e-3).kind == kind
    classes = {"none": cl.NoCompensation, "poly": cl.PolynomialPredictor, "afp": cl.AdaptiveForwardPredictor,
               "inverse": cl.InverseModelCompensator, "mcs": cl.MinimalControlSynthesis}
    assert set(cl.COMPENSATORS) == set(classes)
    for name, cls in classes.items():
        comp, info = cl.make_compensator(name, cl.TransferSystem("delay", 1e-3), DT)
        assert isinstance(comp, cls) and comp.name == name and info["name"] == name
    _, info = cl.make_compensator("poly", cl.TransferSystem("delay", DT), DT)
    np.testing.assert_allclose(info["weights"], [3, -3, 1], atol=1e-9)  # horizon defaults to the delay
    with pytest.raises(ValueError, match="unknown compensator"):
        cl.make_compensator("smith", cl.TransferSystem("delay", 1e-3), DT)
    with pytest.raises(ValueError, match="samples"):
        cl.make_compensator("poly", cl.TransferSystem("delay", 1e-3), DT, cl.CompensatorOptions(order=3, samples=2))


def test_run_size_is_bounded(sdof):
    assert cl.check_run_size(1e-3, 2.0, 5e-3) == 2000
    with pytest.raises(ValueError, match="steps"):
        cl.check_run_size(1e-9, 10.0)
    with pytest.raises(ValueError, match="delay"):
        cl.check_run_size(1e-3, 1.0, 2.0)
    with pytest.raises(ValueError, match="steps"):
        cl.simulate(sdof, cl.TransferSystem("delay", 1e-3), None, 1e-3, (cl.MAX_STEPS + 10) * 1e-3)


def test_chain_benchmark_matches_three_mass_benchmark():
    chain = dict(masses=[1.0, 0.5, 1.0], springs=[1000.0, 2000.0, 2000.0, 1000.0], dampers=[1.0, 0.5, 0.5, 1.0],
                 left_wall=True, right_wall=True, interface=[0, 2], physical_masses=[1], physical_links=[1, 2])
    a = cl.chain_benchmark(chain, "x2")
    b = cl.three_mass_benchmark(force_on=2)
    for f in (2.0, 7.5, 13.0):
        np.testing.assert_allclose(a.interface_response(f), b.interface_response(f), rtol=1e-10)
    with pytest.raises(KeyError, match="numerical DOFs"):
        cl.chain_benchmark(chain, "x1")


def test_plots_return_figures_without_choosing_a_backend(monkeypatch, sdof, tmp_path):
    import matplotlib
    from matplotlib.figure import Figure

    def refuse(*a, **k):
        raise AssertionError("the library must not choose a matplotlib backend")

    monkeypatch.setattr(matplotlib, "use", refuse)
    res = cl.simulate(sdof, cl.TransferSystem("delay", 1e-3), None, DT, 0.2, initial_displacement=[1e-3])
    for fig in (cl.subspace_figure(res), cl.run_figure(res, "title")):
        assert isinstance(fig, Figure)
        fig.savefig(tmp_path / "f.png")
        assert (tmp_path / "f.png").stat().st_size > 1000


# ---------------------------------------------------------------------------------------
# CLI


def test_cli_sdof_json(capsys, tau_c):
    rc = main(["classical", "sdof", "--m", "1", "--k", "4000", "--c", "6.3", "--ks", "4000", "--delay", str(2 * tau_c), "--duration", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("stable", "growth_rate_per_s", "rms_sync_error", "rms_global_error"):
        assert key in out
    assert out["stable"] is False
    assert out["growth_rate_per_s"] == pytest.approx(out["prediction"]["rightmost_root_real_per_s"], rel=0.02)


def test_cli_sdof_compensated_and_forced(capsys, tau_c):
    rc = main(["classical", "sdof", "--delay", str(2 * tau_c), "--compensator", "poly", "--predictor-order", "2", "--predictor-samples", "3",
               "--excitation-hz", "5", "--amplitude", "2", "--duration", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stable"] is True and out["rms_global_error"] < 1e-5


@pytest.mark.parametrize("argv, needle", [
    (["--delay", "1e-4"], "--delay"),
    (["--delay", "1e-3", "--dt", "0"], "--dt"),
    (["--delay", "1e-3", "--m", "-1"], "--m"),
    (["--delay", "1e-3", "--compensator", "poly", "--predictor-order", "3", "--predictor-samples", "2"], "--predictor-samples"),
    (["--delay", "1e-3", "--excitation-hz", "5000"], "--excitation-hz"),
])
def test_cli_user_errors(capsys, argv, needle):
    rc = main(["classical", "sdof", *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_cli_chain_unknown_force_dof(capsys):
    assert main(["classical", "chain", "sweeps/three-mass-chain.toml", "--delay", "5e-3", "--force-dof", "x1"]) == 2
    err = capsys.readouterr().err
    assert "--force-dof" in err and "x0, x2" in err and err.count("\n") == 1


def test_cli_chain(capsys):
    rc = main(["classical", "chain", "sweeps/three-mass-chain.toml", "--delay", "5e-3", "--duration", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stable"] is False
    assert out["growth_rate_per_s"] == pytest.approx(out["prediction"]["rightmost_root_real_per_s"], rel=0.03)


def test_cli_compare_bad_file(capsys):
    assert main(["compare", "no-such-sweep.toml", "--delay", "1e-3"]) == 2
    assert "no-such-sweep.toml" in capsys.readouterr().err


def _old_store(path: Path) -> Path:
    """A small hbtest run store (what a previous sweep left) at ``path``."""
    RunStore.create(path, frequencies_hz=[17.0, 18.0], harmonics=[1], actuators=["force", "moment"], max_iterations=2,
                    attrs={"sweep_path": "old.toml"})
    return path


def _tree_hash(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_compare_cantilever(capsys, tmp_path):
    # reduced grid (about 4 s with the virtual twin); mark slow if the sweep gets slower
    png = tmp_path / "compare.png"
    store = _old_store(tmp_path / "run.zarr")  # replaced: --overwrite
    rc = main(["compare", "sweeps/paper-cantilever.toml", "--delay", "1e-3", "--set", "sweep.points=3", "--duration", "2",
               "--plot", str(png), "--store", str(store), "--overwrite", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["n_points"] == 3
    assert out["summary"]["classical_unstable"] == 3
    assert out["summary"]["iterative_converged"] == 3
    assert png.stat().st_size > 1000
    ds = open_run(store)  # the sweep's store replaced the old one
    assert ds["frequency"].size == 3 and ds.attrs["status"] == "completed"
    # the iterative FRFs are the store's (hbtest.analysis.frf): small error against the twin's exact reference
    from hbtest.analysis.frf import relative_error

    err = relative_error(ds).sel(dof="u").values
    assert [p["iterative"]["frf_error"] for p in out["points"]] == pytest.approx(list(err), rel=1e-12)
    assert out["summary"]["iterative_max_frf_error"] < 0.05


@pytest.fixture
def no_compare_run(monkeypatch):
    """Fail if the comparison starts: every check must come first."""

    def refuse(*a, **k):
        raise AssertionError("compare started before its checks")

    monkeypatch.setattr(cl, "compare_sweep", refuse)


def _one_line_error(capsys, argv) -> str:
    t0 = time.perf_counter()
    rc = main(argv)
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("hbtest: error: ") and "Traceback" not in err
    # a guard against a hang, not a speed figure: ~0.2 s on an idle machine, 2.05 s once on 2
    # cores loaded by two suites (the comparison itself is refused by ``no_compare_run``)
    assert elapsed < 10.0
    return err


def test_cli_compare_refuses_existing_store_without_overwrite(capsys, tmp_path, no_compare_run):
    store = _old_store(tmp_path / "old.zarr")
    before = _tree_hash(store)
    assert before
    err = _one_line_error(capsys, ["compare", "sweeps/paper-cantilever.toml", "--delay", "1e-3", "--store", str(store)])
    assert str(store) in err and "--overwrite" in err and "--store" in err
    assert _tree_hash(store) == before


@pytest.mark.parametrize("flag, value", [
    ("--store", "{file}/sub.zarr"),    # an existing file where a directory is needed
    ("--store", "/proc/hbtest-test.zarr"),
    ("--store", ""),
    ("--store", "{file}"),            # exists, not a store, even with --overwrite
    ("--plot", "{file}/compare.png"),
    ("--plot", "/proc/hbtest-test.png"),
    ("--plot", ""),
    ("--plot", "{dir}"),              # a directory, not a file name
    ("--plot", "{dir}/missing/compare.png"),
])
def test_cli_compare_checks_output_paths_first(capsys, tmp_path, no_compare_run, flag, value):
    f = tmp_path / "a-file"
    f.write_text("x")
    value = value.format(file=f, dir=tmp_path)
    err = _one_line_error(capsys, ["compare", "sweeps/paper-cantilever.toml", "--delay", "1e-3", f"{flag}={value}", "--overwrite"])
    assert flag in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and f.read_text() == "x"


@pytest.mark.parametrize("argv, flag, bound", [
    (["--delay", "1e9"], "--delay", "1 s"),
    (["--delay", "0.5", "--duration", "0.2"], "--delay", "--duration"),
    (["--delay", "1e-3", "--duration", "1e9"], "--duration", "1,000,000"),
    (["--delay", "1e-3", "--dt", "1e-12"], "--dt", "1,000,000"),
    (["--delay", "1e-3", "--dt", "1"], "--dt", "0.01"),
])
@pytest.mark.parametrize("command", [["compare", "sweeps/paper-cantilever.toml"], ["classical", "sdof"]])
def test_cli_refuses_absurd_sizes(capsys, no_compare_run, command, argv, flag, bound):
    err = _one_line_error(capsys, [*command, *argv])
    assert flag in err and bound in err
