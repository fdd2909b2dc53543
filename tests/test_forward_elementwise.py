"""Forward mode treats a numpy function as elementwise only when it is (issue 12).

``zyg.jvp`` of an array argument used to take any function with a scalar rule as
elementwise (its scalar derivative applied to each element): a scalar rule for a
reduction such as ``np.sum`` would then have given a wrong tangent with no error.  Now
only ufuncs and a short list are elementwise.  For every numpy function that has both a
scalar rule and an array rule, the jvp of an array argument is checked against central
finite differences along a random direction.
"""
import warnings

import numpy as np
import pytest

import zyg
from zyg.pullbacks import forward
from zyg.rules import dispatch, registry


def _both():
    out = []
    for name in sorted(dir(np)):
        # dir(np) may list names whose lookup warns or fails (deprecated or expired
        # aliases, lazily imported submodules): numpy 2.5 removed several
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                f = getattr(np, name, None)
            except Exception:
                continue
        if callable(f) and registry.lookup(f) is not None and dispatch.rule_for(f) is not None:
            out.append(name)
    return out


BOTH = _both()


def test_the_functions_with_both_rules_are_elementwise_by_construction():
    assert len(BOTH) > 40
    for name in BOTH:
        f = getattr(np, name)
        assert isinstance(f, np.ufunc) or f in forward._ELEMENTWISE or \
            dispatch.rule_for(f).broadcast, name


def _second(x):
    """The second operand of a binary function: away from ``x`` (no ties for maximum,
    no multiples for fmod)."""
    return np.linspace(1.31, 1.93, x.size)


def _apply(fn, nin, a, c):
    if fn is np.clip:
        return np.clip(a, 0.35, 0.65)
    return fn(a) if nin == 1 else fn(a, c)


def _point(fn, nin, n, rng):
    """A point where ``fn`` is finite and real (None if none of three tried is)."""
    for lo, hi in ((0.2, 0.8), (1.2, 1.8), (-0.8, -0.2)):
        x = rng.uniform(lo, hi, n)
        with np.errstate(all="ignore"):
            y = np.asarray(_apply(fn, nin, x, _second(x)))
        if y.dtype.kind == "f" and np.all(np.isfinite(y)):
            return x
    return None


@pytest.mark.parametrize("name", BOTH)
def test_jvp_of_an_array_argument_matches_finite_differences(name):
    fn = getattr(np, name)
    nin = getattr(fn, "nin", 1)
    rng = np.random.default_rng(sum(map(ord, name)))
    x = _point(fn, nin, 5, rng)
    assert x is not None, f"np.{name} is not finite and real at the points tried"
    t = rng.normal(size=5)
    c = _second(x)
    w = np.arange(1.0, 6.0)

    if fn is np.clip:
        def f(a):
            return np.sum(np.clip(a, 0.35, 0.65) * w)
    elif nin == 1:
        def f(a):
            return np.sum(fn(a) * w)
    else:
        def f(a):
            return np.sum(fn(a, c) * w)
    y, ty = zyg.jvp(f, (x,), (t,), target="python")
    h = 1e-6
    fd = (f(x + h * t) - f(x - h * t)) / (2 * h)
    assert y == pytest.approx(f(x), rel=1e-12)
    assert ty == pytest.approx(fd, rel=1e-5, abs=1e-8), (name, ty, fd)
