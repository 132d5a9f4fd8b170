"""Pooling evaluations that scatter by more than their reads (``pool_affine(between=True)``)
and the uncertainty of a solution estimated from them (``sandwich_variance``), against exact
answers: a known between-evaluation variance is recovered; without one the pool is the plain
pool bit for bit; the sandwich variance of a function of the estimate matches its spread over
seeded repeats, whether the scatter is independent per output or along the rig's own response
(an offset of the demand), where the stated variances propagated in full overstate it."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.method.estimators import pool_affine, sandwich_variance, solution_map


def _design(rng, J: int, m: int):
    """Demands around a solution, as an iteration makes them: a few far, most close."""
    scale = np.geomspace(1.0, 0.01, J)[:, None]
    return scale * rng.normal(size=(J, m))


def test_a_known_between_evaluation_variance_is_recovered():
    rng = np.random.default_rng(11)
    J, m = 400, 2
    A, b = rng.normal(size=(3, m)), rng.normal(size=3)
    V = _design(rng, J, m)
    var = 1e-4 * rng.uniform(0.5, 2.0, size=(J, 3))  # stated read variances, heteroscedastic
    tau = np.array([0.0, 0.05, 0.2])
    Y = V @ A.T + b + np.sqrt(var) * rng.normal(size=(J, 3)) + tau * rng.normal(size=(J, 3))
    out = pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True)
    assert out.used.size == J  # nothing lost as an outlier
    assert out.between[0] == 0.0  # the reads explain row 0: no between variance
    # moment estimate of tau^2 from J - 3 degrees of freedom: relative sd ~ sqrt(2 / J) = 7 %
    np.testing.assert_allclose(out.between[1:], tau[1:] ** 2, rtol=0.3)
    assert np.all(np.abs(out.value - b) < 4 * np.sqrt(out.variance))
    plain = pool_affine(V, Y, var, np.zeros(m), A, 0.3)  # without: the scatter looks like outliers
    assert plain.used.size < J


def test_a_nonlinear_misfit_is_no_scatter_unless_the_rig_is_said_affine():
    """A rig quadratic in the demand, evaluated at distances from 1 down to 0.01, read noise
    only: its misfit is at the far evaluations, the nearer half fits, so no between-evaluation
    variance is estimated and the far ones go as outliers (the estimate at the demand stays
    within its stated noise of the truth); told the rig is affine (a linear test), the pool
    takes that misfit for scatter."""
    rng = np.random.default_rng(5)
    J, m = 30, 2
    A, b = rng.normal(size=(3, m)), rng.normal(size=3)
    V = _design(rng, J, m)
    var = 1e-6 * np.ones((J, 3))
    q = np.array([0.0, 0.5, 0.5])  # rows 1 and 2 quadratic, 0.5 at |V| = 1
    Y = V @ A.T + b + np.sum(V**2, axis=1, keepdims=True) * q + np.sqrt(var) * rng.normal(size=(J, 3))
    local = pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True, affine=False)
    assert np.all(local.between == 0.0)
    assert local.used.size < J and np.min(np.linalg.norm(V[local.used], axis=1)) < 0.02
    assert np.all(np.abs(local.value - b) < 4 * np.sqrt(local.variance))
    told = pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True, affine=True)
    assert told.between[0] == 0.0 and np.all(told.between[1:] > 0)


def test_a_scatter_beyond_the_limit_is_not_averaged():
    """``max_between``: the same scattering evaluations as above are averaged while the
    scatter's size (2-norm over the outputs of its s.d., here sqrt(0.05^2 + 0.2^2) = 0.206) is
    within the limit, and taken for a model failing (no between variance, outliers dropped, the
    plain pool) beyond it."""
    rng = np.random.default_rng(11)
    J, m = 400, 2
    A, b = rng.normal(size=(3, m)), rng.normal(size=3)
    V = _design(rng, J, m)
    var = 1e-4 * rng.uniform(0.5, 2.0, size=(J, 3))
    tau = np.array([0.0, 0.05, 0.2])
    Y = V @ A.T + b + np.sqrt(var) * rng.normal(size=(J, 3)) + tau * rng.normal(size=(J, 3))
    within = pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True, max_between=0.3)
    assert within.used.size == J and np.all(within.between[1:] > 0)
    np.testing.assert_array_equal(within.value, pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True).value)
    beyond = pool_affine(V, Y, var, np.zeros(m), A, 0.3, between=True, max_between=0.15)
    plain = pool_affine(V, Y, var, np.zeros(m), A, 0.3)
    assert np.all(beyond.between == 0.0) and beyond.used.size < J
    np.testing.assert_array_equal(beyond.value, plain.value)
    np.testing.assert_array_equal(beyond.used, plain.used)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), J=st.integers(2, 30))
def test_without_scatter_the_pool_is_the_plain_pool_bit_for_bit(seed, J):
    rng = np.random.default_rng(seed)
    m, n = 4, 8
    A, b = rng.normal(size=(n, m)), rng.normal(size=n)
    V = _design(rng, J, m)
    var = 1e-6 * rng.uniform(0.5, 2.0, size=(J, n))
    Y = V @ A.T + b + np.sqrt(var) * rng.normal(size=(J, n))
    prior = A * (1 + 0.3 * rng.normal(size=A.shape))
    with_ = pool_affine(V, Y, var, V[-1], prior, 0.3 * np.abs(A).max(), between=True)
    plain = pool_affine(V, Y, var, V[-1], prior, 0.3 * np.abs(A).max())
    assert np.all(with_.between == 0.0)
    for name in ("value", "variance", "jacobian", "used", "chi2"):
        assert np.array_equal(getattr(with_, name), getattr(plain, name)), name


def _spread_and_sandwich(along_response: bool, repeats: int = 400):
    """Over seeded repeats of one point (m = 4 demands, n = 8 outputs, J = 12 evaluations
    scattering 10x their reads): the mean squared error of ``M value`` (M the solution map of
    a residual ``P Y``), the mean sandwich estimate of it, and the mean of the stated
    variances propagated in full through ``M``."""
    rng = np.random.default_rng(5 if along_response else 6)
    J, m, n, k = 12, 4, 8, 4
    A, b = rng.normal(size=(n, m)), rng.normal(size=n)
    P = rng.normal(size=(m, n))
    M = solution_map(A, P, k)
    V = _design(rng, J, m)
    read = 1e-4
    err2, sandwich, stated = [], [], []
    for _ in range(repeats):
        if along_response:  # an offset of what the actuators deliver: moves Y along A
            shift = (0.1 / np.sqrt(np.mean(A**2) * m)) * rng.normal(size=(J, m)) @ A.T
        else:  # every output on its own
            shift = 0.1 * rng.normal(size=(J, n))
        Y = V @ A.T + b + shift + np.sqrt(read) * rng.normal(size=(J, n))
        out = pool_affine(V, Y, np.full((J, n), read), np.zeros(m), A + 0.05 * rng.normal(size=A.shape), 0.3,
                          between=True)
        assert np.any(out.between > 0)
        err2.append(np.sum((M @ (out.value - b)) ** 2))
        sandwich.append(sandwich_variance(M, out))
        stated.append(np.trace(M @ np.diag(out.variance) @ M.T))
    return np.mean(err2), np.mean(sandwich), np.mean(stated)


def test_the_sandwich_variance_is_the_spread_of_a_scatter_on_every_output():
    err2, sandwich, stated = _spread_and_sandwich(along_response=False)
    # 400 repeats: the mean squared error itself is known to ~7 %
    assert 0.75 < sandwich / err2 < 1.25, (sandwich, err2)
    assert 0.6 < stated / err2 < 1.6, (stated, err2)  # the stated variances are right here too


def test_the_sandwich_variance_sees_that_a_scatter_along_the_response_leaves_the_solution():
    err2, sandwich, stated = _spread_and_sandwich(along_response=True)
    assert 0.75 < sandwich / err2 < 1.25, (sandwich, err2)
    assert stated > 5 * err2, (stated, err2)  # in full, the scatter is counted where it does not act
