"""The harmonic convention: exact fits, noise bounds, rotation, packing."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.method import harmonics as hm


def _multisine(rng, orders, n_ch=3):
    X = rng.normal(size=(n_ch, len(orders))) + 1j * rng.normal(size=(n_ch, len(orders)))
    X[:, np.asarray(orders) == 0] = X[:, np.asarray(orders) == 0].real
    return X


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    f=st.floats(5.0, 120.0),
    orders=st.lists(st.integers(0, 7), min_size=1, max_size=5, unique=True),
    n=st.integers(1, 12),
)
def test_fit_recovers_random_multisine_exactly(seed, f, orders, n):
    rng = np.random.default_rng(seed)
    fs = 5000.0
    X = _multisine(rng, orders)
    t0 = rng.uniform(0, 1)  # the record may start at any demand phase
    t = t0 + np.arange(int(np.ceil(n * fs / f)) + 1) / fs
    x = hm.reconstruct(t, X, f, orders)
    r = hm.fit(t, x, f, orders, n_periods=n)
    np.testing.assert_allclose(r.coefficients, X, atol=1e-9)
    if n > 1:
        assert np.all(r.variance < 1e-20)


def test_convention_matches_spec_definition():
    # x(t) = a0 + a1 cos + b1 sin  <=>  X1 = a1 - i b1
    f, fs = 10.0, 1000.0
    t = np.arange(400) / fs
    x = 0.5 + 2.0 * np.cos(2 * np.pi * f * t) + 3.0 * np.sin(2 * np.pi * f * t)
    r = hm.fit(t, x, f, [0, 1])
    np.testing.assert_allclose(r.coefficients, [0.5, 2.0 - 3.0j], atol=1e-12)
    np.testing.assert_allclose(hm.pack(r.coefficients, [0, 1]), [0.5, 2.0, 3.0], atol=1e-12)


@pytest.mark.parametrize("f,n", [(17.0, 30), (16.0, 30), (18.5, 10), (17.0, 3)])
def test_mains_interference_within_stated_bound(f, n):
    rng = np.random.default_rng(7)
    fs = 5000.0
    TN = 10.0  # interference 10x the signal
    t = np.arange(int(round(n * fs / f))) / fs
    X = np.array([1.0 - 0.5j])
    worst = 0.0
    for _ in range(20):
        ph = rng.uniform(0, 2 * np.pi)
        x = hm.reconstruct(t, X, f, [1]) + TN * np.cos(2 * np.pi * 50.0 * t + ph)
        r = hm.fit(t, x, f, [1], n_periods=n)
        err = r.coefficients[0] - X[0]
        bc, bs = hm.mains_error_bound(TN, 50.0, f, 1, n)
        assert abs(err.real) <= bc * 1.001
        assert abs(err.imag) <= bs * 1.001
        worst = max(worst, abs(err.real) / bc)
    assert worst > 0.05  # the bound is not vacuous


def test_periods_for_accuracy_meets_target():
    n = hm.periods_for_accuracy(10.0, 50.0, 17.0, 1, 0.01)
    bc, bs = hm.mains_error_bound(10.0, 50.0, 17.0, 1, n)
    assert max(bc, bs) <= 0.01
    bc, bs = hm.mains_error_bound(10.0, 50.0, 17.0, 1, n - 1)
    assert max(bc, bs) > 0.01
    with pytest.raises(ValueError):
        hm.periods_for_accuracy(1.0, 50.0, 25.0, 2, 0.01)


def test_rotation_undoes_a_known_filter_lag():
    import scipy.signal

    fs, f = 5000.0, 17.0
    orders = [1, 2, 3]
    b, a = scipy.signal.butter(2, 500.0, fs=fs)
    t = np.arange(int(60 * fs / f)) / fs
    X = np.array([1.0 + 0.3j, 0.2 - 0.1j, 0.05j])
    y = scipy.signal.lfilter(b, a, hm.reconstruct(t, X, f, orders))
    keep = t >= 30 / f  # filter transient gone
    r = hm.fit(t[keep], y[keep], f, orders)
    G = lambda fr: scipy.signal.freqz(b, a, worN=[fr], fs=fs)[1][0]  # noqa: E731
    lag = np.array([-np.angle(G(k * f)) for k in orders])
    assert lag[0] > 0.03  # a real lag, ~0.06 rad near 17 Hz for a 500 Hz filter
    corrected = hm.lag_correct(r.coefficients, f, orders, G)
    np.testing.assert_allclose(corrected, X, atol=1e-6)
    uncorrected_err = np.abs(r.coefficients - X).max()
    assert uncorrected_err > 100 * np.abs(corrected - X).max()
    # a pure rotation by +phi undoes a pure lag
    np.testing.assert_allclose(hm.rotate(X * np.exp(-1j * lag), orders, lag), X, atol=1e-14)


@given(
    orders=st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 1000),
    lead=st.integers(1, 3),
)
def test_pack_unpack_round_trip(orders, seed, lead):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(lead, len(orders))) + 1j * rng.normal(size=(lead, len(orders)))
    X[:, np.asarray(orders) == 0] = X[:, np.asarray(orders) == 0].real
    v = hm.pack(X, orders)
    assert v.shape == (lead, hm.packed_size(orders))
    np.testing.assert_array_equal(hm.unpack(v, orders), X)
    np.testing.assert_array_equal(hm.pack(hm.unpack(v, orders), orders), v)


def test_variance_estimates_white_noise_level():
    rng = np.random.default_rng(3)
    fs, f, n = 5000.0, 17.0, 40
    t = np.arange(int(round(n * fs / f))) / fs
    sigma = 0.1
    x = hm.reconstruct(t, np.array([1.0]), f, [1]) + sigma * rng.normal(size=t.size)
    r = hm.fit(t, x, f, [1])
    samples_per_period = fs / f
    # a_k and b_k of one period each have variance 2 sigma^2 / m: E|X - EX|^2 = 4 sigma^2 / m
    expected = 4 * sigma**2 / samples_per_period / r.per_period.shape[0]
    assert 0.6 < r.variance[0] / expected < 1.6


def test_usable_harmonics_and_mains_proximity():
    assert hm.max_usable_harmonic(17.0, 5000.0) == int(5000 / 2.56 / 17)
    assert hm.mains_proximity(16.7, [1, 3]) == [(3, 1)]
    assert hm.mains_proximity(17.5, [1]) == []
