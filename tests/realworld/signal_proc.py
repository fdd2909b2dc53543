"""Signal processing: FIR and IIR filters, DFTs, smoothing and envelope detection."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "signal processing"


@numba.njit
def fir_output_energy(h, x):
    """Direct-form FIR filter y[n] = sum_k h[k] x[n-k]; energy of the output."""
    n = x.shape[0]
    m = h.shape[0]
    y = np.zeros(n)
    for i in range(n):
        acc = 0.0
        for k in range(m):
            if i - k < 0:
                break
            acc += h[k] * x[i - k]
        y[i] = acc
    return np.sum(y * y)


@numba.njit
def biquad_response(b0, b1, b2, a1, a2, x):
    """Transposed direct-form II biquad section; mean square of the filtered signal."""
    z1 = 0.0
    z2 = 0.0
    out = 0.0
    for i in range(x.shape[0]):
        y = b0 * x[i] + z1
        z1 = b1 * x[i] - a1 * y + z2
        z2 = b2 * x[i] - a2 * y
        out += y * y
    return out / x.shape[0]


@numba.njit
def dft_band_power(x, f_lo, f_hi):
    """Power of a DFT in a band, with a smooth (logistic) band edge: sum |X_k|^2 w_k."""
    n = x.shape[0]
    p = 0.0
    for k in range(n // 2 + 1):
        re = 0.0
        im = 0.0
        for j in range(n):
            ang = 2.0 * math.pi * k * j / n
            re += x[j] * math.cos(ang)
            im -= x[j] * math.sin(ang)
        f = k / n
        w = 1.0 / (1.0 + math.exp(-50.0 * (f - f_lo))) / (1.0 + math.exp(50.0 * (f - f_hi)))
        p += w * (re * re + im * im)
    return p


def smooth_convolve_loss(x, width, target):
    """Gaussian smoothing with np.convolve (mode 'same'), compared to a target."""
    k = np.arange(-3.0, 4.0)
    kernel = np.exp(-0.5 * (k / width) ** 2)
    kernel = kernel / kernel.sum()
    y = np.convolve(x, kernel, "same")
    return np.sum((y - target) ** 2)


def padded_moving_average(x, m):
    """Moving average with edge padding by np.hstack and a running sum by np.cumsum."""
    pad = np.hstack((np.full(m, x[0]), x, np.full(m, x[-1])))
    c = np.cumsum(pad)
    avg = (c[2 * m:] - c[:-2 * m]) / (2 * m)
    return np.sum(avg ** 2)


@numba.njit
def envelope_follower(x, attack, release):
    """Peak envelope follower with separate attack and release coefficients."""
    env = 0.0
    total = 0.0
    for i in range(x.shape[0]):
        a = abs(x[i])
        if a > env:
            env = attack * env + (1.0 - attack) * a
        else:
            env = release * env + (1.0 - release) * a
        total += env
    return total


def filterbank_energies(x, centers, width):
    """Energies of Gaussian-windowed DFT bands collected in a list, then combined (log-energies)."""
    n = x.shape[0]
    freqs = np.arange(n // 2 + 1) / n
    spec = np.zeros(n // 2 + 1)
    for k in range(n // 2 + 1):
        re = np.sum(x * np.cos(2.0 * np.pi * k * np.arange(n) / n))
        im = np.sum(x * np.sin(2.0 * np.pi * k * np.arange(n) / n))
        spec[k] = re * re + im * im
    energies = []
    for c in centers:
        w = np.exp(-0.5 * ((freqs - c) / width) ** 2)
        energies.append(np.log(np.sum(w * spec)))
    return sum(energies)


def _rng():
    return np.random.default_rng(53)


def _fir_args():
    r = _rng()
    return (np.array([0.25, 0.5, 0.25, -0.1]), r.normal(size=16))


def _biquad_args():
    return (0.2, 0.4, 0.2, -0.5, 0.3, _rng().normal(size=20))


def _dft_args():
    t = np.arange(16)
    return (np.sin(2 * np.pi * 3 * t / 16) + 0.3 * _rng().normal(size=16), 0.1, 0.3)


def _conv_args():
    r = _rng()
    return (r.normal(size=12), 1.5, r.normal(size=12) * 0.3)


def _pma_args():
    return (_rng().normal(size=12), 2)


def _env_args():
    return (np.sin(np.linspace(0.1, 9.0, 20)) * np.linspace(1.0, 0.3, 20), 0.6, 0.9)


CASES = [
    Case(fir_output_energy, _fir_args, (0, 1)),
    Case(biquad_response, _biquad_args, (0, 1, 2, 3, 4, 5)),
    Case(dft_band_power, _dft_args, (0, 1, 2)),
    Case(smooth_convolve_loss, _conv_args, (0, 1, 2)),
    Case(padded_moving_average, _pma_args, 0),
    Case(envelope_follower, _env_args, (0, 1, 2)),
    Case(filterbank_energies, lambda: (_rng().normal(size=16), np.array([0.1, 0.2, 0.35]), 0.05),
         (0, 1, 2)),
]
