"""Rig time per answer: the uniform sweep + ``hbtest modal`` against the adaptive strategies.

Per sweep file (``--sweeps``, default the paper cantilever and the bare beam) and seed
(``--seeds``, default 1-4), on the virtual twin, each run a real ``hbtest sweep`` into a store
under ``--out``:

1. **uniform**: the file's grid (31 points, 16-19 Hz), then ``hbtest modal``'s fit
   (:func:`hbtest.analysis.modal.fit_modes`, 95 % bootstrap intervals) of the mode nearest the design
   prediction: f_n, zeta, |A| with their intervals and relative half-widths, and the total
   rig periods (all points);
2. **modal**: ``sweep.strategy = "modal"`` asked for the uniform run's relative half-widths
   of f_n, zeta and |A| (so every interval it stops on is at least as tight), and the same
   fit of its store;
3. **curve**: ``sweep.strategy = "curve"`` with ``curve_accuracy`` (``--curve-accuracy``,
   default 1 %): its largest FRF error on a dense grid of the band (:data:`DENSE` points)
   against the twin's exact emulated FRF (the curve is the fitted model,
   :func:`hbtest.sweep.strategy.curve_model`), and periods. For the uniform sweep the largest
   error is over its measured points (what it reports), and that of the straight lines
   between them on the dense grid is printed beside it.

"inside" says whether the twin's exact f_n and zeta (the pole of the emulated structure,
:func:`hbtest.analysis.modal.model_mode`) lie in the 95 % intervals. Printed last:
``modal_rig_time_ratio=<uniform periods / modal periods>`` (mean over runs), after
``curve_rig_time_ratio`` and the curve's error.

Nothing here is tuned to the twin's noise: the targets come from the uniform run of the same
seed, the rig file is the sweep's (``--set`` passes overrides to every run, e.g.
``--set "rig_set=['virtual.mains.amplitude_microstrain=0.0']"``).

    python benchmarks/rig_time_modal.py [--sweeps FILE ...] [--seeds 1 2 3 4] [--out DIR] [--reuse none|uniform|all]
                                        [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_rig, load_sweep  # noqa: E402
from hbtest.analysis.modal import fit_modes, model_mode  # noqa: E402
from hbtest.rig import open_rig  # noqa: E402
from hbtest.sweep.strategy import curve_model, design_points, prediction  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

#: frequencies of the dense grid the curve error is measured on
DENSE = 601


def sweep(path, overrides, store, seed, reuse=False):
    """(cfg, dataset) of one run into ``store``; ``reuse``: a completed store already there is
    taken as it is (the uniform runs do not depend on the strategies' code)."""
    cfg = load_sweep(path, overrides)
    if reuse and Path(store).exists():
        from hbtest.store import open_run

        ds = open_run(store)
        same = int(ds.attrs.get("seed", -1)) == seed and list(ds.attrs.get("overrides", [])) == list(overrides)
        if ds.attrs.get("status") == "completed" and same:
            return cfg, ds
    return cfg, run(cfg, store, overwrite=True, seed=seed, plot=False, overrides=overrides)


def modal_result(ds, near_hz):
    """The uniform/modal summary of a store: the fitted mode nearest ``near_hz``, periods."""
    m = min(fit_modes(ds, "u"), key=lambda m: abs(m.frequency_hz - near_hz))
    exact = model_mode(ds, m.frequency_hz, m.damping_ratio)
    hw = np.array(
        [
            (ci[1] - ci[0]) / 2 / abs(x)
            for x, ci in (
                (m.frequency_hz, m.frequency_hz_ci),
                (m.damping_ratio, m.damping_ratio_ci),
                (m.modal_constant, m.modal_constant_ci),
            )
        ]
    )
    inside = (
        m.frequency_hz_ci[0] <= exact["frequency_hz"] <= m.frequency_hz_ci[1]
        and m.damping_ratio_ci[0] <= exact["damping_ratio"] <= m.damping_ratio_ci[1]
    )
    # |A| of the exact FRF at the same points by the same fit (the modal constant depends on the
    # remainder the fit takes out: compared like for like)
    ref = ds.assign(interface_displacement=ds["reference_interface_displacement"])
    exact["modal_constant"] = min(fit_modes(ref, "u"), key=lambda r: abs(r.frequency_hz - near_hz)).modal_constant
    exact["inside_A"] = bool(m.modal_constant_ci[0] <= exact["modal_constant"] <= m.modal_constant_ci[1])
    return {
        "mode": m,
        "hw": hw,
        "exact": exact,
        "inside": inside,
        "periods": float(np.nansum(ds["rig_periods"].values)),
        "points": int(np.asarray(ds["done"].values).sum()),
    }


def line(name, r):
    m, e = r["mode"], r["exact"]
    return (
        f"  {name:8s} points={r['points']:3d} periods={r['periods']:8.0f}  f_n={m.frequency_hz:.5f} Hz "
        f"[{m.frequency_hz_ci[0]:.5f}, {m.frequency_hz_ci[1]:.5f}]  zeta={m.damping_ratio:.5f} "
        f"[{m.damping_ratio_ci[0]:.5f}, {m.damping_ratio_ci[1]:.5f}]  |A|={m.modal_constant:.4g} "
        f"[{m.modal_constant_ci[0]:.4g}, {m.modal_constant_ci[1]:.4g}] {m.modal_constant_units}  "
        f"half-widths {r['hw'][0]:.2e}/{r['hw'][1]:.2e}/{r['hw'][2]:.2e}  "
        f"exact f_n={e['frequency_hz']:.5f} zeta={e['damping_ratio']:.5f} |A|={e['modal_constant']:.4g}"
        f"  inside={r['inside']} (f_n and zeta; |A|: {e['inside_A']})"
    )


def exact_frf(cfg, f):
    """The twin's exact emulated FRF u/F at ``f`` (harmonic 1) [m/N]."""
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=0)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    try:
        return (
            np.array([rig.emulated_interface_response(ns, F, float(x), [1])[0, 0] for x in f])
            / cfg.excitation.amplitude
        )
    finally:
        rig.close()


def curve_errors(cfg, ds_uniform, ds_curve):
    """(uniform: largest error at its points, of straight lines between them; curve: largest error of its model) [1]."""
    grid = np.linspace(cfg.sweep.start_hz, cfg.sweep.stop_hz, DENSE)
    H_ex = exact_frf(cfg, grid)
    pu = design_points(ds_uniform)
    ok = pu.good
    ref = np.asarray(ds_uniform["reference_interface_displacement"].sel(dof="u", harmonic=1).values)[
        np.asarray(ds_uniform["done"].values)
    ]
    ext = np.asarray(ds_uniform["external_force"].sel(harmonic=1).values)[np.asarray(ds_uniform["done"].values)]
    at_points = float(np.max(np.abs(pu.H[ok] - ref[ok] / ext[ok]) / np.abs(ref[ok] / ext[ok])))
    o = np.argsort(pu.f[ok])
    lin = np.interp(grid, pu.f[ok][o], pu.H[ok][o].real) + 1j * np.interp(grid, pu.f[ok][o], pu.H[ok][o].imag)
    lines = float(np.max(np.abs(lin - H_ex) / np.abs(H_ex)))
    model = curve_model(design_points(ds_curve), prediction(cfg))
    return at_points, lines, float(np.max(np.abs(model.value(grid) - H_ex) / np.abs(H_ex)))


def one(path, seed, out, extra, accuracy, reuse="none"):
    name = Path(path).stem
    cfg, ds_u = sweep(path, extra, out / f"{name}-s{seed}-uniform.zarr", seed, reuse in ("uniform", "all"))
    fn_p, _ = prediction(cfg)
    u = modal_result(ds_u, fn_p)
    ask = [
        "sweep.strategy=modal",
        "sweep.max_points=60",
        f"sweep.target.frequency_ci_rel={u['hw'][0]:.6g}",
        f"sweep.target.damping_ci_rel={u['hw'][1]:.6g}",
        f"sweep.target.modal_constant_ci_rel={u['hw'][2]:.6g}",
    ]
    _, ds_m = sweep(path, extra + ask, out / f"{name}-s{seed}-modal.zarr", seed, reuse == "all")
    m = modal_result(ds_m, fn_p)
    _, ds_c = sweep(
        path,
        extra + ["sweep.strategy=curve", "sweep.max_points=60", f"sweep.target.curve_accuracy={accuracy:g}"],
        out / f"{name}-s{seed}-curve.zarr",
        seed,
        reuse == "all",
    )
    c_periods = float(np.nansum(ds_c["rig_periods"].values))
    at_points, lines, curve_err = curve_errors(cfg, ds_u, ds_c)
    tighter = bool(np.all(m["hw"] <= u["hw"] * (1 + 1e-9)))
    print(f"{name} seed {seed}")
    print(line("uniform", u))
    print(line("modal", m))
    print(f"  ratio={u['periods'] / m['periods']:.2f}  modal intervals at least as tight: {tighter}")
    print(
        f"  curve    points={int(np.asarray(ds_c['done'].values).sum()):3d} periods={c_periods:8.0f}"
        f"  max FRF error {curve_err:.2%}"
        f" (dense grid)  | uniform: {at_points:.2%} at its points, {lines:.2%} between them (straight lines)"
        f"  curve/uniform periods={c_periods / u['periods']:.2f}",
        flush=True,
    )
    return u, m, tighter, c_periods, curve_err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sweeps", nargs="+", default=[str(ROOT / "sweeps/paper-cantilever.toml"), str(ROOT / "sweeps/bare-beam.toml")]
    )
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4])
    ap.add_argument("--out", default=None, help="folder for the stores (default: a temporary folder)")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="override for every run (repeatable)")
    ap.add_argument("--curve-accuracy", type=float, default=0.01)
    ap.add_argument(
        "--reuse", choices=("none", "uniform", "all"), default="none",
        help="take completed stores already in --out (same seed and overrides) as they are: the uniform ones, or all",
    )
    a = ap.parse_args(argv)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="rig_time_modal-"))
    rows = [one(p, s, out, list(a.extra), a.curve_accuracy, a.reuse) for p in a.sweeps for s in a.seeds]
    ratios = [u["periods"] / m["periods"] for u, m, *_ in rows]
    inside = sum(int(m["inside"]) for _, m, *_ in rows)
    print(
        f"modal: exact f_n and zeta inside the 95 % intervals in {inside} of {len(rows)} runs;"
        f" intervals at least as tight as uniform in {sum(int(t) for _, _, t, *_ in rows)} of {len(rows)}"
    )
    print(f"modal: exact |A| (same fit of the exact FRF) inside in {sum(int(m['exact']['inside_A']) for _, m, *_ in rows)}"
          f" of {len(rows)} runs; uniform: f_n and zeta inside in {sum(int(u['inside']) for u, *_ in rows)} of {len(rows)}")
    print(f"curve_max_frf_error={max(r[4] for r in rows):.4f}")
    print(f"curve_rig_time_ratio={np.mean([u['periods'] / c for u, _, _, c, _ in rows]):.2f}")
    print(f"modal_rig_time_ratio={np.mean(ratios):.2f}")


if __name__ == "__main__":
    main()
