"""Astronomy: radial velocities, blackbody fits, rotation curves, transits, periodograms."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "astronomy"

H_PLANCK = 6.62607015e-34
C_LIGHT = 2.99792458e8
K_BOLTZ = 1.380649e-23


@numba.njit
def kepler_E(M, e):
    """Eccentric anomaly by Newton's method on Kepler's equation."""
    E = M if e < 0.8 else math.pi
    for it in range(50):
        f = E - e * math.sin(E) - M
        dE = f / (1.0 - e * math.cos(E))
        E -= dE
        if abs(dE) < 1e-15:
            break
    return E


@numba.njit
def rv_chi2(P, K, e, omega, t, rv, err):
    """Chi-square of a Keplerian radial-velocity curve."""
    chi2 = 0.0
    for i in range(t.shape[0]):
        M = 2.0 * math.pi * (t[i] / P - math.floor(t[i] / P))
        E = kepler_E(M, e)
        nu = 2.0 * math.atan2(math.sqrt(1.0 + e) * math.sin(0.5 * E),
                              math.sqrt(1.0 - e) * math.cos(0.5 * E))
        model = K * (math.cos(nu + omega) + e * math.cos(omega))
        chi2 += ((rv[i] - model) / err[i]) ** 2
    return chi2


@numba.njit
def blackbody_chi2(T, log_scale, wav, flux):
    """Planck spectrum (vectorised with np.expm1) fitted to a flux spectrum."""
    B = 2.0 * H_PLANCK * C_LIGHT ** 2 / wav ** 5 / np.expm1(H_PLANCK * C_LIGHT / (wav * K_BOLTZ * T))
    model = math.exp(log_scale) * B
    return np.sum(((flux - model) / (0.05 * flux)) ** 2)


@numba.njit
def nfw_rotation_loss(log_rho0, log_rs, r, vobs):
    """Rotation curve of an NFW halo against observed velocities."""
    rho0 = 10.0 ** log_rho0
    rs = 10.0 ** log_rs
    loss = 0.0
    for i in range(r.shape[0]):
        x = r[i] / rs
        m = 4.0 * math.pi * rho0 * rs ** 3 * (math.log(1.0 + x) - x / (1.0 + x))
        v = math.sqrt(4.30091e-6 * m / r[i])
        loss += (v - vobs[i]) ** 2
    return loss


@numba.njit
def transit_small_planet(k, t0, a, u1, u2, t):
    """Small-planet transit with quadratic limb darkening on a circular orbit; summed flux."""
    total = 0.0
    norm = 1.0 - u1 / 3.0 - u2 / 6.0
    for i in range(t.shape[0]):
        z = a * abs(math.sin(2.0 * math.pi * (t[i] - t0) / 3.5))
        if z < 1.0:
            mu = math.sqrt(1.0 - z * z)
            I = 1.0 - u1 * (1.0 - mu) - u2 * (1.0 - mu) ** 2
            total += 1.0 - k * k * I / norm
        else:
            total += 1.0
    return total


def lomb_scargle_power(freq, t, y):
    """Classical Lomb-Scargle periodogram at one frequency (np.arctan2 for the time offset)."""
    w = 2.0 * np.pi * freq
    y = y - y.mean()
    tau = np.arctan2(np.sum(np.sin(2.0 * w * t)), np.sum(np.cos(2.0 * w * t))) / (2.0 * w)
    c = np.cos(w * (t - tau))
    s = np.sin(w * (t - tau))
    return 0.5 * (np.sum(y * c) ** 2 / np.sum(c * c) + np.sum(y * s) ** 2 / np.sum(s * s)) / np.var(y)


def zero_point_fit(zp, instr_mag, ref_mag, verbose=False):
    """Photometric zero point: robust chi-square, printing diagnostics when asked."""
    resid = instr_mag + zp - ref_mag
    chi2 = 0.0
    for i in range(resid.shape[0]):
        chi2 += math.log(1.0 + resid[i] ** 2 / 0.01)
    if verbose:
        print("zero point", zp, "chi2", chi2)
    return chi2


def _rng():
    return np.random.default_rng(41)


def _rv_args():
    r = _rng()
    t = np.sort(r.uniform(0.0, 40.0, 10))
    return (11.3, 35.0, 0.3, 0.9, t, r.normal(0.0, 30.0, 10), np.full(10, 3.0))


def _bb_args():
    wav = np.linspace(400e-9, 1000e-9, 8)
    x = H_PLANCK * C_LIGHT / (wav * K_BOLTZ * 5800.0)
    flux = math.exp(-40.0) * 2.0 * H_PLANCK * C_LIGHT ** 2 / wav ** 5 / np.expm1(x)
    return (5600.0, -40.2, wav, flux * np.linspace(0.95, 1.05, 8))


def _nfw_args():
    r = np.linspace(2.0, 30.0, 8)
    return (7.0, 1.1, r, 150.0 + 3.0 * r)


def _transit_args():
    return (0.1, 0.043, 8.0, 0.4, 0.25, np.linspace(-0.1, 0.2, 15))


def _ls_args():
    r = _rng()
    t = np.sort(r.uniform(0.0, 10.0, 16))
    return (0.37, t, np.sin(2.0 * np.pi * 0.4 * t) + r.normal(0.0, 0.3, 16))


CASES = [
    Case(rv_chi2, _rv_args, (0, 1, 2, 3, 5)),
    Case(blackbody_chi2, _bb_args, (0, 1)),
    Case(nfw_rotation_loss, _nfw_args, (0, 1, 2)),
    Case(transit_small_planet, _transit_args, (0, 1, 2, 3, 4)),
    Case(lomb_scargle_power, _ls_args, (0, 2)),
    Case(zero_point_fit, lambda: (25.1, np.array([-10.2, -11.5, -9.8, -12.1]),
                                  np.array([15.0, 13.4, 15.2, 13.1]), True), (0, 1, 2)),
]
