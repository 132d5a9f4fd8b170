"""The time-integration engine of the twin: the modal state advanced sample by sample or in
closed form, and the converter that turns channel values into ADC volts.

Time: sample clock ``t_n = n / fs`` shared by DAC and ADC; the amplifier-input sample ``u[n]``
is held over ``[t_n + tau, t_{n+1} + tau)`` (``tau = (d + alpha) dt``, the actuation delay);
``y[n]`` is the channel at ``t_n`` (a skewed channel: at ``t_n - skew``, from the state ``q + 1``
samples earlier advanced by the partial step, :mod:`.model`; the engine keeps ``q + 1`` past
states and inputs for it, and a segment's closed form starts ``q + 1`` samples later). Per modal state (:mod:`.model`) the exact zero-order-hold
recurrence ``z[n+1] = a z[n] + c_now b u[n-d] + c_prev b u[n-d-1]``.

- A *segment* is a stretch where the input is a sum of complex exponentials in n,
  ``u[n] = Re sum_e X_e exp(rho_e (n - n_start))`` (constant demand; a raised-cosine ramp at
  constant frequency with a linear amplifier). There the recurrence is solved in closed form
  (periodic particular solution plus every mode's decaying transient, evaluated block-wise:
  cost independent of the number of modes; output terms dropped once below 1e-9 V).
- The first ``d + 1`` samples of a segment (delay line still holding the previous input) and
  inputs given sample by sample run the recurrence with :func:`scipy.signal.lfilter` per mode.
- With friction (or when asked, ``per_sample=True``) every sample runs explicitly: the
  regularised Coulomb force/torque ``-F_c tanh(v / v_s)`` computed from the current velocity
  and held over one sample.
- With nonlinear elements on the PS beam (``[[virtual.nonlinear]]``) the state is split:
  the actuation part ``z`` runs the exact recurrence above (one lfilter per mode, so every
  sample's state is known), the element part ``z_nl`` (driven by the element forces only) is
  stepped explicitly in ``substeps`` sub-steps per sample (:class:`NonlinearState`): the
  element DOFs' displacement and velocity at each sub-step are the actuation part's (exact,
  from the sample state and the held inputs over the partial step) plus ``z_nl``'s; the
  element force enters with first-order hold, its end value extrapolated from the last two
  (second order in the sub-step; the linear dynamics stay exact). The sum is the state.

Converter (:meth:`Engine.to_volts`): raw volts ``(physical - offset) / scale``; mains
interference at the gauge bridge (through the gauge filter), white sensor noise drawn from a
2^16-level table of Gaussian quantiles (unit variance, tails clipped at 4.3 sigma: i.i.d. and
five times cheaper than exact normal deviates), ADC quantisation and clipping. Every random
draw comes from one generator seeded by the rig's seed (mains phases first).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.signal
import scipy.special

from .model import Model, filter_response

__all__ = ["Engine", "NonlinearState", "MAX_CHUNK", "GAUSS_TABLE"]

MAX_CHUNK = 1 << 15  # samples simulated per vectorised block
# White sensor noise: i.i.d. draws from 2^16 equiprobable Gaussian quantiles (unit variance,
# tails clipped at 4.3 sigma) — five times cheaper than exact normal deviates, and the
# random-number cost dominates the simulation.
GAUSS_TABLE = scipy.special.ndtri((np.arange(1 << 16) + 0.5) / (1 << 16))
GAUSS_TABLE /= GAUSS_TABLE.std()
OUTPUT_FLOOR_V = 1e-9  # a modal transient's output term is dropped once below this on every channel
OUTPUT_BLOCK = 256  # samples per block of the closed-form output evaluation
FREE_BLOCK = 256  # sub-steps evaluated at once while every nonlinear element force is zero
SHORT_RUN = 64  # runs up to this many samples loop in Python instead of one lfilter per mode


class Engine:
    """The simulation state of one twin: modal state ``z``, delay line, friction force, sample
    count ``n`` (the rig clock is ``n / fs``), the current input segment, and the random
    generator of the converter.

    ``Engine(model, seed, noise=True, per_sample=False)``: ``noise=False`` gives ideal sensors
    (no white noise, mains or quantisation); ``per_sample=True`` runs the explicit per-sample
    path even without friction (slower; the same exact discrete solution).
    """

    def __init__(self, model: Model, seed: int, *, noise: bool = True, per_sample: bool = False):
        self._m = model
        self.spec = model.spec
        self.fs = model.fs
        self.dt = 1.0 / self.fs
        self.noise = bool(noise)
        self.per_sample = bool(per_sample) or self.spec.friction.active
        self._rng = np.random.default_rng(seed)
        nh = len(self.spec.noise.mains_harmonics)
        self._nc = model.scale.size
        self._mains_phase = self._rng.uniform(0.0, 2 * np.pi, size=(model.gauge_rows.size, nh))
        nz = self.spec.noise
        # the mains-frequency wander's starting phase (drawn only when it wanders)
        self._drift_phase = float(self._rng.uniform(0.0, 2 * np.pi)) if nz.mains_drift_hz > 0 else 0.0
        pairs = ((model.laser_rows, nz.laser_mix), (model.gauge_rows, nz.gauge_mix))
        self._mixes = [(rows, np.asarray(mix, float)) for rows, mix in pairs if mix is not None and rows.size]
        self._scale = model.scale
        self._offset = model.offset
        self._z = np.zeros(model.lam.size, complex)
        self._H = model.skew_history  # extra past samples the skewed channels look back
        self._hist = np.zeros((2, model.delay_samples + 1 + self._H))  # u[n-d-1-H .. n-1]
        self._zh = np.zeros((model.lam.size, self._H), complex)  # z[n-H .. n-1]
        self._force_prev = np.zeros(2)
        self._n = 0
        self._seg = None  # (X, rho, n_start): the input as a sum of exponentials
        self._mains_key = None
        self._mains_table = None
        # nonlinear elements on the PS beam: their part of the modal state (driven by the
        # element forces only; the actuation part stays in _z) and the last sub-step's force
        self._nl = model.nonlinear
        if self._nl is not None:
            self._nl_state = NonlinearState(model)

    @property
    def n(self) -> int:
        """Samples simulated since the rig was opened."""
        return self._n

    def end_segment(self) -> None:
        """The input is no longer a sum of exponentials (it is given sample by sample)."""
        self._seg = None

    def record(self, N: int) -> np.ndarray:
        """Advance ``N`` samples of the current segment and return the raw channel volts
        (n_ch, N) through the converter."""
        n0 = self._n
        q = self.quantum()
        y = self.advance(N, 1.0 / (self._scale * q))
        return self.to_volts(y, n0, q)

    def begin_segment(self, X: np.ndarray, rho: np.ndarray) -> None:
        """From the next sample on, the amplifier input is ``u[n] = Re sum_e X_e
        exp(rho_e (n - n_start))`` (X: (2, n_e), rho purely imaginary)."""
        self._seg = (np.asarray(X, complex), np.asarray(rho, complex), self._n)

    def segment_input(self, n_from: int, N: int) -> np.ndarray:
        X, rho, n_s = self._seg
        return np.real(X @ np.exp(np.multiply.outer(rho, n_from - n_s + np.arange(N))))

    def advance(self, N: int, gain: np.ndarray | None):
        """Advance ``N`` samples of the current segment; channels (4, N) in physical units
        times ``gain`` (None: no outputs). The first ``d + 1`` samples of a segment (delay line
        still holding the previous input) and the friction path use the sample recurrence;
        the rest is evaluated in closed form — the same exact discrete solution."""
        y = np.empty((self._nc, N)) if gain is not None else None
        done = 0
        d1 = self._m.delay_samples + 1 + self._H
        while done < N:
            since = self._n - self._seg[2]
            if self.per_sample or self._nl is not None or since < d1:
                m = min(MAX_CHUNK, N - done) if self.per_sample or self._nl is not None else min(d1 - since, N - done)
                part = self.run(self.segment_input(self._n, m), gain is not None)
                if gain is not None:
                    part *= gain[:, None]
            else:
                m = min(MAX_CHUNK, N - done)
                part = self._run_closed_form(m, gain)
            if gain is not None:
                y[:, done : done + m] = part
            done += m
        return y

    def run(self, u: np.ndarray, outputs: bool):
        """Advance by the amplifier-input samples ``u`` (2, N) [V] with the sample recurrence
        (one :func:`scipy.signal.lfilter` per modal state, or a loop over samples for short
        runs); physical channel values (n_ch, N) at the sample instants when ``outputs``."""
        m = self._m
        N = u.shape[1]
        d = m.delay_samples
        H = self._H
        ext = np.concatenate([self._hist, u], axis=1)  # index k <-> u[n0 + k - d - 1 - H]
        P_all = m.Bz2[:, 0:1] * ext[0, : H + N + 1] + m.Bz2[:, 1:2] * ext[1, : H + N + 1]
        P = P_all[:, H:]
        self._hist = ext[:, -(d + 1 + H) :].copy()
        self._n += N
        held = ext[:, H : H + N]  # input held just before t_n
        need_z = outputs or H > 0 or self._nl is not None
        if self.per_sample:
            beta = m.c_now[:, None] * P[:, 1:] + m.c_prev[:, None] * P[:, :-1]
            Z, y = self._run_per_sample(beta, held, need_z, outputs)
        else:
            a, cn, cp = m.a, m.c_now, m.c_prev
            Z = np.empty((m.lam.size, N), complex) if need_z else None
            z = self._z
            if N <= SHORT_RUN:
                for k in range(N):
                    if need_z:
                        Z[:, k] = z
                    z = a * z + cn * P[:, k + 1] + cp * P[:, k]
                self._z = z
            else:
                for i in range(m.lam.size):
                    # z[n+1] = a z[n] + c_now P[n+1] + c_prev P[n]
                    y, _ = scipy.signal.lfilter([cn[i], cp[i]], [1.0, -a[i]], P[i, 1:], zi=[cp[i] * P[i, 0] + a[i] * z[i]])
                    if need_z:
                        Z[i, 0] = z[i]
                        Z[i, 1:] = y[:-1]
                    z[i] = y[-1]
            y = np.real(np.einsum("cm,mn->cn", m.Cy, Z)) + np.einsum("cj,jn->cn", m.Dy[:, :2], held) if outputs else None
        if self._nl is not None:
            Znl, Fh = self._nl_state.advance(Z, P, ext[:, H : H + N + 1], outputs)
            if outputs:
                y += np.real(np.einsum("cm,mn->cn", m.Cy, Znl)) + np.einsum("cj,jn->cn", self._nl.Dy_nl, Fh)
        if H:
            Z_all = np.concatenate([self._zh, Z], axis=1)  # column H + k <-> z[n0 + k]
            self._zh = Z_all[:, -H:].copy()
            if outputs:
                self._skewed_samples(y, Z_all, P_all, ext, N)
        return y

    def _skewed_samples(self, y, Z_all, P_all, ext, N) -> None:
        """Overwrite the skewed channels' rows of ``y`` (n_ch, N) with their exact values at
        ``t_n - skew``: ``Re Cy (E z[m] + Wp b u[m-d-1] + Wn b u[m-d]) + Dy u_held`` with
        ``m = n - q - 1`` (:mod:`.model`); columns of ``Z_all``/``P_all``/``ext`` as in
        :meth:`run` (``H`` samples of history first)."""
        m = self._m
        H = self._H
        k = np.arange(N)
        for i, r in enumerate(m.skew_rows):
            q = int(m.skew_q[i])
            j = H + k - q - 1  # column of z[m] and of b u[m-d-1]
            state = m.skew_E[i][:, None] * Z_all[:, j] + m.skew_Wp[i][:, None] * P_all[:, j] + m.skew_Wn[i][:, None] * P_all[:, j + 1]
            held = ext[:, j + 1] if m.skew_late[i] else ext[:, j]
            y[r] = np.real(m.Cy[r] @ state) + m.Dy[r, :2] @ held

    def _run_closed_form(self, N: int, gain: np.ndarray | None):
        """Advance ``N`` samples of a segment whose delay line is already filled with it. Per
        mode the recurrence ``z[n+1] = a z[n] + c_now b u[n-d] + c_prev b u[n-d-1]`` with
        ``u[n] = Re sum_e X_e e^{rho_e n}`` has the particular solution ``z_p[n] = sum_e
        (G(X_e, rho_e) e^{rho_e n} + G(X_e*, rho_e*) e^{rho_e* n}) / 2``, ``G(X, r) = b X
        (c_now e^{-r d} + c_prev e^{-r (d+1)}) / (e^r - a)``; the rest decays as ``a^n``.
        Outputs are sums of exponentials evaluated block-wise (cost per sample independent of
        the number of modes); without outputs only the end state is computed."""
        m = self._m
        d = m.delay_samples
        X0, rho, n_s = self._seg
        j0 = self._n - n_s
        X = X0 * np.exp(rho * j0)[None, :]  # the expression relative to the first sample here
        a, cn, cp = m.a[:, None], m.c_now[:, None], m.c_prev[:, None]

        def G(Xe, r):
            return (m.Bz2 @ Xe) * (cn * np.exp(-r * d) + cp * np.exp(-r * (d + 1))) / (np.exp(r) - a)

        Gp = 0.5 * G(X, rho)
        Gm = 0.5 * G(np.conj(X), np.conj(rho))

        def zp(j):
            e = np.exp(rho * j)
            return Gp @ e + Gm @ np.conj(e)

        c = self._z - zp(0)
        y = None if gain is None else self._closed_form_outputs(N, gain, X, rho, Gp, Gm, c)
        with np.errstate(under="ignore"):
            self._z = zp(N) + c * np.exp(m.lam * self.dt * N)
        H = self._H
        self._hist = np.real(X @ np.exp(np.multiply.outer(rho, np.arange(N - d - 1 - H, N))))
        if H:
            with np.errstate(under="ignore"):
                self._zh = np.stack([zp(j) + c * np.exp(m.lam * self.dt * j) for j in range(N - H, N)], axis=1)
        self._n += N
        return y

    def _closed_form_outputs(self, N: int, gain: np.ndarray, X, rho, Gp, Gm, c) -> np.ndarray:
        """The channels' samples (n_channels, N) [V, times ``gain``] of a closed-form segment
        (:meth:`_run_closed_form`: input exponentials ``X``, ``rho``, particular-solution
        coefficients ``Gp``, ``Gm`` and the transient's modal amplitudes ``c``)."""
        m = self._m
        d = m.delay_samples
        # y = Re sum_e W_e exp(r_e j): forced part and modal transients, each transient
        # kept while above 1e-9 V on some channel (block granularity). With j = L b + i:
        # y_c[b, i] = sum_e Re(W_ce O_eb) Re(I_ei) - Im(W_ce O_eb) Im(I_ei),
        # O_eb = exp(r_e L b), I_ei = exp(r_e i): one small real matrix product.
        Y = np.einsum("cm,mk->ck", m.Cy, Gp) + np.conj(np.einsum("cm,mk->ck", m.Cy, Gm))
        Y += np.einsum("cj,jk->ck", m.Dy[:, :2], X) * np.exp(-rho * (d + 1))
        W = m.Cy * c[None, :]
        if m.skew_rows.size:
            self._skewed_closed_form(Y, W, X, rho, Gp, Gm, c)
        thr = OUTPUT_FLOOR_V * self._scale
        with np.errstate(under="ignore", divide="ignore"):
            ratio = np.max(np.abs(W) / thr[:, None], axis=0)
            sig = -np.real(m.lam) * self.dt
            n_act = np.where(ratio > 1, np.ceil(np.log(np.maximum(ratio, 1.0)) / sig), 0)
        act = np.flatnonzero(n_act > 0)
        rates = np.concatenate([rho, m.lam[act] * self.dt])
        coef = np.concatenate([Y, W[:, act]], axis=1) * gain[:, None]
        L = OUTPUT_BLOCK
        nB = -(-N // L)
        with np.errstate(under="ignore"):
            inner = np.exp(np.multiply.outer(rates, np.arange(L)))  # (n_e, L)
            outer = np.exp(np.multiply.outer(rates, L * np.arange(nB)))  # (n_e, nB)
        nblk = np.concatenate([np.full(rho.size, nB), np.minimum(nB, -(-n_act[act] // L)).astype(int)])
        outer[np.arange(nB)[None, :] >= nblk[:, None]] = 0.0
        nc = self._nc
        WO = coef[:, :, None] * outer[None, :, :]  # (n_ch, n_e, nB)
        A = np.concatenate([WO.real, -WO.imag], axis=1).transpose(0, 2, 1).reshape(nc * nB, 2 * rates.size)
        B = np.concatenate([inner.real, inner.imag], axis=0)
        y = (A @ B).reshape(nc, nB * L)[:, :N]
        return y

    def _skewed_closed_form(self, Y, W, X, rho, Gp, Gm, c) -> None:
        """The skewed channels' rows of the closed-form output (in place): the state at
        ``t_j - skew`` is ``E z[j-q-1] + Wp b u[j-q-d-2] + Wn b u[j-q-d-1]`` (:mod:`.model`)
        — for the forced part a new coefficient per input exponential, for a modal transient
        ``c e^{lambda (t_j - skew)}``."""
        m = self._m
        d = m.delay_samples
        BX, BXc = m.Bz2 @ X, m.Bz2 @ np.conj(X)
        rc = np.conj(rho)
        for i, r in enumerate(m.skew_rows):
            q = int(m.skew_q[i])
            E, Wp, Wn = m.skew_E[i][:, None], m.skew_Wp[i][:, None], m.skew_Wn[i][:, None]
            Hp = E * Gp * np.exp(-rho * (q + 1)) + 0.5 * (Wp * np.exp(-rho * (q + d + 2)) + Wn * np.exp(-rho * (q + d + 1))) * BX
            Hm = E * Gm * np.exp(-rc * (q + 1)) + 0.5 * (Wp * np.exp(-rc * (q + d + 2)) + Wn * np.exp(-rc * (q + d + 1))) * BXc
            lag = q + d + 1 if m.skew_late[i] else q + d + 2
            Y[r] = m.Cy[r] @ Hp + np.conj(m.Cy[r] @ Hm) + (m.Dy[r, :2] @ X) * np.exp(-rho * lag)
            with np.errstate(under="ignore"):
                W[r] = m.Cy[r] * c * np.exp(-m.lam * m.skew[r])

    def _run_per_sample(self, beta, held, need_z, outputs):
        """Slow path with friction: explicit regularised Coulomb force, held over one sample.
        Returns (states (n_s, N) when ``need_z``, channels (n_ch, N) when ``outputs``)."""
        m = self._m
        fr = self.spec.friction
        N = beta.shape[1]
        a, cf = m.a, m.c_force
        Bf = m.Bz[:, 2:4] * cf[:, None]
        Cv, Dv = m.Cv, m.Dv
        z = self._z.copy()
        fprev = self._force_prev.copy()
        Z = np.empty((m.lam.size, N), complex) if need_z else None
        Fh = np.empty((2, N)) if outputs else None
        tanh = math.tanh
        for k in range(N):
            if need_z:
                Z[:, k] = z
            if outputs:
                Fh[:, k] = fprev
            vel = np.real(Cv @ z) + Dv[:, :2] @ held[:, k] + Dv[:, 2:] @ fprev
            F0 = -fr.slider_force * tanh(vel[0] / fr.slider_velocity) if fr.slider_force > 0 else 0.0
            F1 = -fr.pin_torque * tanh(vel[1] / fr.pin_velocity) if fr.pin_torque > 0 else 0.0
            fprev = np.array([F0, F1])
            z = a * z + beta[:, k] + Bf @ fprev
        self._z[:] = z
        self._force_prev = fprev
        if not outputs:
            return Z, None
        return Z, np.real(np.einsum("cm,mn->cn", m.Cy, Z)) + np.einsum("cj,jn->cn", m.Dy[:, :2], held) + np.einsum("cj,jn->cn", m.Dy[:, 2:], Fh)

    def quantum(self) -> float:
        """Output unit of the simulation for an acquisition: one ADC step [V] (1 V when the
        converter is ideal or the sensors are ideal)."""
        nz = self.spec.noise
        if self.noise and nz.adc_bits > 0:
            return 2 * nz.adc_range_v / 2**nz.adc_bits
        return 1.0

    def to_volts(self, y: np.ndarray, n0: int, q: float) -> np.ndarray:
        """Channels in ADC steps (``physical / (scale q)``) -> volts: offset, mains, white
        noise, quantisation and clipping (in place)."""
        nz = self.spec.noise
        N = y.shape[1]
        if np.any(self._offset != 0):
            y -= (self._offset / (self._scale * q))[:, None]
        g = self._m.gauge_rows
        if self.noise and nz.mains_amplitude > 0:
            y[g] += self._mains(n0, N, 1.0 / (self._scale[g] * q))
        if self.noise and (nz.laser_rms > 0 or nz.gauge_rms > 0):
            rms = np.full(self._nc, nz.laser_rms)
            rms[g] = nz.gauge_rms
            sig = rms / (self._scale * q)
            noise = GAUSS_TABLE.take(self._rng.integers(0, GAUSS_TABLE.size, size=(self._nc, N), dtype=np.uint16))
            for rows, mix in self._mixes:  # correlated white noise: rms * mix @ unit deviates
                noise[rows] = mix @ noise[rows]
            noise *= sig[:, None]
            y += noise
        if self.noise and nz.adc_bits > 0:
            np.rint(y, out=y)
            lim = nz.adc_range_v / q
            np.clip(y, -lim, lim, out=y)
            y *= q
        return y

    def mains_phase(self, n: np.ndarray) -> np.ndarray:
        """The mains phase ``Phi`` [rad] at the samples ``n`` of the rig clock (fundamental;
        multiple h has ``h Phi``): ``2 pi mains_hz t`` plus the integral of the wander
        ``drift sin(2 pi t / period + psi)``, plus a random offset."""
        nz = self.spec.noise
        t = self.dt * np.asarray(n, dtype=float)
        offset = self._mains_phase.flat[0] if self._mains_phase.size else 0.0
        phi = (2 * np.pi * nz.mains_hz * self.dt * n) % (2 * np.pi) + offset
        if nz.mains_drift_hz > 0:
            T, psi = nz.mains_drift_period_s, self._drift_phase
            phi = phi + nz.mains_drift_hz * T * (np.cos(psi) - np.cos(2 * np.pi * t / T + psi))
        return phi

    def _mains_lines(self, gain) -> np.ndarray:
        """Complex amplitude (n_gauges, n_multiples) of each gauge's mains multiple, times
        ``gain`` per gauge: fixed pickup at the ADC (``mains_gain``, ``mains_phase``) or the
        legacy random phase per gauge through the gauge filter."""
        nz = self.spec.noise
        rows = self._m.gauge_rows
        rel = np.asarray(nz.mains_harmonics, float)
        if nz.mains_gain is not None:
            lines = np.asarray(nz.mains_gain) * np.exp(1j * np.asarray(nz.mains_phase))
            return gain[:, None] * nz.mains_amplitude * rel[None, :] * lines
        h = np.arange(1, rel.size + 1)
        filters = [self._m.channel_filters[r] for r in rows]
        g = np.array([[complex(filter_response(c, 2j * np.pi * k * nz.mains_hz)) for k in h] for c in filters])
        return gain[:, None] * nz.mains_amplitude * rel[None, :] * g * np.exp(1j * self._mains_phase)

    def _mains(self, n0: int, N: int, gain) -> np.ndarray:
        """Mains interference on the gauge channels (strain at the ADC, times ``gain`` per
        channel) for the samples n0 .. n0+N-1 of the rig clock."""
        nz = self.spec.noise
        gain = np.asarray(gain, dtype=float)
        lines = self._mains_lines(gain)
        fixed = nz.mains_gain is not None

        def signal(n):  # n: sample indices (int array)
            w = np.exp(1j * (self.mains_phase(n) if fixed else (2 * np.pi * nz.mains_hz * self.dt * n) % (2 * np.pi)))
            acc = np.zeros((lines.shape[0], n.size), complex)
            wh = np.ones(n.size, complex)
            for k in range(lines.shape[1]):
                wh = wh * w
                if np.any(lines[:, k] != 0):
                    acc += lines[:, k, None] * wh[None, :]
            return np.real(acc)

        period = self.fs / nz.mains_hz
        if nz.mains_drift_hz == 0 and abs(period - round(period)) < 1e-9 and abs(self.fs - round(self.fs)) < 1e-9:
            # an integer number of samples per mains period: a precomputed periodic table
            P = int(round(period))
            key = (P, tuple(gain))
            if self._mains_key != key or self._mains_table.shape[1] < N + P:
                reps = -(-(max(N, MAX_CHUNK) + P) // P)
                self._mains_table = np.tile(signal(np.arange(P)), reps)
                self._mains_key = key
            o = n0 % P
            return self._mains_table[:, o : o + N]
        return signal(n0 + np.arange(N))


class NonlinearState:
    """The element part of the twin's state with ``[[virtual.nonlinear]]`` elements (see the
    module docstring): ``x = (Re z_nl, Im z_nl, f)`` with ``f`` the element forces of the last
    sub-step (generalised forces applied to the element DOFs [N, N m], minus the restoring
    forces). One sub-step from ``x`` with the new force ``f'``:

        q  = q_act + Mq x                        (element DOFs' displacements, velocities)
        f' = -sum_e w_e g_e(w_e . q, w_e . q')
        z_nl <- a_h z_nl + c0 b f' + c1 b (f' - f)   (first-order hold, extrapolated slope)

    (the element forces' own feedthrough ``Dq f`` — the static correction of the truncated
    modes, ~6e-5 of the beam's static compliance at its tip — uses the previous sub-step's force).

    Free flight: while every element force is exactly zero (a contact off its stop) the
    element part only decays, ``z_nl(k) = a_h^k z_nl(0)``; blocks of ``FREE_BLOCK`` sub-steps
    are then evaluated at once up to the first sub-step with a force (the same numbers as
    stepping, to rounding)."""

    def __init__(self, model: Model):
        nl = model.nonlinear
        self.terms = nl
        n_s, n_f = model.lam.size, nl.dofs.size
        self.n_s, self.n_f = n_s, n_f
        self.x = np.zeros(2 * n_s + n_f)
        # q = Re(Cq z) + Dq f  ->  [Re Cq, -Im Cq, Dq] @ x
        self.Mq = np.hstack([nl.Cq.real, -nl.Cq.imag, nl.Dq])
        # z' = a_h z + (c0 + c1) b f' - c1 b f, as a real map of x and of f'
        A = np.zeros((2 * n_s, 2 * n_s + n_f))
        i = np.arange(n_s)
        A[i, i], A[i, n_s + i] = nl.a_h.real, -nl.a_h.imag
        A[n_s + i, i], A[n_s + i, n_s + i] = nl.a_h.imag, nl.a_h.real
        G1 = -nl.c1[:, None] * nl.Bz_nl
        A[:n_s, 2 * n_s :], A[n_s:, 2 * n_s :] = G1.real, G1.imag
        self.Ms = A
        G0 = (nl.c0 + nl.c1)[:, None] * nl.Bz_nl
        self.G0 = np.vstack([G0.real, G0.imag])
        # element coordinates: r_e = W q[:n_f], v_e = W q[n_f:]
        W = np.zeros((len(nl.elements), n_f))
        for k, (e, idx) in enumerate(zip(nl.elements, nl.index)):
            W[k, idx] += e.weights
        self.W = W
        self.WT = -W.T
        self.log_a = np.log(nl.a_h)

    def forces(self, Q: np.ndarray) -> np.ndarray:
        """Element-DOF forces (..., n_f) for element-DOF states ``Q`` (..., 2 n_f)."""
        nf = self.n_f
        R, V = Q[..., :nf] @ self.W.T, Q[..., nf:] @ self.W.T
        G = np.stack([e.force(R[..., k], V[..., k]) for k, e in enumerate(self.terms.elements)], axis=-1)
        return G @ self.WT.T

    def advance(self, Z: np.ndarray, P: np.ndarray, held: np.ndarray, outputs: bool):
        """Advance over the samples whose actuation states are ``Z`` (n_s, N); ``P`` (n_s,
        N + 1) the actuation inputs ``b u[n-d-1]`` (column n) and ``b u[n-d]`` (n + 1),
        ``held`` (2, N + 1) the held inputs likewise. Returns the element part of the state at
        each sample (n_s, N) complex and the force held from it (n_f, N), when ``outputs``."""
        nl = self.terms
        N = Z.shape[1]
        S = nl.substeps
        n_s, n_f = self.n_s, self.n_f
        QL = np.empty((N, S, 2 * n_f))
        for j in range(S):
            Zj = Z if j == 0 else nl.sub_E[j][:, None] * Z + nl.sub_Wp[j][:, None] * P[:, :-1] + nl.sub_Wn[j][:, None] * P[:, 1:]
            hj = held[:, 1:] if nl.sub_late[j] else held[:, :-1]
            QL[:, j, :] = (np.real(nl.Cq @ Zj) + nl.Dq_lin @ hj).T
        QL = QL.reshape(N * S, 2 * n_f)  # sub-step k = n S + j
        K = N * S
        X = np.empty((N, 2 * n_s + n_f)) if outputs else None
        x = self.x.copy()
        xs = np.empty_like(x)
        Mq, Ms, G0 = self.Mq, self.Ms, self.G0
        one = self.W.shape == (1, 1) and self.W[0, 0] == 1.0  # one grounded element
        force = nl.elements[0].force if one else None
        k = 0
        while k < K:
            if not x[2 * n_s :].any():
                # free flight: evaluate a block in closed form up to the first force
                B = min(FREE_BLOCK, K - k)
                z0 = x[:n_s] + 1j * x[n_s : 2 * n_s]
                zk = z0[:, None] * np.exp(np.multiply.outer(self.log_a, np.arange(B)))
                Qb = QL[k : k + B] + np.real(nl.Cq @ zk).T
                hit = np.flatnonzero(np.any(self.forces(Qb) != 0.0, axis=-1))
                m = int(hit[0]) if hit.size else B
                if outputs:
                    first = -(-k // S)
                    rows = np.arange(first * S, k + m, S) - k
                    X[first : first + rows.size, :n_s] = zk[:, rows].real.T
                    X[first : first + rows.size, n_s : 2 * n_s] = zk[:, rows].imag.T
                    X[first : first + rows.size, 2 * n_s :] = 0.0
                if m:
                    z = z0 * np.exp(self.log_a * m)
                    x[:n_s], x[n_s : 2 * n_s] = z.real, z.imag
                    k += m
                if not hit.size:
                    continue
            # one explicit sub-step
            if outputs and k % S == 0:
                X[k // S] = x
            q = QL[k] + Mq @ x
            f = -force(q[0], q[1]) if one else self.forces(q)
            xs[: 2 * n_s] = Ms @ x + G0 @ np.atleast_1d(f)
            xs[2 * n_s :] = f
            x, xs = xs, x
            k += 1
        self.x = x.copy()
        if not outputs:
            return None, None
        # the force held from t_n is the first sub-step's: recompute it from the stored x
        Fh = self.forces(QL[::S] + X @ Mq.T).T
        return X[:, :n_s].T + 1j * X[:, n_s : 2 * n_s].T, Fh
