"""Geophysics: travel times, potential-field forward models, wave propagation, magnetotellurics."""
import cmath
import math

import numba
import numpy as np

from ._case import Case

FIELD = "geophysics"

G_NEWTON = 6.674e-11


@numba.njit
def layered_traveltime(v, h, p):
    """Travel time and offset of a ray with ray parameter p through flat layers; returns T - p X."""
    t = 0.0
    x = 0.0
    for i in range(v.shape[0]):
        s = p * v[i]
        if s >= 1.0:
            return t - p * x    # the ray turns above this layer
        c = math.sqrt(1.0 - s * s)
        t += 2.0 * h[i] / (v[i] * c)
        x += 2.0 * h[i] * s / c
    return t - p * x


@numba.njit
def gravity_misfit(depth, mass, xs, gobs):
    """Vertical gravity of buried point masses at surface stations; squared misfit in mGal."""
    misfit = 0.0
    for i in range(xs.shape[0]):
        g = 0.0
        for j in range(depth.shape[0]):
            dx = xs[i] - 100.0 * j
            r2 = dx * dx + depth[j] * depth[j]
            g += G_NEWTON * mass[j] * depth[j] / r2 ** 1.5
        d = g * 1e5 - gobs[i]
        misfit += d * d
    return misfit


@numba.njit
def wave1d_receiver_energy(c, src, dt, dx, nt, rec):
    """Second-order finite-difference 1-D acoustic wave; energy recorded at one receiver."""
    n = c.shape[0]
    u_prev = np.zeros(n)
    u = np.zeros(n)
    u_next = np.zeros(n)
    energy = 0.0
    for it in range(nt):
        for i in range(1, n - 1):
            lap = u[i + 1] - 2.0 * u[i] + u[i - 1]
            u_next[i] = 2.0 * u[i] - u_prev[i] + (c[i] * dt / dx) ** 2 * lap
        u_next[n // 4] += src[it] * dt * dt
        u_prev[:] = u
        u[:] = u_next
        energy += u[rec] ** 2
    return energy


@numba.njit
def mt1d_rho_app(rho, h, period):
    """Apparent resistivity of a layered earth by the impedance recursion (complex arithmetic)."""
    mu0 = 4e-7 * math.pi
    omega = 2.0 * math.pi / period
    n = rho.shape[0]
    k = cmath.sqrt(-1j * omega * mu0 / rho[n - 1])
    Z = 1j * omega * mu0 / k
    for j in range(n - 2, -1, -1):
        k = cmath.sqrt(-1j * omega * mu0 / rho[j])
        z0 = 1j * omega * mu0 / k
        t = cmath.tanh(k * h[j])
        Z = z0 * (Z + z0 * t) / (z0 + Z * t)
    return abs(Z) ** 2 / (omega * mu0)


def moveout_semblance(v, t0, offsets, gather, dt):
    """NMO stack power along a hyperbola, with linear interpolation by np.interp."""
    times = np.arange(gather.shape[0]) * dt
    stack = 0.0
    for j in range(offsets.shape[0]):
        tx = np.sqrt(t0 * t0 + (offsets[j] / v) ** 2)
        stack += np.interp(tx, times, gather[:, j])
    return stack * stack


# a reference model tabulated at module level, as codes keep such tables
REF_DEPTH = np.array([0.0, 10.0, 35.0, 80.0, 150.0])
REF_VS = np.array([3.2, 3.6, 4.4, 4.5, 4.6])


def vs_anomaly_misfit(dvs, obs_time):
    """Vertical shear-wave travel time through the reference model perturbed by dvs (%)."""
    t = 0.0
    for i in range(REF_DEPTH.shape[0] - 1):
        v = REF_VS[i] * (1.0 + 0.01 * dvs[i])
        t += (REF_DEPTH[i + 1] - REF_DEPTH[i]) / v
    return (t - obs_time) ** 2


def _rng():
    return np.random.default_rng(31)


def _tt_args():
    # km/s, km and s/km, the units refraction codes use
    return (np.array([1.5, 2.2, 3.1, 4.0]), np.array([0.2, 0.35, 0.5, 0.8]), 0.21)


def _grav_args():
    r = _rng()
    xs = np.linspace(-100.0, 400.0, 8)
    return (np.array([120.0, 180.0, 90.0]), np.array([2e9, 5e9, 1e9]), xs, r.uniform(0.0, 2.0, 8))


def _wave_args():
    t = np.arange(30) * 0.001
    src = (1.0 - 2.0 * (math.pi * 25.0 * (t - 0.04)) ** 2) * np.exp(-(math.pi * 25.0 * (t - 0.04)) ** 2)
    c = np.full(24, 1800.0) + np.linspace(0.0, 400.0, 24)
    return (c, src * 1e4, 0.001, 5.0, 30, 17)


def _mt_args():
    return (np.array([100.0, 10.0, 300.0]), np.array([500.0, 1500.0, 0.0]), 10.0)


def _nmo_args():
    r = _rng()
    return (2000.0, 0.2, np.array([100.0, 300.0, 500.0, 700.0]), r.normal(size=(80, 4)), 0.004)


CASES = [
    Case(layered_traveltime, _tt_args, (0, 1, 2)),
    Case(gravity_misfit, _grav_args, (0, 1, 3)),
    Case(wave1d_receiver_energy, _wave_args, (0, 1)),
    Case(mt1d_rho_app, _mt_args, (0, 1)),
    Case(moveout_semblance, _nmo_args, (0, 1, 3)),
    Case(vs_anomaly_misfit, lambda: (np.array([1.0, -2.0, 0.5, 3.0]), 38.0), (0, 1)),
]
