"""Bessel functions J_nu(z) by their power series, differentiated with zyg.

The series ``J_nu(z) = sum_k (-1)**k (z/2)**(2k+nu) / (k! (k+nu)!)`` is summed
term by term in a ``while`` loop until the terms stop changing the sum, so the
number of iterations depends on ``z``: a loop that tracing-based AD tools cannot
reverse without fixing the trip count.  zyg differentiates the loop as written.

The script

1. compares ``zyg.grad`` of the series with the exact derivative
   (``scipy.special.jvp``) for several orders and arguments,
2. finds the first zeros of J_0, J_1 and J_2 by Newton's method, using
   ``zyg.value_and_grad`` for the value and the derivative in one call,
3. uses ``zyg.pullback`` to get the sensitivity to z of a weighted sum.

Run it with ``python examples/bessel.py``.
"""
import math

import numba
from scipy import special

import zyg


@numba.njit
def bessel_j(z, nu):
    """J_nu(z) for an integer order nu >= 0 (z of moderate size: |z| < 10)."""
    x = z / 2.0
    s = x ** nu
    for i in range(2, nu + 1):
        s /= i
    out = s
    k = 0
    while abs(s) > 1e-17 * abs(out):
        k += 1
        s *= -x * x / (k * (k + nu))
        out += s
    return out


# zyg.grad accepts the @njit function: it reads the Python source behind it.
# The gradient is taken w.r.t. argument 0 (z); nu is an int, so it is not differentiated.
dbessel = zyg.grad(bessel_j)
bessel_vg = zyg.value_and_grad(bessel_j)


def check_against_scipy():
    worst = 0.0
    print("   nu      z        zyg dJ/dz            scipy jvp            error")
    for nu in (0, 1, 2, 3):
        for z in (0.5, 1.0, 2.5, 4.0, 7.5):
            g = dbessel(z, nu)
            exact = float(special.jvp(nu, z))
            err = abs(g - exact) / max(1.0, abs(exact))
            worst = max(worst, err)
            print(f"  {nu:3d} {z:6.2f}  {g: .15e}  {exact: .15e}  {err:.1e}")
    print(f"max error of zyg's derivative against scipy.special.jvp: {worst:.1e}")
    return worst


def newton_zero(nu, z):
    """A zero of J_nu near z by Newton's method (value and derivative from one zyg call)."""
    for _ in range(50):
        v, d = bessel_vg(z, nu)
        step = v / d
        z -= step
        if abs(step) < 1e-15 * abs(z):
            break
    return z


def main():
    worst = check_against_scipy()
    print()
    for nu, guess in ((0, 2.0), (1, 4.0), (2, 5.0)):
        z0 = newton_zero(nu, guess)
        ref = float(special.jn_zeros(nu, 1)[0])
        print(f"first zero of J_{nu}: {z0:.15f}  (scipy: {ref:.15f}, difference {abs(z0 - ref):.1e})")
    print()
    # pullback: y = J_2(z) and a function back(dy) that maps an output cotangent to (dz, dnu)
    y, back = zyg.pullback(bessel_j, 3.0, 2)
    dz, dnu = back(2.0)
    print(f"pullback at z=3, nu=2: J_2(3) = {y:.15f}; back(2.0) = ({dz:.15f}, {dnu})")
    print(f"  2 * scipy.special.jvp(2, 3) = {2.0 * float(special.jvp(2, 3.0)):.15f}")
    assert worst < 1e-10 and math.isfinite(dz)


if __name__ == "__main__":
    main()
