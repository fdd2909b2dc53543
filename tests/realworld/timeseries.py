"""Time series: GARCH and ARIMA likelihoods, exponential smoothing, Kalman filtering."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "time series"


@numba.njit
def garch11_nll(omega, alpha, beta, r):
    """Gaussian negative log-likelihood of a GARCH(1,1) model."""
    n = r.shape[0]
    h = np.var(r)
    nll = 0.0
    for t in range(n):
        if t > 0:
            h = omega + alpha * r[t - 1] ** 2 + beta * h
        nll += 0.5 * (math.log(h) + r[t] ** 2 / h)
    return nll


@numba.njit
def ar_css(phi, c, x):
    """Conditional sum of squares of an AR(p) model, p = len(phi)."""
    p = phi.shape[0]
    sse = 0.0
    for t in range(p, x.shape[0]):
        pred = c
        for k in range(p):
            pred += phi[k] * x[t - k - 1]
        e = x[t] - pred
        sse += e * e
    return sse


@numba.njit
def holt_winters_sse(alpha, beta, gamma, y, m):
    """Additive Holt-Winters with season length m; one-step-ahead squared error."""
    level = np.mean(y[:m])
    trend = (np.mean(y[m:2 * m]) - level) / m
    season = y[:m] - level
    sse = 0.0
    for t in range(m, y.shape[0]):
        s = season[t % m]
        fc = level + trend + s
        err = y[t] - fc
        sse += err * err
        new_level = alpha * (y[t] - s) + (1.0 - alpha) * (level + trend)
        trend = beta * (new_level - level) + (1.0 - beta) * trend
        season[t % m] = gamma * (y[t] - new_level) + (1.0 - gamma) * s
        level = new_level
    return sse


@numba.njit
def local_level_loglik(log_q, log_r, y):
    """Kalman filter log-likelihood of the local level model (random walk plus noise)."""
    q = math.exp(log_q)
    r = math.exp(log_r)
    a = y[0]
    p = 1e3
    ll = 0.0
    for t in range(1, y.shape[0]):
        p = p + q
        f = p + r
        v = y[t] - a
        ll -= 0.5 * (math.log(2.0 * math.pi * f) + v * v / f)
        k = p / f
        a = a + k * v
        p = p * (1.0 - k)
    return ll


def arima110_css(phi, y):
    """ARIMA(1,1,0): differences the series with np.diff, then an AR(1) sum of squares."""
    dy = np.diff(y)
    e = dy[1:] - phi * dy[:-1]
    return np.sum(e ** 2)


def rolling_zscore_loss(y, window):
    """Rolling z-score with a moving window's std (sliced views in a loop)."""
    n = y.shape[0]
    out = 0.0
    for t in range(window, n):
        w = y[t - window:t]
        out += ((y[t] - w.mean()) / w.std()) ** 2
    return out


def ses_sse(y, alpha=0.3, init=None):
    """Simple exponential smoothing; ``init=None`` means start from the first observation."""
    if init is None:
        level = y[0]
    else:
        level = init
    sse = 0.0
    for t in range(1, y.shape[0]):
        e = y[t] - level
        sse += e * e
        level += alpha * e
    return sse


def _rng():
    return np.random.default_rng(17)


def _garch_args():
    r = _rng()
    return (0.05, 0.1, 0.85, r.normal(0.0, 1.0, 25))


def _ar_args():
    r = _rng()
    x = np.zeros(30)
    for t in range(2, 30):
        x[t] = 0.5 * x[t - 1] - 0.2 * x[t - 2] + r.normal()
    return (np.array([0.45, -0.15]), 0.05, x)


def _hw_args():
    t = np.arange(20.0)
    y = 10.0 + 0.3 * t + 2.0 * np.sin(2.0 * np.pi * t / 4.0) + _rng().normal(0.0, 0.3, 20)
    return (0.4, 0.1, 0.3, y, 4)


def _ll_args():
    return (math.log(0.5), math.log(1.5), np.cumsum(_rng().normal(0.0, 1.0, 25)))


def _arima_args():
    return (0.4, np.cumsum(_rng().normal(0.1, 1.0, 20)))


def _rz_args():
    return (np.cumsum(_rng().normal(0.0, 1.0, 14)), 5)


CASES = [
    Case(garch11_nll, _garch_args, (0, 1, 2, 3)),
    Case(ar_css, _ar_args, (0, 1, 2)),
    Case(holt_winters_sse, _hw_args, (0, 1, 2, 3)),
    Case(local_level_loglik, _ll_args, (0, 1, 2)),
    Case(arima110_css, _arima_args, (0, 1)),
    Case(rolling_zscore_loss, _rz_args, 0),
    Case(ses_sse, lambda: (np.cumsum(_rng().normal(0.0, 1.0, 15)), 0.45), (0, 1)),
]
