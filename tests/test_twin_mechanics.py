"""``hbtest twin``'s clamp fit (:mod:`hbtest.twin.mechanics`): exact answers.

A hidden rig (``tests/twin_hidden.py``: clamp mass, support and rotational stiffness drawn by a
seeded generator) has exact modes (the eigenvalues of its assembled structure); fitted from the
reference twin's mechanics to those modes' frequencies, the clamp is the hidden one. The same
eigenvalues are the twin's own simulated modes (``VirtualRig.modes``), so the fit's model is
the one the twin runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from twin_hidden import draw, rig_text

from hbtest.config import load_rig
from hbtest.rig.virtual import VirtualRig
from hbtest.twin.mechanics import fit_clamp, structure_modes

REFERENCE = "instruments/virtual-cantilever.toml"


def test_structure_modes_are_the_twins_simulated_modes():
    cfg = load_rig(REFERENCE)
    lam = structure_modes(cfg.spec, cfg.sensors)[:5]
    sim = VirtualRig(cfg).modes()[:5]
    np.testing.assert_allclose(np.abs(lam), np.abs(sim), rtol=1e-6)
    np.testing.assert_allclose(lam.real / np.abs(lam), sim.real / np.abs(sim), rtol=1e-5)


def test_the_clamp_fitted_to_a_hidden_rigs_modes_is_the_hidden_clamp(tmp_path):
    seed = 2
    hidden = tmp_path / "hidden.toml"
    hidden.write_text(rig_text(seed))
    h, ref = load_rig(hidden), load_rig(REFERENCE)
    lam = structure_modes(h.spec, h.sensors)[:5]
    values, quantities, detail = fit_clamp(ref.spec, ref.sensors, lam, np.abs(lam) / (2 * np.pi) * 1e-4, np.full(lam.size, 1e-4))
    v = draw(seed)
    truth = {"mass_kg": v["clamp_mass_kg"], "inertia_kg_m2": 1.5e-3, "support_stiffness_n_per_m": v["support_stiffness_n_per_m"],
             "rotational_stiffness_nm_per_rad": v["rotational_stiffness_nm_per_rad"]}
    assert values == pytest.approx(truth, rel=5e-3)
    assert detail["reduced_chi_square"] < 1e-2
    for q in quantities:  # the stated uncertainties cover the truth
        assert abs(q.value - truth[q.key.split(".")[-1]]) <= 3 * q.u
    assert values["support_stiffness_n_per_m"] != pytest.approx(ref.spec.clamp.support_stiffness, rel=0.1)  # it moved
