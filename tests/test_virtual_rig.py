"""The virtual twin: physics against its own exact references, sensors through the
real reconstruction path, reproducibility, limits and configuration errors.

Error budget of the interface reconstruction (reference rig, segment method, 30 periods, the
hybrid test's own interface motion, all sensor imperfections on):
- u within 2e-4 and theta within 2e-3 (relative): laser white noise and 16-bit quantisation;
- without mains: T, M within 5 standard deviations of the fit's own variance estimate (and
  T within 1 %, M within 0.2 %);
- with 20 microstrain mains (up to ~8x the gauge signal at 16 Hz): within the docs/method.md §3 mains
  averaging bound propagated through the gauge rule, plus 5 standard deviations of white noise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import scipy.signal

from hbtest.method import harmonics
from hbtest.config import load_rig, load_sweep
from hbtest.errors import ConfigError, InstrumentError, LimitExceeded, UserError
from hbtest.rig import Rig, open_rig
from hbtest.rig.virtual import VirtualRig, VirtualSpec
from hbtest.method.sensors import measure_interface
from hbtest.method.substructure import join

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
HARSH = ROOT / "instruments" / "virtual-cantilever-harsh-mains.toml"  # independent random mains phases per gauge
SWEEP = ROOT / "sweeps" / "paper-cantilever.toml"


@pytest.fixture(scope="module")
def cfg():
    return load_rig(RIG)


@pytest.fixture(scope="module")
def harsh():
    return load_rig(HARSH)


@pytest.fixture(scope="module")
def paper():
    sw = load_sweep(SWEEP)
    ns = sw.numerical.substructure()
    return ns, sw.excitation.force_vector(ns)


def hybrid_voltage(rig: VirtualRig, ns, force, f: float) -> np.ndarray:
    """The demand (2, 1) that makes the twin's interface move as the emulated structure's
    (what a converged hybrid test applies), from the twin's exact responses."""
    U = rig.emulated_interface_response(ns, force, f, [1])[:, 0]
    G = np.stack([rig.steady_state(f, np.eye(2)[:, j : j + 1], [1]).displacement[:, 0] for j in range(2)], axis=1)
    return np.linalg.solve(G, U)[:, None]


def fit(acq, orders):
    return {c: harmonics.fit(acq.t, acq.data[c], acq.frequency_hz, orders).coefficients for c in acq.data}


# ---------------------------------------------------------------------------------------
# the reference file and the protocol


def test_reference_rig_parses_and_describes_itself(cfg):
    assert isinstance(cfg.virtual, VirtualSpec)
    assert cfg.sample_rate_hz == 5000.0 and cfg.actuators == ("vertical", "rotational")
    assert cfg.sensors.gauge_positions == pytest.approx((0.005, 0.020))
    assert cfg.virtual.shakers[1].position == pytest.approx(0.05)
    # same section, material and damping as the numerical root of the paper sweep
    nb = load_sweep(SWEEP).numerical.beam
    for k in ("width", "thickness", "youngs_modulus", "density", "zeta_mass", "zeta_stiffness"):
        assert getattr(cfg.physical, k) == pytest.approx(getattr(nb, k))
    assert cfg.physical.length == pytest.approx(0.36)
    rig = VirtualRig(cfg)
    assert isinstance(rig, Rig)
    d = rig.describe()
    assert d.kind == "virtual" and d.identity == cfg.identity and d.sample_rate_hz == 5000.0
    assert d.actuators == ("vertical", "rotational") and d.voltage_limit_v == cfg.voltage_limit_v
    assert d.sensors is cfg.sensors and d.details["seed"] == cfg.virtual.seed
    # gauges sit on FE nodes, 1 mm elements near the clamp
    xs = rig.beam.x_nodes
    for g in cfg.sensors.gauge_positions:
        assert np.min(np.abs(xs - g)) < 1e-12
    assert np.max(np.diff(xs[xs <= 0.03])) <= 1e-3 + 1e-12


def test_no_rig_resonance_in_the_test_band(cfg):
    rig = VirtualRig(cfg)
    for lam in (rig.rig_modes(), rig.modes()):
        f = np.abs(lam) / (2 * np.pi)
        assert not np.any((f > 15.0) & (f < 20.0)), f
    # the clamp modes of the rig alone lie below the band, the PS's first bending modes at
    # their clamped values (6.4, 40.2 Hz) shifted by the compliant support
    assert np.abs(rig.rig_modes()[1]) / (2 * np.pi) < 12.0
    assert np.any(np.abs(np.abs(rig.modes()) / (2 * np.pi) - 40.9) < 1.0)


def test_acquisition_shape_time_base_and_clock(cfg):
    rig = VirtualRig(cfg)
    with pytest.raises(RuntimeError):
        rig.acquire(1)
    rig.set_demand(17.3, np.array([[0.2], [0.1]]), [1], ramp_periods=1.5)
    t_ramp = rig.elapsed_s
    assert t_ramp == pytest.approx(round(1.5 / 17.3 * 5000) / 5000)
    acq = rig.acquire(30)
    n = round(30 * 5000 / 17.3)
    assert acq.t.size == n and all(v.shape == (n,) for v in acq.data.values())
    assert set(acq.data) == {"l1", "l2", "g1", "g2"}
    assert np.allclose(np.diff(acq.t), 1 / 5000) and 0 <= acq.t[0] < 1 / 17.3
    assert acq.elapsed_s == pytest.approx(t_ramp + n / 5000) == rig.elapsed_s
    assert acq.n_periods == 30 and acq.frequency_hz == 17.3 and acq.sample_rate_hz == 5000.0
    rig.wait(2.5)
    assert rig.elapsed_s == pytest.approx(acq.elapsed_s + round(2.5 * 5000 / 17.3) / 5000)


def test_safe_state_close_and_context_manager(cfg):
    with VirtualRig(cfg) as rig:
        rig.set_demand(18.0, np.array([[0.5], [0.2]]), [1])
        rig.safe_state()
        assert np.all(rig.demand.voltage == 0)
        rig.set_demand(18.0, np.array([[0.5], [0.2]]), [1])
    with pytest.raises(InstrumentError, match="closed"):
        rig.acquire(1)
    assert np.all(rig.demand.voltage == 0)


def test_demand_is_the_demand_in_force(cfg):
    rig = VirtualRig(cfg)
    d = rig.demand
    assert d.frequency_hz is None and np.all(d.voltage == 0)
    V = np.array([[0.2, 0.05], [0.1j, 0.0]])
    rig.set_demand(17.0, V, [1, 3])
    d = rig.demand
    assert d.frequency_hz == 17.0 and np.array_equal(d.voltage, V) and d.orders.tolist() == [1, 3]
    d.voltage[0, 0] = 4.0  # a copy: the rig's demand is not changed behind its back
    assert rig.demand.voltage[0, 0] == 0.2


def test_open_rig_opens_the_virtual_kind(cfg):
    rig = open_rig(cfg, seed=11)
    assert isinstance(rig, VirtualRig) and rig.seed == 11 and rig.config is cfg
    assert cfg.kind == "virtual" and cfg.spec is cfg.virtual


def test_limit_exceeded_names_the_rig(cfg):
    rig = VirtualRig(cfg)
    rig.set_demand(18.0, np.array([[1.0], [0.5]]), [1])
    t = rig.elapsed_s
    with pytest.raises(LimitExceeded) as e:
        rig.set_demand(18.0, np.array([[6.0], [0.0]]), [1])
    assert isinstance(e.value, UserError) and cfg.identity in str(e.value) and "5 V" in str(e.value)
    with pytest.raises(LimitExceeded):  # harmonics add up: |V1| + |V3| = 5.2 V
        rig.set_demand(18.0, np.array([[3.0, 2.2j], [0.0, 0.0]]), [1, 3])
    assert rig.elapsed_s == t and rig.demand.voltage[0, 0] == 1.0  # nothing happened



def test_an_instruments_output_is_the_demand_without_the_hosts_limit(cfg):
    """``apply_input`` (a served generator's output, hbtest.serve.scpi.plant) is ``set_demand``
    without the host's limit check: within the limit the records are bit-identical, and a
    waveform whose harmonics sum past the limit is played, not refused."""
    a, b = VirtualRig(cfg, seed=3), VirtualRig(cfg, seed=3)
    V = np.array([[1.0, 0.2j], [0.5, 0.0]])
    a.set_demand(18.0, V, [1, 3], ramp_periods=0.0)
    b.apply_input(18.0, V, [1, 3])
    ra, rb = a.acquire(3), b.acquire(3)
    assert all(np.array_equal(ra.data[c], rb.data[c]) for c in ra.data)
    over = np.array([[3.0, 2.2j], [0.0, 0.0]])  # |V1| + |V3| = 5.2 V > 5 V
    with pytest.raises(LimitExceeded):
        a.set_demand(18.0, over, [1, 3])
    b.apply_input(18.0, over, [1, 3])
    assert np.array_equal(b.demand.voltage, over)


# ---------------------------------------------------------------------------------------
# physics


def test_reduced_model_matches_full_model(cfg):
    rig = VirtualRig(cfg)
    # the static correction misses the truncated modes' mass-like (s^2) part: the error grows
    # as f^2, 1e-5 in the test band, ~4e-4 at 100 Hz
    assert rig.reduction_error([16.0, 17.0, 18.0, 18.5, 19.0]) < 2e-5
    assert rig.reduction_error(np.linspace(0.5, 60.0, 9)) < 2e-4
    assert rig.reduction_error([80.0, 100.0]) < 1e-3


@pytest.mark.parametrize(
    "f, V, orders",
    [
        (17.3, [[0.8 + 0.3j], [0.4 - 0.1j]], [1]),  # 289.0... samples per period: not an integer
        (18.52, [[0.3, 0.5 - 0.2j, 0.1j], [-0.2, 0.3, 0.05]], [0, 1, 2]),  # DC and a harmonic
    ],
)
def test_simulated_steady_state_matches_frequency_response(cfg, f, V, orders):
    rig = VirtualRig(cfg, noise=False)
    rig.set_demand(16.0, np.array([[0.5], [0.0]]), [1])
    V = np.array(V, complex)
    rig.set_demand(f, V, orders, ramp_periods=3)  # frequency ramp: phase-continuous generator
    rig.wait(f * 10)  # slowest mode decays as exp(-2.6 t)
    acq = rig.acquire(30)
    got = fit(acq, orders)
    ss = rig.steady_state(f, V, orders)
    for c in acq.data:
        err = np.abs(got[c] - ss.channels[c]) / np.abs(ss.channels[c]).max()
        assert err.max() < 1e-3, (c, err)  # the bar; actually ~1e-5 (modal truncation)
        assert err.max() < 1e-4


def test_nonlinear_amplifier_generates_harmonics(cfg):
    nl = load_rig(RIG, [])
    sh = tuple(dataclasses.replace(s, quadratic=0.05, cubic=-0.08) for s in nl.spec.shakers)
    nl = dataclasses.replace(nl, spec=dataclasses.replace(nl.spec, shakers=sh))
    rig = VirtualRig(nl, noise=False)
    f, V = 17.9, np.array([[1.5], [0.8j]])
    rig.set_demand(f, V, [1])
    rig.wait(f * 10)
    acq = rig.acquire(20)
    orders = [0, 1, 2, 3]
    got = fit(acq, orders)
    ss = rig.steady_state(f, V, [1], output_orders=orders)
    assert ss.exact
    for c in acq.data:
        assert np.abs(got[c] - ss.channels[c]).max() < 1e-4 * np.abs(ss.channels[c]).max()
        assert np.abs(ss.channels[c][3]) > 1e-3 * np.abs(ss.channels[c][1])  # real harmonic content


def test_truth_is_consistent(cfg, paper):
    ns, force = paper
    rig = VirtualRig(cfg, noise=False)
    f = 18.3
    s = 2j * np.pi * f
    ss = rig.steady_state(f, np.array([[0.7 - 0.2j], [0.3j]]), [1])
    # T, M are the generalised forces on the PS beam at x = 0: D_P [u, theta] = [T, M]
    assert np.allclose(rig.ps_dynamic_stiffness(s) @ ss.displacement[:, 0], ss.force[:, 0], rtol=1e-7, atol=0)
    # the emulated structure is NS joined to the twin's beam: same interface response
    U = rig.emulated_interface_response(ns, force, f, [1, 2])
    assert np.all(U[:, 1] == 0)
    full = join(ns, rig.ps_substructure)
    q = np.linalg.solve(full.dynamic_stiffness(s), np.concatenate([force, np.zeros(full.n_dof - ns.structure.n_dof)]))
    i = [full.dof_names.index(f"I.{n}") for n in ns.interface]
    assert np.allclose(U[:, 0], q[i], rtol=1e-9)
    # uniform cantilever: mode 2 of the 530 mm ruler at 18.5 Hz
    assert np.any(np.abs(full.modes().frequencies_hz - 18.53) < 0.05)


def test_transients_decay_at_the_modal_rates(cfg):
    """A demand step (to zero, no ramp) leaves a free decay: a sum of the modes of the
    model, each decaying at its eigenvalue's rate."""
    rig = VirtualRig(cfg, noise=False)
    lam = rig.modes()
    # (a) envelope of the lightly damped second beam mode, driven at resonance then released
    mode = lam[np.argmin(np.abs(np.abs(lam) / (2 * np.pi) - 40.9))]
    fd = mode.imag / (2 * np.pi)
    rig.set_demand(fd, np.array([[0.5], [0.2]]), [1])
    rig.wait(fd * 8)
    rig.set_demand(fd, np.zeros((2, 1)), [1], ramp_periods=0)
    acq = rig.acquire(int(fd * 2.4))
    t = acq.t - acq.t[0]
    # zero-phase band-pass around the mode (an LTI filter keeps each mode's decay rate): the
    # slower, heavily damped rig mode at ~3 Hz is excited by the step too. Envelope = the
    # peaks of each cycle (a Hilbert envelope would be spoilt by the record's edges over the
    # four decades of decay).
    sos = scipy.signal.butter(2, [0.6 * fd, 1.6 * fd], btype="bandpass", fs=rig.fs, output="sos")
    y = scipy.signal.sosfiltfilt(sos, acq.data["g1"])
    sel = (t > 0.3) & (t < 1.5)
    pk, _ = scipy.signal.find_peaks(np.abs(y) * sel)
    slope = np.polyfit(t[pk], np.log(np.abs(y[pk])), 1)[0]
    assert pk.size > 80
    assert -slope == pytest.approx(-mode.real, rel=5e-3)
    up = np.flatnonzero(np.diff(np.sign(y[sel])) > 0)
    tz = t[sel][up]
    assert (up.size - 1) / (tz[-1] - tz[0]) == pytest.approx(fd, rel=1e-3)
    # (b) all dominant poles of a free decay (matrix pencil) are eigenvalues of the model,
    # the heavily damped rig/beam mode included
    rig.set_demand(3.0, np.array([[0.5], [0.2]]), [1])
    rig.wait(20)
    rig.set_demand(3.0, np.zeros((2, 1)), [1], ramp_periods=0)
    acq = rig.acquire(6)
    t = acq.t - acq.t[0]
    for c in ("l1", "g1"):
        y = acq.data[c][t > 0.3][::10]
        poles, amp = matrix_pencil(y, 10 / rig.fs, 12)
        big = (np.abs(amp) > 1e-3 * np.abs(amp).max()) & (poles.imag > 0)
        assert big.sum() >= 3
        for p in poles[big]:
            assert np.min(np.abs(lam - p)) < 1e-6 * abs(p), p
        assert np.min(np.abs(poles - lam[0])) < 1e-6 * abs(lam[0])  # the slowest, ~2.9 Hz


def matrix_pencil(y, dt, order):
    n = y.size
    L = n // 2
    H = np.array([y[i : i + L + 1] for i in range(n - L)])
    _, _, vh = np.linalg.svd(H, full_matrices=False)
    V = vh[:order].conj().T
    z = np.linalg.eigvals(np.linalg.pinv(V[:-1]) @ V[1:])
    amp = np.linalg.lstsq(np.vander(z, n, increasing=True).T, y.astype(complex), rcond=None)[0]
    return np.log(z) / dt, amp


def test_closed_form_equals_sample_recurrence(cfg):
    """Constant-demand segments are evaluated in closed form; the per-sample recurrence
    (the friction path) must give the same record."""
    a, b = VirtualRig(cfg, noise=False), VirtualRig(cfg, noise=False, per_sample=True)
    out = []
    for rig in (a, b):
        rig.set_demand(17.0, np.array([[0.6], [0.2j]]), [1], ramp_periods=2)
        rig.wait(3)
        rig.set_demand(17.0, np.array([[0.5, 0.1], [0.3j, 0.0]]), [1, 2], ramp_periods=1)  # same f: closed-form ramp
        r1 = rig.acquire(4)
        rig.set_demand(17.4, np.array([[0.5], [0.1]]), [1], ramp_periods=1)  # frequency ramp
        r2 = rig.acquire(3)
        out.append(np.concatenate([np.stack(list(r.data.values())) for r in (r1, r2)], axis=1))
    assert np.abs(out[0] - out[1]).max() < 1e-9 * np.abs(out[0]).max()


def test_friction_path_makes_odd_harmonics(cfg):
    fr = load_rig(RIG, ["virtual.friction.slider_coulomb_n=0.3"])
    rig = VirtualRig(fr, noise=False)
    f, V = 18.0, np.array([[0.4], [0.1]])
    rig.set_demand(f, V, [1])
    rig.wait(f * 3)
    acq = rig.acquire(10)
    got = fit(acq, [1, 3])
    ss = rig.steady_state(f, V, [1])
    assert not ss.exact
    assert abs(got["l1"][1]) > 1e-3 * abs(got["l1"][0])  # Coulomb friction: odd harmonics
    assert abs(got["l1"][0] - ss.channels["l1"][0]) > 1e-3 * abs(ss.channels["l1"][0])


# ---------------------------------------------------------------------------------------
# sensors and reconstruction


def reconstruction_errors(rig, ns, force, f, method="segment", periods=30):
    V = hybrid_voltage(rig, ns, force, f)
    rig.set_demand(f, V, [1])
    rig.wait(f * 8)
    acq = rig.acquire(periods)
    ss = rig.steady_state(f, V, [1])
    m = measure_interface(acq, rig.sensors, [1], method)
    return m, ss


@pytest.mark.parametrize("f", [16.0, 18.5])
def test_interface_reconstruction_budget_without_mains(paper, f):
    ns, force = paper
    rig = VirtualRig(load_rig(HARSH, ["virtual.mains.amplitude_microstrain=0"]))  # its white-noise levels
    m, ss = reconstruction_errors(rig, ns, force, f)
    rel_d = np.abs(m.displacement[:, 0] - ss.displacement[:, 0]) / np.abs(ss.displacement[:, 0])
    assert rel_d[0] < 2e-4 and rel_d[1] < 2e-3
    dF = np.abs(m.force[:, 0] - ss.force[:, 0])
    assert np.all(dF < 5 * np.sqrt(m.force_variance[:, 0]))
    rel_f = dF / np.abs(ss.force[:, 0])
    assert rel_f[0] < 1e-2 and rel_f[1] < 2e-3


@pytest.mark.parametrize("f", [16.0, 17.3, 18.5])
def test_interface_reconstruction_budget_with_mains(harsh, paper, f):
    ns, force = paper
    rig = VirtualRig(harsh)
    m, ss = reconstruction_errors(rig, ns, force, f)
    nz = rig.spec.noise
    # docs/method.md §3 bound on each gauge coefficient, summed over the mains multiples
    b = sum(np.hypot(*harmonics.mains_error_bound(nz.mains_amplitude * r, h * nz.mains_hz, f, 1, 30)) for h, r in enumerate(nz.mains_harmonics, 1))
    d1, d2 = rig.sensors.gauge_positions
    c = rig.sensors.gauge_calibration
    bound = np.array([c * 2 * b / (d2 - d1), c * b * (1 + 2 * d1 / (d2 - d1))])
    white = 5 * np.array([np.sqrt(0.2e-6**2 / 4000) * c * 2 / (d2 - d1), 0.0])  # generous white-noise share
    dF = np.abs(m.force[:, 0] - ss.force[:, 0])
    assert np.all(dF < bound + white + 1e-3 * np.abs(ss.force[:, 0])), (dF, bound)
    rel_d = np.abs(m.displacement[:, 0] - ss.displacement[:, 0]) / np.abs(ss.displacement[:, 0])
    assert rel_d[0] < 2e-4 and rel_d[1] < 2e-3  # lasers see no mains


def test_lag_correction_removes_the_filter_lag(cfg, paper):
    ns, force = paper
    rig = VirtualRig(cfg, noise=False)
    m, ss = reconstruction_errors(rig, ns, force, 18.2, periods=5)
    no_filter = tuple(dataclasses.replace(ch, lowpass_hz=0.0) for ch in rig.sensors.channels)
    blind = dataclasses.replace(rig.sensors, channels=no_filter)  # the same record, lag ignored
    rig.set_demand(18.2, hybrid_voltage(rig, ns, force, 18.2), [1], ramp_periods=0)
    acq = rig.acquire(5)
    with_lag = measure_interface(acq, rig.sensors, [1], "segment")
    without = measure_interface(acq, blind, [1], "segment")
    exact = ss.force[:, 0]
    e_with = np.abs(with_lag.force[:, 0] - exact) / np.abs(exact)
    e_without = np.abs(without.force[:, 0] - exact) / np.abs(exact)
    assert np.all(e_with < 1e-3)
    assert np.all(e_without > 0.03)  # 0.07 rad of 3rd-order Butterworth lag at 18 Hz
    lag = -np.angle(rig.sensors.channel("g1").response(18.2))
    assert 0.05 < lag < 0.08


def test_same_seed_same_signals_other_seed_other_noise(cfg):
    def record(seed):
        rig = VirtualRig(cfg, seed=seed)
        rig.set_demand(17.0, np.array([[0.4], [0.2]]), [1])
        return rig.acquire(3)

    a, b, c = record(None), record(None), record(7)
    for ch in a.data:
        assert np.array_equal(a.data[ch], b.data[ch])
        d = a.data[ch] - c.data[ch]
        assert np.std(d) > 0.5 * 2 * 10 / 2**16  # differs by more than quantisation
    # the deterministic part is the same: noise-free signals agree
    assert np.abs(np.mean(a.data["l1"] - c.data["l1"])) < 0.01 * np.std(a.data["l1"])
    assert VirtualRig(cfg).seed == cfg.virtual.seed and VirtualRig(cfg, seed=7).seed == 7


def test_noise_levels_match_the_file(harsh):
    cfg = harsh
    rig = VirtualRig(load_rig(HARSH, ["virtual.mains.amplitude_microstrain=0"]))
    quiet = VirtualRig(cfg, noise=False)
    for r in (rig, quiet):
        r.set_demand(18.0, np.array([[0.3], [0.1]]), [1])
    a, q = rig.acquire(20), quiet.acquire(20)
    nz = rig.spec.noise
    for ch, sigma in (("l1", nz.laser_rms), ("g1", nz.gauge_rms)):
        scale = rig.sensors.channel(ch).scale
        resid = (a.data[ch] - q.data[ch]) * scale
        assert np.std(resid) == pytest.approx(np.hypot(sigma, scale * 20 / 2**16 / np.sqrt(12)), rel=0.05)
    # mains: 50 Hz line on the gauges only, amplitude as configured (filter gain ~1)
    loud = VirtualRig(cfg)
    loud.set_demand(18.0, np.zeros((2, 1)), [1], ramp_periods=0)
    acq = loud.acquire(36)  # 2 s: 100 mains periods
    for ch in ("g1", "g2"):
        x = acq.data[ch] * rig.sensors.channel(ch).scale
        amp = np.abs(np.fft.rfft(x)) * 2 / x.size
        k50 = int(round(50 * x.size / 5000))
        assert amp[k50] == pytest.approx(loud.spec.noise.mains_amplitude, rel=0.02)
    assert np.std(acq.data["l1"]) * 5e-4 < 5 * nz.laser_rms  # lasers: no mains


# ---------------------------------------------------------------------------------------
# configuration errors


BAD = [
    ("virtual.clamp.mass_kg=-1", "virtual.clamp.mass_kg", "positive"),
    ("virtual.colour=1", "virtual.colour", "unknown key"),
    ("virtual.clamp=3", "virtual.clamp", "table"),
    ("virtual.adc.bits=4", "virtual.adc.bits", "0 (ideal) or 8..32"),
    ("virtual.actuation_delay_ms=-0.5", "virtual.actuation_delay_ms", "negative"),
    ("virtual.seed=-3", "virtual.seed", ">= 0"),
    ("virtual.noise.laser_rms_um='big'", "virtual.noise.laser_rms_um", "number"),
    ("virtual.modal_cutoff_hz=10", "virtual.modal_cutoff_hz", ">= 50"),
    ("virtual.mesh_root_length_mm=500", "virtual.mesh_root_length_mm", "exceeds"),
    ("virtual.friction.slider_coulomb_n=50", "virtual.friction.slider_velocity_mm_per_s", "chatter"),
    ("virtual.mains.harmonics=[" + ", ".join(["1"] * 50) + "]", "virtual.mains.harmonics", "Nyquist"),
    ("virtual.mains.frequency_hz=0", "virtual.mains.frequency_hz", "positive"),
    ("sensors.gauge_positions_mm=[5, 400]", "sensors.gauge_positions_mm", "beyond"),
]


@pytest.mark.parametrize("override,key,problem", BAD)
def test_bad_virtual_values_name_the_key(override, key, problem):
    with pytest.raises(ConfigError) as e:
        load_rig(RIG, [override])
    assert e.value.key == key, str(e.value)
    assert problem in e.value.problem
    assert str(RIG) in str(e.value)


EDITS = [
    (("position_mm = 50.0", "position_mm = 0.0"), "virtual.shakers[1].position_mm", "lever arm"),
    (("coil_resistance_ohm = 2.0", "coil_resistance_ohm = -2.0"), "virtual.shakers[0].coil_resistance_ohm", "positive"),
    (('actuator = "rotational"', 'actuator = "torsion"'), "virtual.shakers[1].actuator", "order of [rig].actuators"),
    (("stinger_damping_n_s_per_m = 4.0", "stinger_damping_n_s_per_m = 4.0\ncolour = 1"), "virtual.shakers[1].colour", "unknown key"),
    (("[virtual.clamp]", "[virtual.klamp]"), "virtual.clamp", "missing"),
]


@pytest.mark.parametrize("edit,key,problem", EDITS)
def test_bad_shaker_tables_name_the_key(tmp_path, edit, key, problem):
    text = RIG.read_text()
    assert edit[0] in text
    p = tmp_path / "rig.toml"
    p.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.key == key, str(e.value)
    assert problem in e.value.problem


def test_shaker_count_must_match_actuators(tmp_path):
    text = RIG.read_text()
    i = text.index("[[virtual.shakers]]", text.index("[[virtual.shakers]]") + 1)
    j = text.index("[virtual.noise]")
    p = tmp_path / "rig.toml"
    p.write_text(text[:i] + text[j:])
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.key == "virtual.shakers" and "one [[virtual.shakers]] table per actuator" in e.value.problem
