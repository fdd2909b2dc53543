"""Hydrology: conceptual rainfall-runoff models, routing and goodness-of-fit scores."""
import math

import numba
import numpy as np

from ._case import Case

FIELD = "hydrology"


@numba.njit
def linear_reservoir_sse(k, s0, precip, evap, qobs):
    """Linear reservoir dS/dt = P - E - S/k stepped daily; squared error of the outflow."""
    s = s0
    sse = 0.0
    for t in range(precip.shape[0]):
        s = s + precip[t] - evap[t]
        if s < 0.0:
            s = 0.0
        q = s / k
        s -= q
        d = q - qobs[t]
        sse += d * d
    return sse


@numba.njit
def degree_day_snow(ddf, t_thresh, temp, precip):
    """Degree-day snow model: snow accumulates below the threshold, melts above it."""
    swe = 0.0
    runoff = 0.0
    for t in range(temp.shape[0]):
        if temp[t] < t_thresh:
            swe += precip[t]
        else:
            runoff += precip[t]
            melt = min(ddf * (temp[t] - t_thresh), swe)
            swe -= melt
            runoff += melt
    return runoff + 0.1 * swe


def muskingum_nse(K, X, inflow, obs):
    """Muskingum channel routing of an inflow hydrograph, scored by Nash-Sutcliffe efficiency."""
    dt = 1.0
    denom = 2.0 * K * (1.0 - X) + dt
    c0 = (dt - 2.0 * K * X) / denom
    c1 = (dt + 2.0 * K * X) / denom
    c2 = (2.0 * K * (1.0 - X) - dt) / denom
    n = inflow.shape[0]
    out = np.zeros(n)
    out[0] = inflow[0]
    for t in range(1, n):
        out[t] = c0 * inflow[t] + c1 * inflow[t - 1] + c2 * out[t - 1]
    return nash_sutcliffe(out, obs)


@numba.njit
def nash_sutcliffe(sim, obs):
    """1 - SSE / variance of the observations."""
    m = np.mean(obs)
    return 1.0 - np.sum((sim - obs) ** 2) / np.sum((obs - m) ** 2)


@numba.njit
def green_ampt_depth(ks, psi, dtheta, t):
    """Cumulative Green-Ampt infiltration F(t), solved by fixed-point iteration."""
    pd = psi * dtheta
    F = ks * t
    for it in range(200):
        F_new = ks * t + pd * math.log(1.0 + F / pd)
        if abs(F_new - F) < 1e-14 * F:
            F = F_new
            break
        F = F_new
    return F


def bucket_model(params, precip, pet, qobs):
    """A two-parameter bucket model whose parameters come in a dict, as calibration tools pass them."""
    smax = params["smax"]
    k = params["k"]
    s = 0.5 * smax
    err = 0.0
    for t in range(precip.shape[0]):
        s += precip[t]
        et = pet[t] * s / smax
        s -= et
        over = 0.0
        if s > smax:
            over = s - smax
            s = smax
        q = k * s + over
        s -= k * s
        err += (q - qobs[t]) ** 2
    return err


def thornthwaite_pet(temp, daylength):
    """Thornthwaite potential evapotranspiration; the heat index is a generator expression."""
    heat = sum((t / 5.0) ** 1.514 for t in temp if t > 0.0)
    a = 6.75e-7 * heat ** 3 - 7.71e-5 * heat ** 2 + 1.792e-2 * heat + 0.49239
    pet = 0.0
    for m in range(temp.shape[0]):
        if temp[m] > 0.0:
            pet += 16.0 * daylength[m] / 12.0 * (10.0 * temp[m] / heat) ** a
    return pet


def _rng():
    return np.random.default_rng(23)


def _forcing(n=20):
    r = _rng()
    precip = r.gamma(0.6, 6.0, n)
    evap = np.full(n, 0.8)
    return precip, evap, r


def _linres_args():
    precip, evap, r = _forcing()
    return (4.0, 10.0, precip, evap, r.uniform(1.0, 4.0, precip.shape[0]))


def _snow_args():
    r = _rng()
    temp = np.linspace(-6.3, 7.9, 18) + r.normal(0.0, 1.0, 18)
    return (3.1, 0.4, temp, r.gamma(0.7, 5.0, 18))


def _musk_args():
    t = np.arange(16.0)
    inflow = 10.0 + 50.0 * np.exp(-0.5 * ((t - 4.0) / 2.0) ** 2)
    obs = 10.0 + 45.0 * np.exp(-0.5 * ((t - 6.0) / 2.5) ** 2)
    return (2.5, 0.2, inflow, obs)


def _ga_args():
    return (1.1, 11.0, 0.3, 2.0)


def _bucket_args():
    precip, evap, r = _forcing(15)
    return ({"smax": 80.0, "k": 0.15}, precip, evap * 2.0, r.uniform(0.5, 5.0, 15))


CASES = [
    Case(linear_reservoir_sse, _linres_args, (0, 1, 2)),
    Case(degree_day_snow, _snow_args, (0, 1, 2, 3)),
    Case(muskingum_nse, _musk_args, (0, 1, 2)),
    Case(green_ampt_depth, _ga_args, (0, 1, 2, 3)),
    Case(bucket_model, _bucket_args, (0, 1)),
    Case(thornthwaite_pet, lambda: (np.array([-2.0, 1.5, 6.0, 11.0, 15.5, 19.0, 21.0, 20.0, 16.0,
                                              10.0, 4.0, -1.0]),
                                    np.array([9.0, 10.2, 11.8, 13.4, 14.8, 15.6, 15.2, 14.0, 12.4,
                                              10.8, 9.4, 8.6])), (0, 1)),
]
