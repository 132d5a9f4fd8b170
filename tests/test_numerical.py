"""Numerical substructures (hbtest.numerical): AFT elements against closed forms, the analytic
AFT Jacobian against finite differences, the nonlinear substructure against the linear one and
against long time integration (an independent method)."""

import numpy as np
import pytest
import scipy.integrate
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.method import harmonics
from hbtest.numerical import (
    ELEMENT_KINDS,
    Contact,
    CubicSpring,
    Friction,
    LinearSubstructure,
    NonlinearSubstructure,
    NumericalSubstructure,
    aft_grid,
    create_element,
    harmonic_force,
    packed_force,
)
from hbtest.method.structures import beam, generic
from hbtest.method.substructure import Substructure

F = 18.0  # Hz


def ns_beam(n_elements=34, zeta_mass=0.9):
    """The paper cantilever's numerical root (170 mm, clamped), interface at its free end."""
    b = beam(0.17, 0.0254, 0.001, 217e9, 8210.0, n_elements=n_elements, zeta_mass=zeta_mass, zeta_stiffness=7e-5)
    j = b.x_nodes.size - 1
    return Substructure(b, (f"u{j}", f"theta{j}"))


def tip_force(sub, amplitude=0.05):
    fv = np.zeros(sub.structure.n_dof, dtype=complex)
    fv[sub.interface_index[0]] = amplitude
    return fv


# -- elements: closed forms ----------------------------------------------------------------


def test_registry_names_the_three_kinds():
    assert {"cubic_spring", "friction", "contact"} <= set(ELEMENT_KINDS)
    e = create_element("cubic_spring", ("u3",), k3=2.0)
    assert isinstance(e, CubicSpring) and e.k3 == 2.0
    with pytest.raises(KeyError):
        create_element("glue", ("u3",))


@pytest.mark.parametrize("X", [1e-4, 0.3, 2.0])
def test_cubic_spring_harmonics(X):
    """x = X cos wt -> k3 X^3 (3/4 cos wt + 1/4 cos 3wt), nothing else."""
    k3 = 7.5e8
    orders = (0, 1, 2, 3, 4, 5)
    G, _ = harmonic_force(CubicSpring(("u",), k3=k3), [0, X, 0, 0, 0, 0], F, orders)
    expect = k3 * X**3 * np.array([0, 0.75, 0, 0.25, 0, 0])
    np.testing.assert_allclose(G, expect, rtol=0, atol=1e-13 * k3 * X**3)


def test_cubic_spring_phase_follows_the_motion():
    """x = X sin wt (X_1 = -iX) -> k3 X^3 (3/4 sin wt - 1/4 sin 3wt)."""
    k3, X = 2.0, 0.5
    G, _ = harmonic_force(CubicSpring(("u",), k3=k3), [-1j * X, 0], F, (1, 3))
    np.testing.assert_allclose(G, k3 * X**3 * np.array([-0.75j, 0.25j]), atol=1e-15)


def test_friction_energy_per_cycle_tends_to_4_fc_x():
    """Dissipated energy per cycle pi sum_k k Im(conj(R_k) G_k) -> 4 F_c X as v_s -> 0, the
    error shrinking with the regularisation velocity."""
    Fc, X = 0.8, 1e-3
    omega = 2 * np.pi * F
    errors = []
    for eps in (1e-1, 1e-2, 1e-3):
        e = Friction(("u",), force_limit=Fc, velocity_scale=eps * X * omega)
        orders = (1,)
        G, _ = harmonic_force(e, [X], F, orders, n_time=1 << 14)
        W = np.pi * np.imag(np.conj(X) * G[0])
        errors.append(abs(W - 4 * Fc * X) / (4 * Fc * X))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-4


def test_friction_opposes_velocity():
    e = Friction(("u",), force_limit=2.0, velocity_scale=1e-3)
    v = np.array([-1.0, -1e-6, 0.0, 1e-6, 1.0])
    g = e.force(np.zeros_like(v), v)
    assert np.all(np.sign(g) == np.sign(v))
    assert g[-1] == pytest.approx(2.0)


def test_contact_zero_gap_is_a_half_wave_one_sided_spring():
    """Zero gap: g = k_c max(X cos, 0) = k_c X (1/pi + cos/2 + 2/(3 pi) cos 2 - 2/(15 pi) cos 4),
    no odd harmonics above 1 (sampled AFT converges as 1/N^2 at the kinks)."""
    kc, X = 3e4, 2e-3
    orders = (0, 1, 2, 3, 4, 5)
    expect = kc * X * np.array([1 / np.pi, 0.5, 2 / (3 * np.pi), 0, -2 / (15 * np.pi), 0])
    G, _ = harmonic_force(Contact(("u",), gap=0.0, stiffness=kc), [0, X, 0, 0, 0, 0], F, orders, n_time=4096)
    np.testing.assert_allclose(G, expect, rtol=0, atol=1e-6 * kc * X)


def test_contact_with_gap_describing_function():
    """First harmonic of k_c max(X cos - g, 0): k_c X (alpha - sin alpha cos alpha) / pi,
    alpha = arccos(g / X); no force while |X| < gap; the stop below (side -1) mirrors it."""
    kc, X, gap = 5e3, 1e-3, 4e-4
    alpha = np.arccos(gap / X)
    G, _ = harmonic_force(Contact(("u",), gap=gap, stiffness=kc), [X], F, (1,), n_time=1 << 14)
    assert G[0].real == pytest.approx(kc * X * (alpha - np.sin(alpha) * np.cos(alpha)) / np.pi, rel=1e-6)
    assert abs(G[0].imag) < 1e-9 * kc * X
    G, _ = harmonic_force(Contact(("u",), gap=gap, stiffness=kc, side=-1.0), [X], F, (1,), n_time=1 << 14)
    assert G[0].real == pytest.approx(kc * X * (alpha - np.sin(alpha) * np.cos(alpha)) / np.pi, rel=1e-6)
    G, _ = harmonic_force(Contact(("u",), gap=gap, stiffness=kc), [0, 0.9 * gap], F, (0, 1))
    assert np.all(G == 0)


def test_contact_stiffness_to_infinity_holds_at_the_stop():
    """An SDOF spring k pushed by a static force F0 onto a stop at the gap: HB gives
    x = (F0 + k_c g) / (k + k_c) for every k_c, tending to the gap (rigid stop) with the
    contact force F0 - k g as k_c -> infinity."""
    k, F0, gap = 100.0, 2.0, 5e-3  # the free spring would go to 20 mm
    sub = Substructure(generic([[1e-3]], [[0.0]], [[k]], ("x",)), ("x",))
    prev = np.inf
    for kc in (1e3, 1e5, 1e7, 1e9):
        ns = NonlinearSubstructure(sub, [Contact(("x",), gap=gap, stiffness=kc)])
        # the substructure is loaded by -F_P: F_P = -F0 pushes it up
        sol = ns.solve(F, (0, 1), F_P=np.array([[-F0, 0.0]]))
        x0 = sol.coefficients[0, 0].real
        assert x0 == pytest.approx((F0 + kc * gap) / (k + kc), rel=1e-12)
        assert abs(x0 - gap) < prev
        prev = abs(x0 - gap)
        assert abs(sol.coefficients[0, 1]) < 1e-15
    assert prev < 1e-9 * gap * 1e3 and kc * (x0 - gap) == pytest.approx(F0 - k * gap, rel=1e-6)


# -- the AFT Jacobian ----------------------------------------------------------------------


def element_strategy():
    cubic = st.builds(lambda k3: CubicSpring(("u",), k3=k3), st.floats(-1e9, 1e9))
    friction = st.builds(
        lambda fc, vs: Friction(("u",), force_limit=fc, velocity_scale=vs), st.floats(0.01, 10.0), st.floats(0.02, 1.0)
    )
    contact = st.builds(
        lambda g, kc, side: Contact(("u",), gap=g, stiffness=kc, side=side),
        st.floats(0.0, 1e-3),
        st.floats(1.0, 1e6),
        st.sampled_from([1.0, -1.0]),
    )
    return st.one_of(cubic, friction, contact)


@settings(max_examples=60, deadline=None)
@given(
    element=element_strategy(),
    orders=st.sampled_from([(1,), (1, 3), (0, 1, 2, 3), (1, 2, 3, 5)]),
    seed=st.integers(0, 2**31 - 1),
    frequency=st.floats(1.0, 100.0),
)
def test_aft_jacobian_matches_finite_differences(element, orders, seed, frequency):
    """The analytic AFT derivative equals central differences of the AFT force."""
    rng = np.random.default_rng(seed)
    p = harmonics.packed_size(orders)
    x = 1e-3 * rng.standard_normal(p)
    grid = aft_grid(orders)
    omega = 2 * np.pi * frequency
    g0, J = packed_force(element, x, omega, grid)
    h = 1e-9
    Jfd = np.empty((p, p))
    for j in range(p):
        dx = np.zeros(p)
        dx[j] = h
        Jfd[:, j] = (packed_force(element, x + dx, omega, grid)[0] - packed_force(element, x - dx, omega, grid)[0]) / (2 * h)
    scale = np.abs(J).max() + np.abs(Jfd).max() + 1e-300
    assert np.abs(J - Jfd).max() <= 1e-5 * scale


# -- the substructures ---------------------------------------------------------------------


def test_both_substructures_follow_the_protocol():
    sub = ns_beam(8)
    assert isinstance(LinearSubstructure(sub), NumericalSubstructure)
    assert isinstance(NonlinearSubstructure(sub, [CubicSpring(("u8",), k3=1.0)]), NumericalSubstructure)


def test_linear_substructure_is_d_inverse():
    sub = ns_beam()
    orders = np.array([1, 3])
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    fv = tip_force(sub)
    r = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    D = sub.harmonic_stiffness(F, orders)
    Fe = np.zeros((2, 2), dtype=complex)
    Fe[:, 0] = sub.condensed_force(fv, 2j * np.pi * F)
    for i in range(2):
        np.testing.assert_allclose(D[i] @ r.displacement[:, i], Fe[:, i] - FP[:, i], rtol=1e-10, atol=1e-14)
    # dU/dF_P = -D^-1 (packed)
    np.testing.assert_allclose(r.jacobian, -harmonics.real_operator(np.linalg.inv(D), orders), rtol=1e-13)


@pytest.mark.parametrize("dofs", [[("u34",)], [("theta34",)], [("u34",), ("theta34",)]])
def test_zero_nonlinearity_at_the_interface_equals_linear(dofs):
    """Elements at the interface DOFs with zero coefficients: the harmonic balance gives the
    linear answer to 1e-12 (same condensation)."""
    sub = ns_beam()
    orders = (1, 3)
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    fv = tip_force(sub)
    lin = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    els = [CubicSpring(d, k3=0.0) for d in dofs] + [Friction(dofs[0], force_limit=0.0), Contact(dofs[0], stiffness=0.0)]
    nl = NonlinearSubstructure(sub, els).interface_response(F, orders, FP, fv)
    assert np.abs(nl.displacement - lin.displacement).max() <= 1e-12 * np.abs(lin.displacement).max()
    assert np.abs(nl.jacobian - lin.jacobian).max() <= 1e-12 * np.abs(lin.jacobian).max()


def test_zero_nonlinearity_in_the_bulk_equals_linear():
    """Zero elements on bulk DOFs (a two-node spring too): the condensation goes through the
    active DOFs, so the answer agrees to the conditioning of this beam's condensation (its
    dynamic stiffness has condition number ~1e9: two exact Schur routes differ by ~1e-10)."""
    sub = ns_beam()
    orders = (1, 3)
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    fv = tip_force(sub)
    lin = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    ns = NonlinearSubstructure(sub, [CubicSpring(("u20",), k3=0.0), CubicSpring(("theta10", "theta5"), k3=0.0)])
    assert ns.active == ("u34", "theta34", "theta5", "theta10", "u20")
    nl = ns.interface_response(F, orders, FP, fv)
    assert np.abs(nl.displacement - lin.displacement).max() <= 1e-9 * np.abs(lin.displacement).max()
    assert np.abs(nl.jacobian - lin.jacobian).max() <= 1e-9 * np.abs(lin.jacobian).max()


def test_interface_jacobian_matches_finite_differences():
    """dU_N/dF_P of the nonlinear substructure against central differences of its solutions."""
    sub = ns_beam(10)
    orders = (1, 3)
    els = [CubicSpring(("u10",), k3=3e8), Friction(("u5",), force_limit=0.01, velocity_scale=5e-3), CubicSpring(("theta10", "theta4"), k3=20.0)]
    ns = NonlinearSubstructure(sub, els)
    fv = tip_force(sub)
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    base = ns.interface_response(F, orders, FP, fv)
    p = harmonics.packed_size(orders)
    x = harmonics.pack(FP, orders).reshape(-1)
    J = np.empty((2 * p, 2 * p))
    for j in range(2 * p):
        h = 1e-6 * (0.01 if j < p else 1e-3)
        cols = []
        for sgn in (1, -1):
            dx = np.zeros(2 * p)
            dx[j] = sgn * h
            r = ns.interface_response(F, orders, harmonics.unpack((x + dx).reshape(2, p), orders), fv, start=base.state)
            cols.append(harmonics.pack(r.displacement, orders).reshape(-1))
        J[:, j] = (cols[0] - cols[1]) / (2 * h)
    np.testing.assert_allclose(base.jacobian, J, rtol=1e-5, atol=1e-6 * np.abs(J).max())
    # and the cubic spring does change the answer (the test is not linear in disguise)
    lin = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    assert np.abs(base.displacement - lin.displacement).max() > 1e-2 * np.abs(lin.displacement).max()


def periodic_time_response(sub, elements, fv, FP, orders, frequency, periods, fit_orders, method="Radau"):
    """Integrate M q'' + C q' + K q + sum w g = f(t) - S^T f_P(t) from rest (Radau, tight
    tolerances) for ``periods`` periods; harmonics of the interface DOFs over the last two."""
    S = sub.structure
    n = S.n_dof
    Minv = np.linalg.inv(S.M)
    idx = sub.interface_index
    omega = 2 * np.pi * frequency
    orders = np.asarray(orders)

    FP = np.asarray(FP, dtype=complex)
    kw = orders * omega

    def forcing(t):
        f = np.real(fv * np.exp(1j * omega * t))
        f[idx] -= np.real(FP @ np.exp(1j * kw * t))
        return f

    edofs = [[S.index(d) for d in e.dofs] for e in elements]

    def nl_force(q, v):
        out = np.zeros(n)
        for e, ix in zip(elements, edofs):
            w = e.weights
            r = np.array([w @ q[ix]])
            rv = np.array([w @ v[ix]])
            out[ix] += w * e.force(r, rv)[0]
        return out

    def rhs(t, y):
        q, v = y[:n], y[n:]
        return np.concatenate([v, Minv @ (forcing(t) - S.C @ v - S.K @ q - nl_force(q, v))])

    def jac(t, y):
        q, v = y[:n], y[n:]
        Kt = S.K.copy()
        Ct = S.C.copy()
        for e, ix in zip(elements, edofs):
            w = e.weights
            dr, dv = e.gradient(np.array([w @ q[ix]]), np.array([w @ v[ix]]))
            Kt[np.ix_(ix, ix)] += dr[0] * np.outer(w, w)
            Ct[np.ix_(ix, ix)] += dv[0] * np.outer(w, w)
        return np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ Kt, -Minv @ Ct]])

    T = 1.0 / frequency
    t_eval = np.linspace((periods - 2) * T, periods * T, 2 * 256 + 1)
    sol = scipy.integrate.solve_ivp(rhs, (0.0, periods * T), np.zeros(2 * n), method=method, rtol=1e-10, atol=1e-14, t_eval=t_eval, **({"jac": jac} if method == "Radau" else {}))
    assert sol.success
    x = sol.y[idx]
    return harmonics.fit(t_eval[:-1], x[:, :-1], frequency, fit_orders, n_periods=2)


@pytest.mark.slow
def test_nonlinear_beam_matches_long_time_integration():
    """The beam with a hardening cubic spring at the interface node (and an interface force at
    orders 1 and 3): harmonic balance with orders 1..9 odd equals the periodic steady state of
    a long time integration from rest, harmonics 1 and 3 within 1e-4 of the first's size."""
    sub = ns_beam(n_elements=4, zeta_mass=8.0)
    els = [CubicSpring(("u4",), k3=1.5e9)]
    orders = (1, 3, 5, 7, 9)
    fv = tip_force(sub, 0.05)
    FP = np.array([[0.01 + 0.004j, 0.002j, 0, 0, 0], [1e-4, 2e-4 - 1e-4j, 0, 0, 0]])
    ns = NonlinearSubstructure(sub, els)
    hb = ns.interface_response(F, orders, FP, fv)
    lin = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    # the spring matters: the first harmonic moves by several per cent
    assert np.abs(hb.displacement[0, 0] - lin.displacement[0, 0]) > 0.03 * abs(lin.displacement[0, 0])
    ref = periodic_time_response(sub, els, fv, FP, orders, F, periods=60, fit_orders=orders)
    for i in range(2):
        scale = abs(ref.coefficients[i, 0])
        assert np.abs(hb.displacement[i, :2] - ref.coefficients[i, :2]).max() <= 1e-4 * scale


def test_duffing_oscillator_matches_time_integration():
    """A Duffing SDOF m x'' + c x' + k x + k3 x^3 = f cos wt - f_P(t) (below its resonance,
    one periodic solution): harmonic balance with odd orders to 11 equals the periodic steady
    state of a time integration from rest, harmonics 1 and 3 within 1e-4 of the first."""
    m, k = 1.0, (2 * np.pi * 25.0) ** 2
    c = 2 * 0.08 * np.sqrt(k * m)
    sub = Substructure(generic([[m]], [[c]], [[k]], ("x",)), ("x",))
    els = [CubicSpring(("x",), k3=2e5)]
    orders = (1, 3, 5, 7, 9, 11)
    fv = np.array([1000.0 + 0j])
    FP = np.zeros((1, len(orders)), dtype=complex)
    FP[0, 1] = 50.0j
    hb = NonlinearSubstructure(sub, els).interface_response(F, orders, FP, fv)
    lin = LinearSubstructure(sub).interface_response(F, orders, FP, fv)
    assert abs(hb.displacement[0, 0] - lin.displacement[0, 0]) > 0.05 * abs(lin.displacement[0, 0])
    ref = periodic_time_response(sub, els, fv, FP, orders, F, periods=50, fit_orders=orders, method="DOP853")
    scale = abs(ref.coefficients[0, 0])
    assert np.abs(hb.displacement[0, :2] - ref.coefficients[0, :2]).max() <= 1e-4 * scale


# -- the sweep file ------------------------------------------------------------------------

from pathlib import Path  # noqa: E402

from hbtest.config import load_sweep  # noqa: E402
from hbtest.errors import ConfigError  # noqa: E402

PAPER = Path(__file__).resolve().parents[1] / "sweeps" / "paper-cantilever.toml"


def paper_with(extra: str):
    return load_sweep(PAPER, text=PAPER.read_text() + "\n" + extra)


def test_linear_file_keeps_its_substructure():
    cfg = load_sweep(PAPER)
    assert cfg.numerical.nonlinear == () and cfg.numerical.is_linear
    sub = cfg.numerical.substructure()
    assert sub.structure.n_dof == 68 and sub.interface == ("u34", "theta34")
    lin = cfg.numerical.numerical_substructure()
    assert isinstance(lin, LinearSubstructure)
    np.testing.assert_array_equal(lin.dynamic_stiffness(2j * np.pi * F), sub.dynamic_stiffness(2j * np.pi * F))


def test_nonlinear_entries_are_parsed_in_si():
    cfg = paper_with(
        """
[[numerical.nonlinear]]
kind = "cubic_spring"
position_mm = 170.0
dof = "u"
k3_n_per_m3 = 2.5e7

[[numerical.nonlinear]]
kind = "friction"
position_mm = 100.0
dof = "theta"
moment_nm = 0.01
velocity_scale_rad_per_s = 0.05

[[numerical.nonlinear]]
kind = "contact"
position_mm = 152.5
to_position_mm = 60.0
dof = "u"
gap_mm = 0.5
stiffness_n_per_m = 1e5
side = "negative"
"""
    )
    nl = cfg.numerical.nonlinear
    assert [e.kind for e in nl] == ["cubic_spring", "friction", "contact"]
    assert dict(nl[0].params) == {"k3": 2.5e7} and nl[0].position == pytest.approx(0.17)
    assert dict(nl[1].params) == {"force_limit": 0.01, "velocity_scale": 0.05}
    assert dict(nl[2].params) == pytest.approx({"gap": 5e-4, "stiffness": 1e5, "side": -1.0})
    assert nl[2].to_position == pytest.approx(0.06)
    ns = cfg.numerical.numerical_substructure()
    assert isinstance(ns, NonlinearSubstructure)
    # 152.5 mm is off the 5 mm grid: the beam got a node there (one more element)
    assert ns.structure.n_dof == 70 and ns.interface == ("u35", "theta35")
    b = ns.structure
    e = ns.elements
    assert e[0].dofs == ("u35",) and e[0].k3 == 2.5e7
    assert e[1].dofs == (f"theta{b.node_at(0.1)}",) and isinstance(e[1], Friction)
    assert e[2].dofs == (f"u{b.node_at(0.1525)}", f"u{b.node_at(0.06)}") and e[2].side == -1.0
    # linear files are not changed by the node insertion machinery
    assert load_sweep(PAPER).numerical.substructure().structure.n_dof == 68


@pytest.mark.parametrize(
    "entry, key, words",
    [
        ('kind = "glue"\nposition_mm = 170.0\ndof = "u"', "kind", "must be one of"),
        ('kind = "cubic_spring"\nposition_mm = 171.0\ndof = "u"\nk3_n_per_m3 = 1.0', "position_mm", "outside"),
        ('kind = "cubic_spring"\nposition_mm = 0.0\ndof = "theta"\nk3_nm_per_rad3 = 1.0', "position_mm", "fixes theta"),
        ('kind = "cubic_spring"\nposition_mm = 170.0\ndof = "u"', "k3_n_per_m3", "missing"),
        ('kind = "cubic_spring"\nposition_mm = 170.0\ndof = "theta"\nk3_n_per_m3 = 1.0', "k3_n_per_m3", "use k3_nm_per_rad3"),
        ('kind = "cubic_spring"\nposition_mm = 170.0\ndof = "w"\nk3_n_per_m3 = 1.0', "dof", "must be one of"),
        ('kind = "friction"\nposition_mm = 170.0\ndof = "u"\nforce_n = 1.0\nvelocity_scale_m_per_s = 0.0', "velocity_scale_m_per_s", "positive"),
        ('kind = "contact"\nposition_mm = 170.0\ndof = "u"\ngap_mm = -1.0\nstiffness_n_per_m = 1.0', "gap_mm", ""),
        ('kind = "contact"\nposition_mm = 170.0\ndof = "u"\ngap_mm = 1.0\nstiffness_n_per_m = 1.0\nside = "up"', "side", "must be one of"),
        ('kind = "cubic_spring"\nposition_mm = 170.0\nto_position_mm = 170.0\ndof = "u"\nk3_n_per_m3 = 1.0', "to_position_mm", "must differ"),
        ('kind = "cubic_spring"\nposition_mm = 170.0\ndof = "u"\nk3_n_per_m3 = 1.0\nspeed = 3', "speed", "unknown key"),
    ],
)
def test_bad_nonlinear_entries_name_file_and_key(entry, key, words):
    with pytest.raises(ConfigError) as ei:
        paper_with("[[numerical.nonlinear]]\n" + entry)
    e = ei.value
    assert e.source == str(PAPER) and e.key == f"numerical.nonlinear[0].{key}"
    assert words in e.problem


# -- the point loop's numerical side -------------------------------------------------------

from hbtest.point import NumericalSide  # noqa: E402


def test_numerical_side_is_unchanged_for_a_linear_substructure():
    cfg = load_sweep(PAPER)
    sub = cfg.numerical.substructure()
    fv = cfg.excitation.force_vector(sub)
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    old = NumericalSide.build(sub, fv, F, (1, 3))
    new = NumericalSide.build(cfg.numerical.numerical_substructure(), fv, F, (1, 3))
    assert old.is_linear and new.is_linear
    np.testing.assert_array_equal(old.numerical_displacement(FP), new.numerical_displacement(FP))
    np.testing.assert_array_equal(old.D, new.D)
    lin = LinearSubstructure(sub).interface_response(F, (1, 3), FP, fv)
    np.testing.assert_allclose(old.numerical_displacement(FP), lin.displacement, rtol=1e-14)
    np.testing.assert_allclose(old.displacement_jacobian(), lin.jacobian, rtol=1e-13)


def test_numerical_side_dispatches_to_a_nonlinear_substructure():
    cfg = paper_with('[[numerical.nonlinear]]\nkind = "cubic_spring"\nposition_mm = 170.0\ndof = "u"\nk3_n_per_m3 = 1e9')
    ns = cfg.numerical.numerical_substructure()
    fv = cfg.excitation.force_vector(ns)
    orders = (1, 3)
    num = NumericalSide.build(ns, fv, F, orders)
    assert not num.is_linear
    lin = NumericalSide.build(cfg.numerical.substructure(), fv, F, orders)
    np.testing.assert_array_equal(num.D, lin.D)
    np.testing.assert_array_equal(num.F_e, lin.F_e)
    for FP in (np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]]), np.array([[0.012, 0], [1e-3j, 0]])):
        ref = ns.interface_response(F, orders, FP, fv)
        np.testing.assert_allclose(num.numerical_displacement(FP), ref.displacement, rtol=1e-10, atol=1e-16)
        np.testing.assert_allclose(num.displacement_jacobian(FP), ref.jacobian, rtol=1e-8, atol=1e-12 * np.abs(ref.jacobian).max())
        assert np.abs(num.numerical_displacement(FP) - lin.numerical_displacement(FP)).max() > 1e-3 * np.abs(ref.displacement).max()
    with pytest.raises(ValueError):
        num.displacement_jacobian()


# -- response curves through folds ---------------------------------------------------------

from scipy.optimize import minimize_scalar  # noqa: E402

from hbtest.config import load_rig  # noqa: E402
from hbtest.numerical import ContinuationSettings, trace_response  # noqa: E402
from hbtest.method.substructure import join_beams  # noqa: E402


def duffing_single_harmonic_folds(m, c, k, k3, f0):
    """Fold frequencies [Hz] of the one-harmonic Duffing curve, from its closed form
    ``((k + 3/4 k3 A^2 - m w^2)^2 + (c w)^2) A^2 = f0^2``: the local extrema of w(A) on the
    upper root (found by bounded minimisation, independent of the continuation)."""

    def w_upper(A):
        kp = k + 0.75 * k3 * A * A
        a, b, cc = m * m, c * c - 2 * kp * m, kp * kp - (f0 / A) ** 2
        d = b * b - 4 * a * cc
        return np.sqrt((-b + np.sqrt(d)) / (2 * a)) / (2 * np.pi) if d >= 0 else np.nan

    A = np.linspace(1e-3, 2.0, 20001)
    w = np.array([w_upper(a) for a in A])
    ok = np.isfinite(w)
    dw = np.sign(np.diff(np.where(ok, w, 0.0)))
    out = []
    for i in np.flatnonzero((dw[1:] != dw[:-1]) & ok[1:-1] & ok[:-2] & ok[2:]) + 1:
        sgn = 1.0 if w[i] < w[i - 1] else -1.0  # minimum or maximum
        r = minimize_scalar(lambda a: sgn * w_upper(a), bounds=(A[i - 1], A[i + 1]), method="bounded", options={"xatol": 1e-14})
        out.append(w_upper(r.x))
    return sorted(out)


def test_continuation_passes_both_folds_of_a_duffing_oscillator():
    m, k, k3, f0 = 1.0, (2 * np.pi * 10.0) ** 2, 5e4, 100.0
    c = 2 * 0.02 * np.sqrt(k * m)
    sub = Substructure(generic([[m]], [[c]], [[k]], ("x",)), ("x",))
    ns = NonlinearSubstructure(sub, [CubicSpring(("x",), k3=k3)])
    cur = trace_response(ns, 9.0, 17.0, (1,), np.array([f0 + 0j]), settings=ContinuationSettings(max_step=0.2))
    expect = duffing_single_harmonic_folds(m, c, k, k3, f0)
    assert len(expect) == 2 and len(cur.folds_hz) == 2
    # met in order: the upper fold (peak) first, then the jump-up fold on the way back
    np.testing.assert_allclose(sorted(cur.folds_hz), expect, rtol=1e-8)
    assert cur.folds_hz[0] > cur.folds_hz[1]
    # the curve left the band at the top after passing both folds, and stays on the HB curve
    assert cur.frequencies_hz[-1] > 17.0
    i = len(cur.frequencies_hz) // 2
    sol = ns.solve(cur.frequencies_hz[i], (1,), force_vector=np.array([f0 + 0j]), start=cur.states[i])
    np.testing.assert_allclose(sol.state, cur.states[i], rtol=1e-8, atol=1e-12)


def cubic_interface_reference():
    """The emulated structure of sweeps/cubic-interface.toml: numerical root + the rig file's
    physical tip joined, the cubic spring and the force at the 170 mm node."""
    cfg = load_sweep(PAPER.parent / "cubic-interface.toml")
    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    ns = cfg.numerical.substructure()
    L = cfg.numerical.beam.length
    tip = Substructure(rig.physical.build(left="free", right="free", x_offset=L), ("u0", "theta0"))
    full = join_beams(ns, tip)
    j = full.node_at(L)
    sub = Substructure(full, (f"u{j}", f"theta{j}"))
    elements = tuple(e.build(full) for e in cfg.numerical.nonlinear)
    fv = np.zeros(full.n_dof, dtype=complex)
    fv[full.index(f"u{j}")] = cfg.excitation.amplitude
    return cfg, NonlinearSubstructure(sub, elements), fv


@pytest.mark.slow
def test_cubic_interface_sweep_has_both_folds_in_its_band():
    """The reference sweep's emulated structure, harmonics 1 and 3: a hardening mode 2 with
    both folds inside the sweep band (19.0586 and 19.5297 Hz, as its header says)."""
    cfg, ns, fv = cubic_interface_reference()
    assert ns.elements[0].dofs == (f"u{ns.structure.node_at(0.17)}",)
    cur = trace_response(ns, cfg.sweep.start_hz, cfg.sweep.stop_hz, cfg.sweep.harmonics, fv, settings=ContinuationSettings(max_step=0.2))
    assert len(cur.folds_hz) == 2
    lo, hi = sorted(cur.folds_hz)
    assert cfg.sweep.start_hz < lo < hi < cfg.sweep.stop_hz
    assert lo == pytest.approx(19.0586, abs=1e-4) and hi == pytest.approx(19.5297, abs=1e-4)


def test_a_perfect_hybrid_coupling_reproduces_the_joined_nonlinear_structure():
    """Couple the nonlinear numerical side (sweeps/cubic-interface.toml) to the linear tip
    through the protocol, as a perfect rig would (F_P = D_P U): Newton on U - U_N(D_P U) with
    the Jacobian I - (dU_N/dF_P) D_P converges to the harmonic balance of the joined
    structure, at a frequency between the folds (three solutions: start near the one found)."""
    cfg, full_ns, fv_full = cubic_interface_reference()
    orders = cfg.sweep.harmonics
    f = 19.3
    ref = full_ns.solve(f, orders, force_vector=fv_full)
    U_ref = ref.coefficients[:2]
    assert abs(U_ref[0, 0]) > 1e-4 and abs(U_ref[0, 1]) > 1e-3 * abs(U_ref[0, 0])
    ns = cfg.numerical.numerical_substructure()
    fv = cfg.excitation.force_vector(ns)
    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    tip = Substructure(rig.physical.build(left="free", right="free", x_offset=cfg.numerical.beam.length), ("u0", "theta0"))
    DP = tip.harmonic_stiffness(f, orders)
    DPr = harmonics.real_operator(DP, orders)
    p = harmonics.packed_size(orders)
    u = harmonics.pack(U_ref * 1.02, orders).reshape(-1)
    state = None
    for _ in range(30):
        U = harmonics.unpack(u.reshape(2, p), orders)
        F_P = np.einsum("kij,jk->ik", DP, U)
        r = ns.interface_response(f, orders, F_P, fv, start=state)
        state = r.state
        R = u - harmonics.pack(r.displacement, orders).reshape(-1)
        du = np.linalg.solve(np.eye(2 * p) - r.jacobian @ DPr, -R)
        u = u + du
        if np.abs(du).max() < 1e-13 * np.abs(u).max():
            break
    U = harmonics.unpack(u.reshape(2, p), orders)
    np.testing.assert_allclose(U, U_ref, rtol=0, atol=1e-8 * np.abs(U_ref).max())


@pytest.mark.parametrize("bulk", [False, True])
def test_interface_force_inverts_interface_response(bulk):
    """interface_force(U_N(F_P)) = F_P, and its Jacobian is the inverse of dU_N/dF_P; for a
    linear substructure it is F_e - D_N U."""
    sub = ns_beam(12)
    orders = (1, 3)
    els = [CubicSpring(("u12",), k3=1e9)] + ([Friction(("u6",), force_limit=0.02, velocity_scale=5e-3), CubicSpring(("theta12", "theta3"), k3=50.0)] if bulk else [])
    ns = NonlinearSubstructure(sub, els)
    fv = tip_force(sub)
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    r = ns.interface_response(F, orders, FP, fv)
    back = ns.interface_force(F, orders, r.displacement, fv)
    np.testing.assert_allclose(back.displacement, FP, rtol=0, atol=1e-9 * np.abs(FP).max())
    np.testing.assert_allclose(back.jacobian @ r.jacobian, np.eye(r.jacobian.shape[0]), atol=1e-7)
    lin = LinearSubstructure(sub)
    U = lin.interface_response(F, orders, FP, fv).displacement
    fl = lin.interface_force(F, orders, U, fv)
    np.testing.assert_allclose(fl.displacement, FP, rtol=0, atol=1e-9 * np.abs(FP).max())


def test_numerical_side_force_form():
    """force_residual is the loop's D_N U + F_P - F_e when linear; for a nonlinear side it
    vanishes at (U_N(F_P), F_P) and its Jacobian matches central differences."""
    cfg = load_sweep(PAPER.parent / "cubic-interface.toml")
    orders = cfg.sweep.harmonics
    FP = np.array([[0.01 + 0.002j, 1e-3j], [2e-3, 3e-4 - 1e-4j]])
    sub = cfg.numerical.substructure()
    lin = NumericalSide.build(sub, cfg.excitation.force_vector(sub), F, orders)
    U = np.array([[1e-4 - 2e-5j, 3e-6j], [8e-4, 1e-5 - 2e-6j]])
    np.testing.assert_allclose(lin.force_residual(U, FP), np.einsum("kij,jk->ik", lin.D, U) + FP - lin.F_e, rtol=1e-15)
    np.testing.assert_allclose(lin.force_residual_jacobian(), harmonics.real_operator(lin.D, orders), rtol=1e-15)
    ns = cfg.numerical.numerical_substructure()
    num = NumericalSide.build(ns, cfg.excitation.force_vector(ns), F, orders)
    UN = num.numerical_displacement(FP)
    assert np.abs(num.force_residual(UN, FP)).max() < 1e-10 * np.abs(FP).max()
    J = num.force_residual_jacobian(U)
    p = harmonics.packed_size(orders)
    u0 = harmonics.pack(U, orders).reshape(-1)
    Jfd = np.empty_like(J)
    for j in range(2 * p):
        h = 1e-6 * np.abs(u0).max()
        cols = [harmonics.pack(num.force_residual(harmonics.unpack((u0 + s * h * np.eye(2 * p)[j]).reshape(2, p), orders), FP), orders).reshape(-1) for s in (1, -1)]
        Jfd[:, j] = (cols[0] - cols[1]) / (2 * h)
    np.testing.assert_allclose(J, Jfd, rtol=1e-6, atol=1e-6 * np.abs(J).max())
    with pytest.raises(ValueError):
        num.force_residual_jacobian()


def test_newton_failure_falls_back_to_the_load_path():
    """A lightly damped Duffing oscillator forced at its linear resonance: the linear start is
    far too large and Newton needs many iterations; with fewer allowed, the solver follows the
    branch from zero load (pseudo-arclength in the load factor) and gets the same answer."""
    m, k = 1.0, (2 * np.pi * 10.0) ** 2
    c = 2 * 0.001 * np.sqrt(k * m)
    sub = Substructure(generic([[m]], [[c]], [[k]], ("x",)), ("x",))
    els = [CubicSpring(("x",), k3=1e6)]
    fv = np.array([50.0 + 0j])
    ref = NonlinearSubstructure(sub, els).solve(10.0, (1, 3), force_vector=fv)
    assert ref.iterations > 8
    short = NonlinearSubstructure(sub, els, max_iterations=8).solve(10.0, (1, 3), force_vector=fv)
    np.testing.assert_allclose(short.coefficients, ref.coefficients, rtol=1e-9, atol=1e-12 * np.abs(ref.coefficients).max())


def test_an_unreachable_branch_is_a_clear_error_and_the_force_form_still_answers():
    """sweeps/cubic-interface.toml's numerical side at 16 Hz under an interface force a first
    hybrid iteration measured on the twin (1.7 N at harmonic 3, where the root is above its
    first mode): the branch from zero load folds back at about half the load, so U_N(F_P) is
    not found from rest — a HarmonicBalanceError saying so. The force form needs no solve for
    elements at the interface: F_P*(U) is explicit and exact."""
    from hbtest.numerical import HarmonicBalanceError

    cfg = load_sweep(PAPER.parent / "cubic-interface.toml")
    ns = cfg.numerical.numerical_substructure()
    fv = cfg.excitation.force_vector(ns)
    FP = np.array([[0.1268 - 0.0259j, 1.6715 - 0.8788j], [0.00175 - 0.00025j, 0.0223 - 0.0085j]])
    with pytest.raises(HarmonicBalanceError, match="folds back after 0.5"):
        ns.interface_response(16.0, (1, 3), FP, fv)
    U = np.array([[1.75e-4 + 1e-6j, 5e-8j], [1.2e-3, 3e-7]])
    r = ns.interface_force(16.0, (1, 3), U, fv)
    assert r.iterations == 0
    back = ns.interface_response(16.0, (1, 3), r.displacement, fv)
    np.testing.assert_allclose(back.displacement, U, rtol=0, atol=1e-9 * np.abs(U).max())


def test_hybrid_sweep_with_a_nonlinear_numerical_side_matches_the_joined_structure(tmp_path):
    """End to end on the twin (ideal sensors): sweeps/cubic-interface.toml below its lower fold,
    where the response is unique. The iterative test with the nonlinear numerical side (force
    form, AFT) converges at every point, and its measured interface motion matches the harmonic
    balance of the joined nonlinear structure (an independent computation): the fundamental
    within 1 % and the third harmonic, which the cubic spring creates, within 5 % of its own size."""
    from hbtest.sweep.runner import run

    quiet = "rig_set=['virtual.noise.laser_rms_um=0.0', 'virtual.noise.gauge_rms_microstrain=0.0', 'virtual.mains.amplitude_microstrain=0.0']"
    over = ["sweep.continuation=stepped", "sweep.start_hz=18.4", "sweep.stop_hz=18.9", "sweep.points=3", quiet]  # the grid, not the file's arclength
    cfg = load_sweep(PAPER.parent / "cubic-interface.toml", over)
    ds = run(cfg, tmp_path / "c.zarr", plot=False, overrides=over).load()
    assert bool(ds.converged.all()), ds.message.values
    _, full_ns, fv_full = cubic_interface_reference()
    orders = cfg.sweep.harmonics
    for i, f in enumerate(ds.frequency.values):
        U_ref = full_ns.solve(float(f), orders, force_vector=fv_full).coefficients[:2]
        U = ds.interface_displacement.values[i]
        k1, k3 = list(orders).index(1), list(orders).index(3)
        assert abs(U[0, k1] - U_ref[0, k1]) < 0.01 * abs(U_ref[0, k1])
        assert abs(U[0, k3] - U_ref[0, k3]) < 0.05 * abs(U_ref[0, k3])
        assert abs(U_ref[0, k3]) > 1e-3 * abs(U_ref[0, k1])  # the third harmonic is really there
