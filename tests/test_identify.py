"""A rig's modes from its free decay (hbtest/rig/identify.py): the matrix pencil recovers the
poles of a known sum of damped exponentials (exact answers, seeded noise), leaves out what does
not decay (DC, a mains line), and on the twin with its modes hidden the free-decay experiment
finds the twin's slow modes."""

import numpy as np
import pytest
from served import QUIET

from hbtest.config import load_rig
from hbtest.rig.identify import free_decay_modes, pencil_modes
from hbtest.rig.virtual import VirtualRig

POLES = np.array([-3.6 + 17.5j, -13.8 + 64.0j, -5.9 + 260.8j])  # 2.85 Hz 0.2, 10.4 Hz 0.21, 41.5 Hz 0.023


def _decay(poles, dt, n, rng, noise):
    t = np.arange(n) * dt
    x = np.zeros((3, n))
    for i, lam in enumerate(poles):
        amp = rng.standard_normal(3) + 1j * rng.standard_normal(3)
        x += np.real(amp[:, None] * np.exp(lam * t))
    return x + noise * rng.standard_normal(x.shape)


def test_the_pencil_recovers_known_poles_exactly_without_noise():
    x = _decay(POLES, 0.002, 600, np.random.default_rng(1), 0.0)
    lam = pencil_modes(x, 0.002)
    np.testing.assert_allclose(np.sort_complex(lam), np.sort_complex(POLES), rtol=1e-8)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_the_pencil_leaves_out_dc_and_mains_and_keeps_the_decays_under_noise(seed):
    rng = np.random.default_rng(seed)
    dt, n = 0.002, 750
    t = np.arange(n) * dt
    x = _decay(POLES, dt, n, rng, 0.01) + 0.3 + 0.2 * np.cos(2 * np.pi * 50 * t + rng.uniform(0, 6))
    lam = pencil_modes(x, dt, min_decay_s=0.5)
    assert lam.size == POLES.size, lam
    np.testing.assert_allclose(np.abs(lam), np.abs(POLES), rtol=0.01)
    np.testing.assert_allclose(-lam.real / np.abs(lam), -POLES.real / np.abs(POLES), atol=0.01)


def test_the_free_decay_of_the_twin_gives_its_slow_modes():
    rig = VirtualRig(load_rig(QUIET), seed=5)
    exact = rig.modes()
    slow = exact[(np.abs(exact) < 2 * np.pi * 60) & (-exact.real < 1 / 0.05)]  # decaying slower than 50 ms
    lam = free_decay_modes(rig, 20.0, 0.5)
    for x in slow:
        near = lam[np.argmin(np.abs(lam - x))]
        assert abs(near - x) < 0.02 * abs(x), (x, lam)
