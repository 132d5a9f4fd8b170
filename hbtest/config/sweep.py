"""Sweep definition files (``sweeps/*.toml``) parsed into frozen dataclasses (SI inside;
a file field carries its unit in its name). See ``sweeps/paper-cantilever.toml`` for every key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..numerical.table import CONTACT_SIDES, NONLINEAR_DOFS, NonlinearElementSpec, read_element_tables
from .family import AUTO_THRESHOLD, MAX_AUTO_HARMONIC
from .files import load_toml
from .section import BeamSpec, Section, SourceFile, read_beam

__all__ = ["NumericalSpec", "NonlinearElementSpec", "read_nonlinear", "ExcitationSpec", "SweepSpec",
           "TargetSpec", "STRATEGIES", "TestSpec", "SolverSpec",
           "OutputSpec", "SweepConfig", "load_sweep", "NONLINEAR_DOFS", "CONTACT_SIDES"]



@dataclass(frozen=True)
class NumericalSpec:
    """The numerical substructure: a beam clamped (``root``) at x = 0 with the interface at
    its other end (x = length), and optional nonlinear elements (``nonlinear``; the beam then
    gets a node at every element position)."""

    kind: str
    beam: BeamSpec
    root: str
    nonlinear: tuple[NonlinearElementSpec, ...] = ()

    def substructure(self):
        """The linear substructure (the linear part when there are nonlinear elements)."""
        from ..method.substructure import Substructure

        extra = tuple(sorted({x for e in self.nonlinear for x in e.positions}))
        b = self.beam.build(left=self.root, right="free", extra_nodes=extra) if extra else self.beam.build(left=self.root, right="free")
        j = b.x_nodes.size - 1
        return Substructure(b, (f"u{j}", f"theta{j}"))

    @property
    def is_linear(self) -> bool:
        return not self.nonlinear

    def numerical_substructure(self):
        """The :class:`~hbtest.numerical.NumericalSubstructure`: a
        :class:`~hbtest.numerical.LinearSubstructure` without nonlinear elements, else a
        :class:`~hbtest.numerical.NonlinearSubstructure`."""
        from ..numerical import LinearSubstructure, NonlinearSubstructure

        sub = self.substructure()
        if not self.nonlinear:
            return LinearSubstructure(sub)
        return NonlinearSubstructure(sub, tuple(e.build(sub.structure) for e in self.nonlinear))


@dataclass(frozen=True)
class ExcitationSpec:
    """External force on the numerical substructure [N]: amplitude of the fundamental of a
    sinusoidal point force (cosine phase reference) at ``position`` [m from the root; default the
    interface node]."""

    amplitude: float
    position: float | None

    def force_vector(self, ns) -> np.ndarray:
        b = ns.structure
        x = b.x_nodes[-1] if self.position is None else self.position
        F = np.zeros(b.n_dof, dtype=complex)
        F[b.index(f"u{b.node_at(x)}")] = self.amplitude
        return F


#: ``sweep.strategy`` values (:mod:`hbtest.sweep.strategy`): the grid, or an adaptive design
STRATEGIES = ("grid", "modal", "curve")


@dataclass(frozen=True)
class TargetSpec:
    """``[sweep.target]``: what an adaptive ``sweep.strategy`` (:mod:`hbtest.sweep.strategy`) must
    reach. Relative half-widths of the ``confidence`` intervals of the target mode's natural
    frequency, damping ratio and modal constant (0: not asked; ``modal``), the largest relative
    half-width of the FRF curve's interval over the band (``curve``), the rig-time budget
    [forcing periods, all points] and the interface DOF whose FRF is used (``u`` | ``theta``)."""

    frequency_ci_rel: float = 1e-3
    damping_ci_rel: float = 0.05
    modal_constant_ci_rel: float = 0.0
    confidence: float = 0.95
    curve_accuracy: float = 0.01
    max_rig_periods: float = 1e5
    dof: str = "u"


@dataclass(frozen=True)
class SweepSpec:
    """The frequency list [Hz] and the harmonic orders solved."""

    start_hz: float
    stop_hz: float
    points: int
    direction: str
    harmonics: tuple[int, ...]
    on_trip: str = "stop"  # a trip of the rig's safety layer: stop the sweep, or go on
    on_overrange: str = "continue"  # a clipped sensor channel: go on to the next point, or stop
    # stepped-force family (hbtest.sweep.stepped): external force amplitudes [N], one leg each; () = one
    # leg at excitation.amplitude_n
    force_levels: tuple[float, ...] = ()
    # harmonics = "auto" (hbtest.sweep.stepped): ``harmonics`` then holds the candidates 1..max_harmonic
    # (and ``forced``), the test starts with [1] + forced and activates a candidate whose
    # excluded power fraction exceeds auto_threshold
    auto_harmonics: bool = False
    max_harmonic: int = MAX_AUTO_HARMONIC
    auto_threshold: float = AUTO_THRESHOLD
    forced_harmonics: tuple[int, ...] = ()
    # a forcing harmonic on a mains multiple: move the point off it (recorded), or keep it
    # where asked (hbtest.design.mains)
    mains_coincidence: str = "move"
    # how the response curve is traced (hbtest.sweep.arclength.CONTINUATIONS): the frequency grid
    # point after point, or pseudo-arclength through folds with these step limits (scaled
    # arclength, hbtest.sweep.arclength.ArclengthSettings) into at most max_points store slots
    continuation: str = "stepped"
    max_points: int = 400
    arclength_step: float = 0.01
    arclength_min_step: float = 1e-4
    arclength_max_step: float = 0.05
    # which frequencies are measured (hbtest.sweep.strategy): the grid, or adaptively to a target
    strategy: str = "grid"
    target: TargetSpec = TargetSpec()

    @property
    def grid_hz(self) -> np.ndarray:
        """Frequencies of one leg (one force level) in the order they are tested."""
        f = np.linspace(self.start_hz, self.stop_hz, self.points)
        if self.direction == "down":
            return f[::-1].copy()
        if self.direction == "up-down":
            return np.concatenate([f, f[-2::-1]])
        return f

    @property
    def frequencies_hz(self) -> np.ndarray:
        """Frequencies in the order they are tested (the grid once per force level)."""
        f = self.grid_hz
        return np.tile(f, len(self.force_levels)) if self.force_levels else f


@dataclass(frozen=True)
class TestSpec:
    """Tolerances of the test (SI: metres). ``residual``: ``displacement`` or ``force`` form;
    ``force_reconstruction``: see :data:`hbtest.method.sensors.FORCE_METHODS`; ``accuracy``: relative
    interface-displacement error the hbtest profile also requires (0 = off);
    ``rotation_length`` [m]: weight of rotations in the residual norm (|R_u|^2 + l^2 |R_th|^2);
    ``harmonic_tolerance``: the hbtest profile also requires each solved harmonic's residual
    below this fraction of that harmonic's own amplitude (or of the fundamental's, for a
    harmonic at its noise floor; see :class:`hbtest.point.profiles.HbtestProfile`); 0 = off."""

    target_mode: int
    tolerance: float
    transient_tolerance: float
    averaging_periods: int
    max_iterations: int
    residual: str
    force_reconstruction: str
    accuracy: float = 0.0
    rotation_length: float = 0.1
    harmonic_tolerance: float = 0.01


@dataclass(frozen=True)
class SolverSpec:
    """Solver profile and its safety knobs (SI: volts)."""

    profile: str
    max_step_v: float
    ramp_periods: float
    max_settle_windows: int
    fd_step_v: float = 0.1


@dataclass(frozen=True)
class OutputSpec:
    """Where a run goes: the store, the Bode plot, and whether the store keeps the raw sample
    records of each point's final window (``raw_records``; None: on for hardware rigs, off
    for the twin) for re-reduction with another calibration (``hbtest reduce``)."""

    store: Path
    plot: bool
    raw_records: bool | None = None


@dataclass(frozen=True)
class SweepConfig:
    """A parsed sweep definition file."""

    source: SourceFile
    name: str
    rig_path: Path
    rig_overrides: tuple[str, ...]
    numerical: NumericalSpec
    excitation: ExcitationSpec
    sweep: SweepSpec
    test: TestSpec
    solver: SolverSpec
    output: OutputSpec
    design_ps: BeamSpec | None = None


def load_sweep(path, overrides=(), text: str | None = None) -> SweepConfig:
    """Parse and validate a sweep file (see ``sweeps/paper-cantilever.toml`` for every key).
    ``text``: parse this instead of the file's current content (relative paths still resolve
    against the file's folder)."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    base = Path(src.path).resolve().parent
    name = top.string("name", Path(src.path).stem)
    rig_path = top.path("rig", base)
    assert rig_path is not None  # a required key: Section.path raised without it
    rig_overrides = top.value("rig_set", [])
    if not isinstance(rig_overrides, list) or not all(isinstance(x, str) and "=" in x for x in rig_overrides):
        raise top.error("rig_set", 'must be a list of "dotted.key=value" overrides of the rig file')
    sweep = _read_sweep(top.sub("sweep"))
    numerical = _read_numerical(top.sub("numerical"))
    excitation = _read_excitation(top.sub("excitation"), numerical)
    test = _read_test(top.sub("test"))
    solver = _read_solver(top.sub("solver", required=False))
    output = _read_output(top.sub("output", required=False), base, name)
    design_ps = None
    if top.has("design"):
        ds = top.sub("design")
        design_ps = read_beam(ds.sub("physical"), default_from=numerical.beam)
        ds.finish()
    top.finish()
    return SweepConfig(src, name, rig_path, tuple(rig_overrides), numerical, excitation, sweep, test, solver, output, design_ps)


#: the highest sweep frequency a file may ask for [Hz]
MAX_FREQUENCY_HZ = 1e5


def _read_sweep(sw: Section) -> SweepSpec:
    """``[sweep]``: the band, the grid or trace, harmonics, family and strategy."""
    # beyond 100 kHz no rig kind hbtest drives can force a point (and the design's models
    # lose every digit: a 1e308 Hz band made its least squares fail)
    start = sw.number("start_hz", positive=True, max=MAX_FREQUENCY_HZ)
    stop = sw.number("stop_hz", positive=True, max=MAX_FREQUENCY_HZ)
    if stop <= start:
        raise sw.error("stop_hz", f"sweep band is empty: stop_hz ({stop:g}) must exceed start_hz ({start:g})")
    from .family import read_family_fields

    harmonics, family = read_family_fields(sw)
    sweep = SweepSpec(
        start_hz=start,
        stop_hz=stop,
        points=sw.integer("points", min=2, max=100000),
        direction=sw.string("direction", "up", choices=("up", "down", "up-down")),
        harmonics=tuple(sorted(harmonics)),
        on_trip=sw.string("on_trip", "stop", choices=("stop", "continue")),
        on_overrange=sw.string("on_overrange", "continue", choices=("continue", "stop")),
        **family,
        mains_coincidence=sw.string("mains_coincidence", "move", choices=("move", "keep")),
        **_read_continuation(sw),
        **_read_strategy(sw),
    )
    _check_strategy(sw, sweep)
    if sweep.continuation == "arclength" and sweep.direction == "up-down":
        raise sw.error("direction", 'an arclength trace runs one way ("up" or "down"): it passes folds by itself')
    if sweep.continuation == "arclength" and sweep.force_levels:
        raise sw.error("force_levels", 'a force family runs on the stepped grid: trace each level by arclength in a sweep of its own')
    if sweep.continuation == "arclength" and sweep.auto_harmonics:
        raise sw.error("harmonics", 'an arclength trace balances a fixed set of harmonics: give them as a list, not "auto"')
    sw.finish()
    return sweep


def _read_numerical(nm: Section) -> NumericalSpec:
    """``[numerical]``: the numerical substructure."""
    kind = nm.string("kind", "beam", choices=("beam",))
    root = nm.string("root", "clamped", choices=("clamped", "pinned", "free", "sliding"))
    nm_beam = read_beam(nm)
    numerical = NumericalSpec(kind=kind, beam=nm_beam, root=root, nonlinear=read_nonlinear(nm, nm_beam, root))
    nm.finish()
    return numerical


def _read_excitation(ex: Section, numerical: NumericalSpec) -> ExcitationSpec:
    """``[excitation]``: the point force on the numerical beam."""
    ex.string("kind", "point_force", choices=("point_force",))
    pos = ex.number("position_mm", None, required=False, scale=1e-3, nonnegative=True)
    if pos is not None and pos > numerical.beam.length * (1 + 1e-12):
        raise ex.error("position_mm", f"{pos * 1e3:g} mm lies outside the numerical beam (0..{numerical.beam.length * 1e3:g} mm)")
    excitation = ExcitationSpec(amplitude=ex.number("amplitude_n", positive=True), position=pos)
    ex.finish()
    return excitation


def _read_test(ts: Section) -> TestSpec:
    """``[test]``: tolerances, averaging and the residual's form."""
    from ..method.sensors import FORCE_METHODS

    test = TestSpec(
        target_mode=ts.integer("target_mode", 1, min=1, max=100),
        tolerance=ts.number("tolerance_mm", 0.02, scale=1e-3, positive=True),
        transient_tolerance=ts.number("transient_tolerance_mm", 0.013, scale=1e-3, positive=True),
        averaging_periods=ts.integer("averaging_periods", 30, min=1, max=10000),
        max_iterations=ts.integer("max_iterations", 100, min=1, max=10000),
        residual=ts.string("residual", "displacement", choices=("displacement", "force")),
        force_reconstruction=ts.string("force_reconstruction", "segment", choices=FORCE_METHODS),
        accuracy=ts.number("accuracy", 0.0, nonnegative=True, max=0.5),
        rotation_length=ts.number("rotation_length_mm", 100.0, scale=1e-3, positive=True),
        harmonic_tolerance=ts.number("harmonic_tolerance", 0.01, nonnegative=True, max=1.0),
    )
    ts.finish()
    return test


def _read_solver(so: Section) -> SolverSpec:
    """``[solver]`` (optional): the profile and its step limits."""
    solver = SolverSpec(
        profile=so.string("profile", "hbtest", choices=tuple(_profile_names())),
        max_step_v=so.number("max_step_v", 0.5, positive=True),
        ramp_periods=so.number("ramp_periods", 2.0, nonnegative=True, max=1000),
        max_settle_windows=so.integer("max_settle_windows", 20, min=2, max=1000),
        fd_step_v=so.number("fd_step_v", 0.1, positive=True),
    )
    so.finish()
    return solver


def _read_output(out: Section, base: Path, name: str) -> OutputSpec:
    """``[output]`` (optional): the store path, the plot, raw records."""
    store = out.path("store", base, default=f"runs/{name}.zarr")
    assert store is not None  # it has a default
    raw = out.boolean("raw_records", False) if out.has("raw_records") else None
    output = OutputSpec(store=store.resolve(), plot=out.boolean("plot", True), raw_records=raw)
    out.finish()
    return output


def read_nonlinear(nm: Section, beam: BeamSpec, root: str) -> tuple[NonlinearElementSpec, ...]:
    """``[[numerical.nonlinear]]``: the element tables on the numerical beam (keys:
    :func:`hbtest.numerical.table.read_element_tables`, the one parser of this table shape)."""
    from ..method.structures import BOUNDARY_CONDITIONS

    fixed = frozenset(("u", "theta")[i] for i in BOUNDARY_CONDITIONS[root])
    return read_element_tables(nm.subs("nonlinear"), beam.length, root, fixed, "numerical beam")


def _read_continuation(sw: Section) -> dict:
    """``sweep.continuation`` and the arclength's keys (``max_points``, ``arclength_step``,
    ``arclength_min_step``, ``arclength_max_step``; defaults in
    :class:`hbtest.sweep.arclength.ArclengthSettings`)."""
    from ..sweep.arclength.settings import CONTINUATIONS, ArclengthSettings

    d = ArclengthSettings()
    out: dict[str, Any] = dict(
        continuation=sw.string("continuation", "stepped", choices=CONTINUATIONS),
        max_points=sw.integer("max_points", d.max_points, min=2, max=100000),
        arclength_step=sw.number("arclength_step", d.initial_step, positive=True),
        arclength_min_step=sw.number("arclength_min_step", d.min_step, positive=True),
        arclength_max_step=sw.number("arclength_max_step", d.max_step, positive=True),
    )
    if not out["arclength_min_step"] <= out["arclength_step"] <= out["arclength_max_step"]:
        raise sw.error("arclength_step", f"needs arclength_min_step <= arclength_step <= arclength_max_step, got"
                       f" {out['arclength_min_step']:g}, {out['arclength_step']:g}, {out['arclength_max_step']:g}")
    return out


def _read_strategy(sw: Section) -> dict:
    """``sweep.strategy`` and ``[sweep.target]`` (:class:`TargetSpec`; defaults there)."""
    strategy = sw.string("strategy", "grid", choices=STRATEGIES)
    d = TargetSpec()
    if not sw.has("target"):
        return dict(strategy=strategy, target=d)
    t = sw.sub("target")
    target = TargetSpec(
        frequency_ci_rel=t.number("frequency_ci_rel", d.frequency_ci_rel, nonnegative=True, max=1.0),
        damping_ci_rel=t.number("damping_ci_rel", d.damping_ci_rel, nonnegative=True, max=10.0),
        modal_constant_ci_rel=t.number("modal_constant_ci_rel", d.modal_constant_ci_rel, nonnegative=True, max=10.0),
        confidence=t.number("confidence", d.confidence, positive=True, max=0.9999),
        curve_accuracy=t.number("curve_accuracy", d.curve_accuracy, positive=True, max=1.0),
        max_rig_periods=t.number("max_rig_periods", d.max_rig_periods, positive=True),
        dof=t.string("dof", d.dof, choices=("u", "theta")),
    )
    if strategy == "modal" and not (target.frequency_ci_rel or target.damping_ci_rel or target.modal_constant_ci_rel):
        raise t.error("frequency_ci_rel", "the modal strategy needs at least one interval to reach (all three are 0)")
    t.finish()
    return dict(strategy=strategy, target=target)


def _check_strategy(sw: Section, sweep: SweepSpec) -> None:
    """An adaptive strategy runs one linear pass over the band: refuse what it cannot do."""
    if sweep.strategy == "grid":
        return
    if sweep.continuation == "arclength":
        raise sw.error("strategy", f'"{sweep.strategy}" chooses its own frequencies on the stepped path; an arclength'
                       ' trace follows the curve through folds: use continuation = "stepped" or strategy = "grid"')
    if sweep.force_levels:
        raise sw.error("strategy", f'"{sweep.strategy}" designs one response curve; a force family (force_levels)'
                       ' runs on the grid: use strategy = "grid", or one adaptive sweep per force level')
    if sweep.auto_harmonics or sweep.harmonics != (1,):
        raise sw.error("strategy", f'"{sweep.strategy}" fits a linear FRF at harmonic 1: needs harmonics = [1]')


def _profile_names():
    from ..point import PROFILES  # the registry of solver profiles (by name)

    return PROFILES
