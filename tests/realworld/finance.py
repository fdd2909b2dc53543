"""Finance: option pricing (closed form, trees, Monte Carlo) and portfolio risk."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "finance"


@numba.njit
def norm_cdf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@numba.njit
def black_scholes_call(S, K, T, r, sigma):
    """Black-Scholes price of a European call."""
    if T <= 0.0:
        return max(S - K, 0.0)
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r + 0.5 * sigma * sigma) * T) / sq
    d2 = d1 - sq
    return S * norm_cdf(d1) - K * math.exp(-r * T) * norm_cdf(d2)


@numba.njit
def american_put_binomial(S, K, T, r, sigma, steps):
    """Cox-Ross-Rubinstein tree for an American put, with early exercise at every node."""
    dt = T / steps
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp(r * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    values = np.empty(steps + 1)
    for i in range(steps + 1):
        values[i] = max(K - S * u ** (steps - i) * d ** i, 0.0)
    for j in range(steps - 1, -1, -1):
        for i in range(j + 1):
            cont = disc * (p * values[i] + (1.0 - p) * values[i + 1])
            exercise = K - S * u ** (j - i) * d ** i
            values[i] = max(cont, exercise)
    return values[0]


@numba.njit
def asian_call_mc(S0, r, sigma, T, K, z):
    """Monte Carlo price of an arithmetic-average Asian call from pre-drawn normals z[path, step]."""
    n_paths, n_steps = z.shape
    dt = T / n_steps
    drift = (r - 0.5 * sigma * sigma) * dt
    vol = sigma * math.sqrt(dt)
    payoff = 0.0
    for p in range(n_paths):
        s = S0
        avg = 0.0
        for k in range(n_steps):
            s *= math.exp(drift + vol * z[p, k])
            avg += s
        avg /= n_steps
        if avg > K:
            payoff += avg - K
    return math.exp(-r * T) * payoff / n_paths


def sharpe_ratio(w, mu, cov, rf):
    """Sharpe ratio of a portfolio with weights normalised to sum to one."""
    w = w / np.sum(w)
    excess = np.dot(w, mu) - rf
    var = w @ cov @ w
    return excess / np.sqrt(var)


@numba.njit
def ewma_var_es(returns, lam):
    """RiskMetrics EWMA volatility; returns the parametric 99% value-at-risk of the last day."""
    var = returns[0] ** 2
    for t in range(1, returns.shape[0]):
        var = lam * var + (1.0 - lam) * returns[t - 1] ** 2
    return 2.3263478740408408 * math.sqrt(var)


def cholesky_basket_mc(S0, vols, corr, z, K):
    """Basket option: correlated normals from a Cholesky factor of the correlation matrix."""
    L = np.linalg.cholesky(corr)
    n_paths = z.shape[0]
    total = 0.0
    for p in range(n_paths):
        e = L @ z[p]
        basket = np.sum(S0 * np.exp(-0.5 * vols ** 2 + vols * e))
        total += max(basket - K, 0.0)
    return total / n_paths


class GBMPricer:
    """A pricer object as in a small pricing library: parameters are attributes."""

    def __init__(self, r, sigma, T):
        self.r = r
        self.sigma = sigma
        self.T = T

    def digital_call(self, S, K):
        """Smoothed digital call price (a logistic in d2), a method reading self.*."""
        sq = self.sigma * math.sqrt(self.T)
        d2 = (math.log(S / K) + (self.r - 0.5 * self.sigma ** 2) * self.T) / sq
        return math.exp(-self.r * self.T) / (1.0 + math.exp(-1.7 * d2))


PRICER = GBMPricer(0.03, 0.2, 0.5)


def _rng():
    return np.random.default_rng(5)


def _bs_args():
    return (102.0, 95.0, 0.75, 0.03, 0.25)


def _tree_args():
    return (98.0, 100.0, 1.0, 0.04, 0.3, 24)


def _asian_args():
    return (100.0, 0.02, 0.2, 1.0, 99.5, _rng().standard_normal((16, 12)))


def _sharpe_args():
    r = _rng()
    A = r.normal(size=(4, 4)) * 0.1
    return (np.array([0.3, 0.2, 0.4, 0.1]), np.array([0.08, 0.05, 0.11, 0.03]),
            A @ A.T + 0.01 * np.eye(4), 0.02)


def _ewma_args():
    return (_rng().normal(0.0, 0.012, 30), 0.94)


def _basket_args():
    corr = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.4], [0.1, 0.4, 1.0]])
    return (np.array([30.0, 40.0, 35.0]), np.array([0.2, 0.3, 0.25]), corr,
            _rng().standard_normal((12, 3)), 104.0)


CASES = [
    Case(black_scholes_call, _bs_args, (0, 1, 2, 3, 4)),
    Case(american_put_binomial, _tree_args, (0, 1, 2, 3, 4)),
    Case(asian_call_mc, _asian_args, (0, 1, 2, 3, 4)),
    Case(sharpe_ratio, _sharpe_args, (0, 1, 2, 3)),
    Case(ewma_var_es, _ewma_args, (0, 1)),
    Case(cholesky_basket_mc, _basket_args, (0, 1, 2, 4)),
    Case(PRICER.digital_call, lambda: (101.0, 100.0), (0, 1)),
]
