"""Broyden updates and step rules: secant conditions, convergence, limits (properties)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.method import harmonics, broyden


@given(seed=st.integers(0, 10_000), n=st.integers(1, 8))
def test_updates_satisfy_their_secant_conditions(seed, n):
    rng = np.random.default_rng(seed)
    H = rng.normal(size=(n, n))
    dV, dR = rng.normal(size=n), rng.normal(size=n)
    np.testing.assert_allclose(broyden.bad_broyden_inverse_update(H, dV, dR) @ dR, dV, atol=1e-9)
    J = rng.normal(size=(2 * n, n))
    dY = rng.normal(size=2 * n)
    Jn = broyden.good_broyden_update(J, dV, dY)
    np.testing.assert_allclose(Jn @ dV, dY, atol=1e-9)
    # least change: the update is rank one along dV
    assert np.linalg.matrix_rank(Jn - J, tol=1e-9) <= 1


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_good_broyden_solves_a_linear_rig_from_a_rough_jacobian(seed):
    # a linear "rig" y = A v + b: Newton with a Broyden-updated Jacobian converges
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(4, 4)) + 4 * np.eye(4)
    b = rng.normal(size=4)
    J = A + 0.3 * rng.normal(size=(4, 4))  # 30 % wrong start
    v = np.zeros(4)
    r = A @ v + b
    for _ in range(40):
        if np.linalg.norm(r) < 1e-10:
            break
        dv = broyden.newton_step(J, r)
        v2 = v + dv
        r2 = A @ v2 + b
        J = broyden.good_broyden_update(J, v2 - v, r2 - r)
        v, r = v2, r2
    assert np.linalg.norm(r) < 1e-8


@given(seed=st.integers(0, 1000), cap=st.floats(1e-3, 10))
def test_limit_step_keeps_direction_and_cap(seed, cap):
    dv = np.random.default_rng(seed).normal(size=6) * 5
    out = broyden.limit_step(dv, cap)
    assert np.max(np.abs(out)) <= cap * (1 + 1e-12)
    assert np.allclose(out / np.linalg.norm(out), dv / np.linalg.norm(dv))


def test_clip_voltage_bounds_each_actuator_peak():
    V = np.array([3.0, 4.0, 0.1, 0.1])  # actuator 0 peaks at 5 V... limit 4 V; actuator 1 small
    out, clipped = broyden.clip_voltage(V, 2, 4.0, [1])
    assert clipped and np.allclose(out[2:], V[2:])
    t = np.linspace(0, 1, 10001)
    x = harmonics.reconstruct(t, harmonics.unpack(out[:2], [1]), 1.0, [1])
    assert np.abs(x).max() == pytest.approx(4.0, rel=1e-6)  # the true peak, not a looser bound
    same, clipped = broyden.clip_voltage(V, 2, 5.0, [1])
    assert not clipped and np.array_equal(same, V)


def test_informative_rejects_changes_within_noise():
    assert not broyden.informative(np.array([1e-6, -1e-6]), 1e-6)
    assert broyden.informative(np.array([1e-4, 0.0]), 1e-6)


@given(seed=st.integers(0, 1000), orders=st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True))
def test_real_operator_matches_complex_arithmetic(seed, orders):
    rng = np.random.default_rng(seed)
    o = np.array(orders)
    A = rng.normal(size=(o.size, 2, 3)) + 1j * rng.normal(size=(o.size, 2, 3))
    A[o == 0] = A[o == 0].real  # static operators are real
    X = rng.normal(size=(3, o.size)) + 1j * rng.normal(size=(3, o.size))
    X[:, o == 0] = X[:, o == 0].real
    Y = np.einsum("kmn,nk->mk", A, X)
    R = harmonics.real_operator(A, o)
    np.testing.assert_allclose(R @ harmonics.pack(X, o).reshape(-1), harmonics.pack(Y, o).reshape(-1), atol=1e-12)
