"""Epidemiology: compartmental models, renewal equations, growth curves."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "epidemiology"


@numba.njit
def sir_sse(beta, gamma, i0, obs, dt):
    """SIR model integrated with Euler steps of dt days; squared error of daily prevalence."""
    s = 1.0 - i0
    i = i0
    sub = int(round(1.0 / dt))
    sse = 0.0
    for day in range(obs.shape[0]):
        for k in range(sub):
            new_inf = beta * s * i * dt
            rec = gamma * i * dt
            s -= new_inf
            i += new_inf - rec
        sse += (i - obs[day]) ** 2
    return sse


@numba.njit
def seir_deriv(y, beta, sigma, gamma):
    s, e, i, r = y[0], y[1], y[2], y[3]
    return np.array([-beta * s * i, beta * s * i - sigma * e, sigma * e - gamma * i, gamma * i])


@numba.njit
def seir_rk4_peak(beta, sigma, gamma, y0, days):
    """SEIR with an array state and RK4 steps; returns a smooth peak of the infectious curve."""
    y = y0.copy()
    h = 0.5
    acc = 0.0
    for step in range(int(days / h)):
        k1 = seir_deriv(y, beta, sigma, gamma)
        k2 = seir_deriv(y + 0.5 * h * k1, beta, sigma, gamma)
        k3 = seir_deriv(y + 0.5 * h * k2, beta, sigma, gamma)
        k4 = seir_deriv(y + h * k3, beta, sigma, gamma)
        y = y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        acc += math.exp(40.0 * y[2])
    return math.log(acc) / 40.0


@numba.njit
def renewal_poisson_nll(log_R, si, cases):
    """Renewal-equation incidence with a serial interval si; Poisson negative log-likelihood."""
    n = cases.shape[0]
    m = si.shape[0]
    nll = 0.0
    for t in range(1, n):
        lam = 0.0
        for s in range(1, min(t, m) + 1):
            lam += si[s - 1] * cases[t - s]
        mu = math.exp(log_R[t]) * lam
        nll += mu - cases[t] * math.log(mu)
    return nll


@numba.njit
def logistic_growth_nll(r, K, t0, t, cum_cases):
    """Logistic cumulative-case curve fitted with a negative-binomial-like log loss."""
    nll = 0.0
    for j in range(t.shape[0]):
        c = K / (1.0 + math.exp(-r * (t[j] - t0)))
        nll += (math.log1p(c) - math.log1p(cum_cases[j])) ** 2
    return nll


def sir_vaccination(params, obs, days):
    """SIR with vaccination; the parameters arrive as a dict and are checked first."""
    if params["gamma"] <= 0.0:
        raise ValueError("gamma must be positive")
    s, i = 0.99, 0.01
    loss = 0.0
    for d in range(days):
        inf = params["beta"] * s * i
        vac = params["nu"] * s
        s = s - inf - vac
        i = i + inf - params["gamma"] * i
        loss += (i - obs[d]) ** 2
    return loss


def reporting_delay_nll(log_R, counts, si):
    """Poisson renewal likelihood of integer case counts, cast with counts.astype(np.float64)."""
    c = counts.astype(np.float64)
    nll = 0.0
    for t in range(si.shape[0], c.shape[0]):
        lam = np.exp(log_R) * np.sum(si[::-1] * c[t - si.shape[0]:t])
        nll += lam - c[t] * np.log(lam)
    return nll


def _rng():
    return np.random.default_rng(79)


def _sir_args():
    obs = 0.01 * np.exp(0.15 * np.arange(12.0))
    return (0.4, 0.2, 0.01, obs, 0.25)


def _seir_args():
    return (0.6, 0.25, 0.2, np.array([0.99, 0.005, 0.005, 0.0]), 12.0)


def _renewal_args():
    si = np.array([0.2, 0.4, 0.25, 0.1, 0.05])
    cases = np.array([5.0, 8, 12, 15, 22, 30, 41, 50, 66, 80, 95, 120])
    return (np.log(np.linspace(1.6, 1.2, 12)), si, cases)


def _logistic_args():
    t = np.arange(0.0, 30.0, 3.0)
    return (0.25, 1000.0, 15.0, t, 1000.0 / (1.0 + np.exp(-0.22 * (t - 16.0))))


def _vacc_args():
    return ({"beta": 0.35, "gamma": 0.1, "nu": 0.01}, 0.01 * np.exp(0.1 * np.arange(10.0)), 10)


CASES = [
    Case(sir_sse, _sir_args, (0, 1, 2, 3)),
    Case(seir_rk4_peak, _seir_args, (0, 1, 2, 3)),
    Case(renewal_poisson_nll, _renewal_args, (0, 1)),
    Case(logistic_growth_nll, _logistic_args, (0, 1, 2, 4)),
    Case(sir_vaccination, _vacc_args, (0, 1)),
    Case(reporting_delay_nll, lambda: (0.2, np.array([3, 5, 4, 8, 9, 12, 15, 14, 21, 25]),
                                       np.array([0.3, 0.45, 0.25])), 0),
]
