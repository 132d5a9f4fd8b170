"""Nonlinear physical substructure on the twin: ``[[virtual.nonlinear]]`` elements
parsed by the same parser as ``[[numerical.nonlinear]]``, simulated in the time domain by the
twin (checked against exact answers), the exact harmonic-balance reference of the joined
nonlinear structure (checked against long time integration of the same joined model, an
independent method), and the contact-tip sweep end to end on the twin."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from scipy.integrate import solve_ivp

from hbtest.analysis import frf
from hbtest.method import harmonics
from hbtest.config import load_rig, load_sweep
from hbtest.errors import ConfigError
from hbtest.numerical import CubicSpring, aft_grid, create_element, harmonic_force, packed_force
from hbtest.rig.virtual import SweepReference, VirtualRig, joined_force_vector, sweep_reference
from hbtest.rig.virtual.reference import steady_state
from hbtest.sweep.runner import run

ROOT = Path(__file__).resolve().parents[1]
CONTACT_RIG = ROOT / "instruments" / "virtual-cantilever-contact.toml"
LINEAR_RIG = ROOT / "instruments" / "virtual-cantilever.toml"
CONTACT_SWEEP = ROOT / "sweeps" / "contact-tip.toml"
CUBIC_SWEEP = ROOT / "sweeps" / "cubic-interface.toml"
PAPER_SWEEP = ROOT / "sweeps" / "paper-cantilever.toml"
ELEMENTS = '''
[[virtual.nonlinear]]
kind = "contact"
position_mm = 360.0
dof = "u"
gap_mm = 1.0
stiffness_n_per_m = 100.0
side = "positive"
'''


def _rig_text(elements: str, extra: str = "") -> str:
    """The linear reference rig file with ``elements`` (and ``extra`` keys of [virtual])."""
    text = LINEAR_RIG.read_text(encoding="utf-8")
    return text.replace("[virtual.clamp]", extra + elements + "\n[virtual.clamp]", 1)


def _rig(text: str, **kw) -> VirtualRig:
    return VirtualRig(load_rig(LINEAR_RIG, text=text), **kw)


# -- the rig file ---------------------------------------------------------------------------


def test_contact_rig_file_declares_the_tip_stop():
    cfg = load_rig(CONTACT_RIG)
    (e,) = cfg.spec.nonlinear
    assert (e.kind, e.dof, e.position, e.to_position) == ("contact", "u", pytest.approx(0.36), None)
    assert dict(e.params) == {"gap": pytest.approx(1e-3), "stiffness": 100.0, "side": 1.0}
    rig = VirtualRig(cfg, noise=False)
    assert rig.beam.node_at(0.36) == rig.beam.x_nodes.size - 1  # the tip node


def test_one_parser_for_the_sweep_and_the_rig_element_tables():
    """The same table text gives the same element spec in a sweep file and in a rig file."""
    table = 'kind = "cubic_spring"\nposition_mm = 170.0\ndof = "u"\nk3_n_per_m3 = 3.0e7\n'
    sweep_text = PAPER_SWEEP.read_text(encoding="utf-8").replace("[excitation]", "[[numerical.nonlinear]]\n" + table + "\n[excitation]", 1)
    (ns_el,) = load_sweep(PAPER_SWEEP, text=sweep_text).numerical.nonlinear
    (ps_el,) = load_rig(LINEAR_RIG, text=_rig_text("[[virtual.nonlinear]]\n" + table)).spec.nonlinear
    assert ns_el == ps_el


@pytest.mark.parametrize(
    "table, key, words",
    [
        ('kind = "contact"\nposition_mm = 400.0\ndof = "u"\ngap_mm = 1.0\nstiffness_n_per_m = 10.0', "virtual.nonlinear[0].position_mm", "outside the physical beam"),
        ('kind = "cubic_spring"\nposition_mm = 100.0\ndof = "u"\nk3_nm_per_rad3 = 1.0', "virtual.nonlinear[0].k3_nm_per_rad3", "theta element"),
        ('kind = "spring"\nposition_mm = 100.0\ndof = "u"', "virtual.nonlinear[0].kind", "must be one of"),
    ],
)
def test_rig_element_table_errors_name_the_key(table, key, words):
    with pytest.raises(ConfigError) as err:
        load_rig(LINEAR_RIG, text=_rig_text("[[virtual.nonlinear]]\n" + table + "\n"))
    assert err.value.key == key and words in str(err.value)


def test_a_stop_too_stiff_for_its_substeps_is_a_config_error_naming_the_key():
    """The explicit element force needs omega h < 0.1 of the contact: 1e5 N/m at the tip with
    2 sub-steps at 5 kHz is refused (the message says how many sub-steps would do), and is
    accepted with that many."""
    text = _rig_text(ELEMENTS.replace("100.0", "1.0e5"))
    with pytest.raises(ConfigError) as err:
        VirtualRig(load_rig(LINEAR_RIG, text=text))
    assert err.value.key == "virtual.nonlinear[0].stiffness_n_per_m" and "nonlinear_substeps" in str(err.value)
    need = int(str(err.value).split("to about ")[1].split()[0])
    VirtualRig(load_rig(LINEAR_RIG, text=_rig_text(ELEMENTS.replace("100.0", "1.0e5"), f"nonlinear_substeps = {need}\n")))


def test_friction_together_with_elements_is_refused():
    text = _rig_text(ELEMENTS).replace("slider_coulomb_n = 0.0", "slider_coulomb_n = 0.1")
    with pytest.raises(ConfigError) as err:
        load_rig(LINEAR_RIG, text=text)
    assert "nonlinear" in str(err.value)


# -- element forces: time domain vs AFT -----------------------------------------------------


def test_cubic_spring_time_forces_give_the_exact_aft_coefficients():
    """g = k3 r^3 of r = X cos(wt + phi) + Y cos(2wt): the AFT coefficients equal the exact
    expansion (the element's time-domain force law sampled on a fine grid, and analytic for the
    single harmonic: 3/4 k3 X^3 at order 1, 1/4 k3 X^3 at order 3)."""
    k3, X = 2.5e7, 1.3e-3 * np.exp(0.4j)
    el = CubicSpring(("u1",), k3=k3)
    G, _ = harmonic_force(el, [X, 0, 0], 18.0, [1, 2, 3])
    assert G[0] == pytest.approx(0.75 * k3 * abs(X) ** 2 * X, rel=1e-12)
    assert abs(G[1]) < 1e-12 * abs(G[0])
    assert G[2] == pytest.approx(0.25 * k3 * X**3, rel=1e-12)
    # two harmonics: against the fine-grid time series of the same force law
    orders = np.arange(0, 7)
    R = np.array([0, X, 0.4e-3 - 0.2e-3j, 0, 0, 0, 0])
    G, _ = harmonic_force(el, R, 18.0, orders)
    n = 4096
    ph = 2 * np.pi * np.arange(n) / n
    r = np.real(R @ np.exp(1j * np.multiply.outer(orders, ph)))
    c = np.fft.rfft(el.force(r, np.zeros_like(r))) / n
    c[1:] *= 2
    np.testing.assert_allclose(G, c[: orders.size], atol=1e-12 * abs(G).max())


def test_contact_aft_converges_to_the_fine_time_series():
    """A contact's force is not a polynomial: the AFT at the reference's grid agrees with a
    fine time series within 1e-3 of the fundamental (aliasing of the kink)."""
    el = create_element("contact", ("u9",), gap=1e-3, stiffness=100.0, side=1.0)
    orders = np.arange(0, 13)
    R = np.zeros(orders.size, complex)
    R[0], R[1], R[2] = 2e-4, 2.5e-3 * np.exp(-1j), 3e-5
    G, _ = harmonic_force(el, R, 18.7, orders)
    n = 1 << 16
    ph = 2 * np.pi * np.arange(n) / n
    r = np.real(R @ np.exp(1j * np.multiply.outer(orders, ph)))
    c = np.fft.rfft(el.force(r, np.zeros_like(r))) / n
    c[1:] *= 2
    assert np.abs(G - c[: orders.size]).max() < 1e-3 * abs(c[1])


# -- the twin's time-domain simulation ------------------------------------------------------


def _steady_coefficients(rig, f, V, settle=120, periods=10):
    """Channel coefficients of the fundamental (demand time base) after ``settle`` periods:
    least squares of mean, cos and sin on the record's sample times."""
    rig.set_demand(f, V, [1], ramp_periods=2.0)
    rig.wait(settle)
    acq = rig.acquire(periods)
    w = 2 * np.pi * f * acq.t
    A = np.stack([np.ones_like(w), np.cos(w), np.sin(w)], axis=1)
    out = {}
    for c, v in acq.data.items():
        a = np.linalg.lstsq(A, v, rcond=None)[0]
        out[c] = a[1] - 1j * a[2]
    return out, acq


def test_twin_with_a_gapless_double_stop_equals_the_exact_linear_spring():
    """Two contacts of stiffness k at gap 0 on both sides of the tip act as one linear spring
    k to ground at all times: the twin's time-domain simulation of the two elements
    (sub-stepped explicit forces) equals the exact frequency-domain steady state of the model
    with k added to its stiffness matrix."""
    k = 80.0
    two = ELEMENTS.replace("gap_mm = 1.0", "gap_mm = 0.0").replace("100.0", str(k))
    two = two + two.replace('"positive"', '"negative"')
    rig = _rig(_rig_text(two), noise=False)
    V = np.array([[1.5 + 0.3j], [0.9 - 0.2j]])
    f = 18.6
    got, acq = _steady_coefficients(rig, f, V, settle=60, periods=4)
    m = rig.model
    M, C, K = m.MCK
    tip = m.beam.index(f"u{m.beam.x_nodes.size - 1}")
    K = K.copy()
    K[tip, tip] += k
    exact = steady_state(dataclasses.replace(m, MCK=(M, C, K)), f, V, [1])
    for c in got:
        want = exact.channels[c][0]
        assert abs(got[c] - want) < 1e-4 * abs(want), c  # 2 sub-steps: 4e-5 (gauges), lasers 4e-6


def test_twin_contact_never_reached_equals_the_linear_twin():
    """A stop far beyond the motion exerts no force: the element path (free flight in closed
    form) gives the linear twin's channels (to rounding of the two exact discretisations)."""
    far = ELEMENTS.replace("gap_mm = 1.0", "gap_mm = 50.0")
    V = np.array([[1.0 + 0.2j], [0.6 - 0.1j]])
    a = _steady_coefficients(_rig(_rig_text(far), noise=False), 17.0, V, settle=20, periods=5)[1]
    b = _steady_coefficients(_rig(_rig_text(""), noise=False), 17.0, V, settle=20, periods=5)[1]
    for c in a.data:
        np.testing.assert_allclose(a.data[c], b.data[c], atol=1e-9 * np.abs(b.data[c]).max())


def test_substeps_converge_at_second_order():
    """The explicit first-order-hold element force: halving the sub-step reduces the change
    of the steady state by about 4 (second order); 2 sub-steps are within 1e-4."""
    V = np.array([[2.0 + 0j], [1.2 + 0j]])
    res = {}
    for S in (1, 2, 8):
        rig = _rig(_rig_text(ELEMENTS, f"nonlinear_substeps = {S}\n"), noise=False)
        res[S] = _steady_coefficients(rig, 18.6, V, settle=60, periods=5)[0]["l2"]
    assert abs(res[2] - res[8]) < 1e-4 * abs(res[8])
    assert abs(res[1] - res[8]) > 2.5 * abs(res[2] - res[8])


# -- the exact reference: harmonic balance vs time integration -------------------------------


def _modal_time_integration(ref: SweepReference, ns, F, f, periods=40, max_mode_hz=2000.0):
    """Steady-state interface coefficients of the joined structure by time integration
    (DOP853 on the joined FE model projected on its modes below ``max_mode_hz``), started from
    the harmonic-balance state: a wrong periodic solution drifts by 1 - exp(-sigma t) of its
    error (sigma ~ 0.9 /s of mode 2: 87 % after 40 periods)."""
    sol = ref.solve(F, f)
    J, b = ref.joined, ref.joined.structure
    Fj = joined_force_vector(J, ns, F)
    orders, Om = sol.orders, 2 * np.pi * f
    grid = aft_grid(orders)
    x = sol.state.reshape(len(J.active), -1)
    Fnl = np.zeros((b.n_dof, orders.size), complex)
    for e in J.elements:
        r = e.weights @ x[[J.active.index(d) for d in e.dofs]]
        G = harmonics.unpack(packed_force(e, r, Om, grid)[0], orders)
        for d, w in zip(e.dofs, e.weights):
            Fnl[b.index(d)] += w * G
    Q = np.stack([np.linalg.solve(b.dynamic_stiffness(1j * k * Om), (Fj if k == 1 else 0) - Fnl[:, i]) for i, k in enumerate(orders)], axis=1)
    w2, Phi = scipy.linalg.eigh(b.K, b.M)
    keep = np.sqrt(np.abs(w2)) < 2 * np.pi * max_mode_hz
    w2, Phi = w2[keep], Phi[:, keep]
    n = w2.size
    Cr = Phi.T @ b.C @ Phi
    PM = Phi.T @ b.M
    y0 = np.concatenate([PM @ np.real(Q.sum(axis=1)), PM @ np.real((1j * orders * Om * Q).sum(axis=1))])
    idx = [np.array([b.index(d) for d in e.dofs]) for e in J.elements]
    PhiE = [Phi[i] for i in idx]

    def rhs(t, y):
        eta, de = y[:n], y[n:]
        g = Phi.T @ np.real(Fj * np.exp(1j * Om * t))
        for e, P in zip(J.elements, PhiE):
            g -= P.T @ (e.weights * e.force(e.weights @ (P @ eta), e.weights @ (P @ de)))
        return np.concatenate([de, g - Cr @ de - w2 * eta])

    T, N = 1.0 / f, 256
    out = solve_ivp(rhs, (0, periods * T), y0, method="DOP853", rtol=1e-9, atol=1e-12, t_eval=(periods - 1) * T + np.arange(N) * T / N)
    u = Phi[b.index(J.active[0])] @ out.y[:n]
    c = np.fft.rfft(u) / N
    c[1:] *= 2
    return sol.coefficients[0], c[: orders.size]


@pytest.mark.parametrize(
    "sweep, f",
    [
        pytest.param(CONTACT_SWEEP, 18.7, id="ps-contact-18.7Hz"),
        pytest.param(CUBIC_SWEEP, 18.9, id="ns-cubic+ps-contact-18.9Hz"),
        pytest.param(CONTACT_SWEEP, 18.3, id="ps-contact-18.3Hz", marks=pytest.mark.slow),
    ],
)
def test_harmonic_balance_reference_agrees_with_time_integration(sweep, f):
    """The exact reference (harmonic balance, harmonics 0..24, full FE model) against time
    integration of the same joined model (modes below 2 kHz): every harmonic 0..4 of the
    interface displacement within 1e-4 of the fundamental (measured: <= 2e-5, the modal
    truncation). Either side nonlinear: the PS stop alone, and with the NS cubic spring."""
    cfg = load_sweep(sweep)
    rig = VirtualRig(load_rig(CONTACT_RIG), noise=False)
    ns = cfg.numerical.numerical_substructure()
    F = cfg.excitation.force_vector(ns)
    ref = SweepReference(rig.model, ns)
    hb, ti = _modal_time_integration(ref, ns, F, f)
    assert abs(hb[2]) > 5e-3 * abs(hb[1]) and abs(hb[0]) > 5e-2 * abs(hb[1])  # the contact acts
    assert np.abs(hb[:5] - ti[:5]).max() < 1e-4 * abs(hb[1])


def test_sweep_reference_choice_and_the_linear_limit():
    """Linear both sides: the closed form; a nonlinear side: the harmonic balance, which for a
    stop never reached equals the closed form (to the Newton noise floor: 1e-8 with one BLAS
    thread, up to 6e-7 at the 18.5 Hz resonance with CI's threaded BLAS, so the bound is 2e-6)."""
    cfg = load_sweep(PAPER_SWEEP)
    ns = cfg.numerical.numerical_substructure()
    F = cfg.excitation.force_vector(ns)
    lin = VirtualRig(load_rig(LINEAR_RIG), noise=False)
    assert sweep_reference(lin, ns) == lin.emulated_interface_response
    far = _rig(_rig_text(ELEMENTS.replace("gap_mm = 1.0", "gap_mm = 80.0")), noise=False)
    ref = sweep_reference(far, ns)
    assert isinstance(ref, SweepReference)
    for f in (16.0, 18.5):
        want = lin.emulated_interface_response(ns.substructure, F, f, [1, 2])
        np.testing.assert_allclose(ref(ns.substructure, F, f, [1, 2]), want, rtol=2e-6, atol=1e-12 * abs(want).max())


def test_sweep_reference_follows_the_branch_of_a_stepped_sweep():
    """Between the folds of the cubic-interface response (19.0586 / 19.5297 Hz, its header)
    the reference continued from below stays on the upper branch, from above on the lower one
    — the branches a stepped test follows; outside the folds both directions agree."""
    cfg = load_sweep(CUBIC_SWEEP)
    ns = cfg.numerical.numerical_substructure()
    F = cfg.excitation.force_vector(ns)
    rig = VirtualRig(load_rig(LINEAR_RIG), noise=False)
    up, down = sweep_reference(rig, ns), sweep_reference(rig, ns)
    f_up = np.arange(18.6, 19.31, 0.05)
    a_up = [abs(up(ns.substructure, F, f, [1])[0, 0]) for f in f_up]
    a_down = [abs(down(ns.substructure, F, f, [1])[0, 0]) for f in np.arange(20.0, 19.29, -0.05)]
    assert a_up[-1] > 3 * a_down[-1]  # 19.3 Hz: upper vs lower branch
    lo = sweep_reference(rig, ns)
    assert abs(lo(ns.substructure, F, 18.6, [1])[0, 0]) == pytest.approx(a_up[0], rel=1e-9)


# -- the contact-tip sweep on the twin -------------------------------------------------------


def _contact_sweep(tmp_path, overrides):
    cfg = load_sweep(CONTACT_SWEEP, overrides)
    return run(cfg, tmp_path / "contact.zarr", progress=None, plot=False, overrides=overrides).load()


@pytest.mark.slow  # ~100 s (the first point from rest settles for ~4000 periods through the stop);
# the default run keeps the contact's reference against time integration above
def test_contact_tip_sweep_short(tmp_path):
    """Three points around the bent resonance (the stop engaged at every one): converged,
    harmonic 1 within 1 % of the exact reference, and every harmonic (the contact's mean, 2
    and 3) within 1 % of the point's own fundamental (it was held to the smallest fundamental
    of the three: 18.7 Hz's 0.65 % then counted 1.05 %)."""
    ds = _contact_sweep(tmp_path, ["sweep.start_hz=18.5", "sweep.stop_hz=18.9", "sweep.points=3"])
    assert bool(ds.converged.all()) and bool(ds.done.all())
    assert float(np.abs(frf.relative_error(ds)).max()) < 0.01
    U = ds.interface_displacement.values[:, 0]
    R = ds.reference_interface_displacement.values[:, 0]
    assert np.all(np.abs(R[:, 0]) > 0.05 * np.abs(R[:, 1]))  # the stop engages: a mean offset
    assert np.all(np.abs(U - R).max(axis=1) < 0.01 * np.abs(R[:, 1]))


@pytest.mark.slow
def test_contact_tip_sweep_full(tmp_path):
    ds = _contact_sweep(tmp_path, [])
    assert bool(ds.converged.all()) and bool(ds.done.all())
    assert float(np.abs(frf.relative_error(ds)).max()) < 0.01
