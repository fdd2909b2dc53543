"""Statistics: likelihoods, density estimates and robust losses, as numba users write them."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "statistics"

LOG_2PI = math.log(2.0 * math.pi)


@numba.njit
def gaussian_loglik(x, mu, sigma):
    """Log-likelihood of iid normal data, summed in a loop."""
    n = x.shape[0]
    acc = 0.0
    for i in range(n):
        z = (x[i] - mu) / sigma
        acc += -0.5 * z * z
    return acc - n * math.log(sigma) - 0.5 * n * LOG_2PI


@numba.njit
def kde_log_density(points, data, bandwidth):
    """Mean log density of ``points`` under a Gaussian kernel density estimate of ``data``."""
    n = data.shape[0]
    norm = 1.0 / (n * bandwidth * math.sqrt(2.0 * math.pi))
    total = 0.0
    for i in range(points.shape[0]):
        u = (points[i] - data) / bandwidth
        dens = norm * np.sum(np.exp(-0.5 * u * u))
        total += math.log(dens)
    return total / points.shape[0]


@numba.njit
def huber_regression_loss(beta, X, y, delta):
    """Huber loss of a linear model: quadratic near zero, linear in the tails."""
    r = y - X @ beta
    loss = 0.0
    for i in range(r.shape[0]):
        a = abs(r[i])
        if a <= delta:
            loss += 0.5 * r[i] * r[i]
        else:
            loss += delta * (a - 0.5 * delta)
    return loss / r.shape[0]


@numba.njit
def student_t_nll(x, loc, scale, nu):
    """Negative log-likelihood of a Student-t location/scale model (math.lgamma constants)."""
    n = x.shape[0]
    c = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * math.log(nu * math.pi)
    s = 0.0
    for i in range(n):
        z = (x[i] - loc) / scale
        s += 0.5 * (nu + 1.0) * math.log1p(z * z / nu)
    return s + n * math.log(scale) - n * c


@numba.njit
def standardized_moment_loss(x, shift):
    """Skewness of shifted data, written with the array methods x.mean() and x.std()."""
    y = x + shift * x * x
    m = y.mean()
    s = y.std()
    return np.sum(((y - m) / s) ** 3) / y.shape[0]


def weighted_mean_var(x, w):
    """Weighted mean and variance with np.average, as in a summary-statistics module."""
    mu = np.average(x, weights=w)
    var = np.average((x - mu) ** 2, weights=w)
    return mu + var


def winsorized_mean(x, lower=0.1):
    """Winsorized mean: clip both tails at the order statistics (np.sort, a default argument)."""
    xs = np.sort(x)
    n = xs.shape[0]
    k = int(lower * n)
    lo = xs[k]
    hi = xs[n - 1 - k]
    return np.mean(np.clip(x, lo, hi))


def _rng():
    return np.random.default_rng(11)


def _normal_data():
    r = _rng()
    return (r.normal(1.0, 2.0, 12), 0.7, 1.9)


def _kde_args():
    r = _rng()
    return (r.normal(0.0, 1.0, 5), r.normal(0.0, 1.0, 9), 0.6)


def _huber_args():
    r = _rng()
    X = r.normal(size=(10, 3))
    beta = np.array([0.5, -1.0, 2.0])
    y = X @ beta + r.standard_t(3.0, 10)
    return (np.array([0.4, -0.8, 1.7]), X, y, 1.0)


def _t_args():
    r = _rng()
    return (r.standard_t(4.0, 10), 0.3, 1.2, 4.5)


def _moment_args():
    return (_rng().gamma(2.0, 1.0, 10), 0.1)


def _wmv_args():
    r = _rng()
    return (r.normal(size=8), r.uniform(0.5, 2.0, 8))


CASES = [
    Case(gaussian_loglik, _normal_data, (0, 1, 2)),
    Case(kde_log_density, _kde_args, (0, 1, 2)),
    Case(huber_regression_loss, _huber_args, (0, 1, 2)),
    Case(student_t_nll, _t_args, (0, 1, 2, 3)),
    Case(standardized_moment_loss, _moment_args, (0, 1)),
    Case(weighted_mean_var, _wmv_args, (0, 1)),
    Case(winsorized_mean, lambda: (_rng().normal(size=11),), 0),
]
