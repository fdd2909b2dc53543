"""Chemistry and physics: molecular potentials, ODE integrators, kinetics, quadrature."""
import functools
import math

import numba
import numpy as np

from ._case import Case

FIELD = "chemistry/physics"


@numba.njit
def lennard_jones_energy(pos, eps, sigma, cutoff):
    """Pairwise Lennard-Jones energy of a small cluster with a cutoff, pos[n, 3]."""
    n = pos.shape[0]
    e = 0.0
    rc2 = cutoff * cutoff
    for i in range(n - 1):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 > rc2:
                continue
            sr6 = (sigma * sigma / r2) ** 3
            e += 4.0 * eps * (sr6 * sr6 - sr6)
    return e


@numba.njit
def pendulum_rhs(theta, omega, damping):
    return omega, -math.sin(theta) - damping * omega


@numba.njit
def pendulum_rk4(theta0, omega0, damping, dt, nsteps):
    """Damped pendulum integrated with classical RK4 (a helper returns a tuple)."""
    th = theta0
    om = omega0
    for i in range(nsteps):
        k1t, k1o = pendulum_rhs(th, om, damping)
        k2t, k2o = pendulum_rhs(th + 0.5 * dt * k1t, om + 0.5 * dt * k1o, damping)
        k3t, k3o = pendulum_rhs(th + 0.5 * dt * k2t, om + 0.5 * dt * k2o, damping)
        k4t, k4o = pendulum_rhs(th + dt * k3t, om + dt * k3o, damping)
        th += dt / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        om += dt / 6.0 * (k1o + 2.0 * k2o + 2.0 * k3o + k4o)
    return th * th + om * om


@numba.njit
def consecutive_reactions(log_A, Ea, T, c0, t_end, nsteps):
    """A -> B -> C with Arrhenius rates, explicit Euler on a concentration vector."""
    R = 8.314
    k = np.exp(log_A - Ea / (R * T))
    c = c0.copy()
    dt = t_end / nsteps
    for s in range(nsteps):
        r1 = k[0] * c[0]
        r2 = k[1] * c[1]
        c[0] -= dt * r1
        c[1] += dt * (r1 - r2)
        c[2] += dt * r2
    return c[1]


@numba.njit
def debye_heat_capacity(theta_d, T):
    """Debye model heat capacity (per 9 N k) by composite Simpson quadrature."""
    xmax = theta_d / T
    n = 40
    h = xmax / n
    s = 0.0
    for i in range(n + 1):
        x = i * h
        if x == 0.0:
            f = 0.0
        else:
            ex = math.exp(x)
            f = x ** 4 * ex / (ex - 1.0) ** 2
        w = 1.0 if (i == 0 or i == n) else (4.0 if i % 2 == 1 else 2.0)
        s += w * f
    return (T / theta_d) ** 3 * s * h / 3.0


def nbody_potential(pos, mass, soft):
    """Softened gravitational potential energy, vectorised over the other bodies."""
    n = pos.shape[0]
    u = 0.0
    for i in range(n):
        d = pos[i] - pos[i + 1:]
        r = np.sqrt(np.sum(d * d, axis=1) + soft * soft)
        u -= mass[i] * np.sum(mass[i + 1:] / r)
    return u


def harmonic_chain_energy(x, k, rest):
    """Energy of a spring chain with np.diff for the bond lengths."""
    bonds = np.diff(x)
    return 0.5 * k * np.sum((bonds - rest) ** 2)


def morse_pair(r, D, a, re):
    return D * (1.0 - math.exp(-a * (r - re))) ** 2


def morse_chain_energy(x, masses, pair):
    """Chain energy with a pair potential passed in (a functools.partial) and zip over masses."""
    e = 0.0
    for i, m in zip(range(x.shape[0] - 1), masses):
        e += pair(x[i + 1] - x[i]) + 0.01 * m * x[i] ** 2
    return e


MORSE_H2 = functools.partial(morse_pair, D=4.7, a=1.9, re=0.74)


def _rng():
    return np.random.default_rng(67)


def _lj_args():
    r = _rng()
    g = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype=float) * 1.12
    return (g + r.normal(0.0, 0.05, g.shape), 1.0, 1.0, 1.5)


def _pend_args():
    return (1.2, 0.0, 0.1, 0.05, 40)


def _rx_args():
    return (np.array([10.0, 8.0]), np.array([40000.0, 35000.0]), 350.0,
            np.array([1.0, 0.0, 0.0]), 5.0, 60)


def _debye_args():
    return (428.0, 150.0)


def _nbody_args():
    r = _rng()
    return (r.normal(size=(5, 3)), r.uniform(0.5, 2.0, 5), 0.1)


def _chain_args():
    return (np.cumsum(_rng().uniform(0.8, 1.2, 8)), 2.0, 1.0)


CASES = [
    Case(lennard_jones_energy, _lj_args, (0, 1, 2)),
    Case(pendulum_rk4, _pend_args, (0, 1, 2, 3)),
    Case(consecutive_reactions, _rx_args, (0, 1, 2, 3, 4)),
    Case(debye_heat_capacity, _debye_args, (0, 1)),
    Case(nbody_potential, _nbody_args, (0, 1, 2)),
    Case(harmonic_chain_energy, _chain_args, (0, 1, 2)),
    Case(morse_chain_energy, lambda: (np.array([0.0, 0.8, 1.5, 2.3]), np.array([1.0, 1.0, 2.0]),
                                      MORSE_H2), 0,
         needs='needs functools.partial (Python helper)'),
]
