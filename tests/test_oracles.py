"""The oracles of tests/oracles.py run and can fail (python target only: cheap).

* each oracle rejects a planted wrong result (a jvp, an hvp, a Hessian, a nested gradient
  off by a little, an argument written by the call);
* a program zyg refuses is counted as a refusal, not a pass, and a family whose programs
  are mostly refused fails;
* the existing property families reach the oracles (a smoke run of each family's checker
  on a few programs: the jvp and hvp oracles checked > 0 programs).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st

import zyg

import oracles


def poly(a, x):
    return np.sum(np.sin(a) * a) * x + x ** 3


A = np.array([0.3, -0.7, 1.1])


_GRAD0 = zyg.grad(poly, 0, target="python")


def _grad0(a):
    return _GRAD0(*a)


def test_oracles_pass_on_right_results():
    fam = "oracle self-test ok"
    vg = zyg.value_and_grad(poly, (0, 1), target="python")
    y, g = vg(A.copy(), 0.8)
    oracles.check_jvp(fam, poly, (A, 0.8), (0, 1), g, y, "python")
    oracles.check_hvp(fam, poly, (A, 0.8), _grad0, "python")
    oracles.check_hessian(fam, poly, (A, 0.8), _grad0, "python")
    oracles.check_nested(fam, poly, (A, 0.8), 1, _grad0, "python")
    c = oracles.STATS[fam]
    for o in ("jvp", "hvp", "hessian", "nested grad", "inputs unchanged"):
        assert c[f"checked {o}"] >= 1, (o, dict(c))
    assert not any(k.startswith("mismatch") for k in c)


@pytest.mark.parametrize("which", ["jvp", "hvp", "hessian", "nested", "writes"])
def test_oracles_catch_planted_errors(which, monkeypatch):
    fam = f"oracle self-test {which}"
    vg = zyg.value_and_grad(poly, (0, 1), target="python")
    y, g = vg(A.copy(), 0.8)
    if which == "jvp":
        real = zyg.jvp
        monkeypatch.setattr(zyg, "jvp", lambda *a, **k: (lambda r: (r[0], r[1] * (1 + 1e-6)))(real(*a, **k)))
        run = lambda: oracles.check_jvp(fam, poly, (A, 0.8), (0, 1), g, y, "python")  # noqa: E731
    elif which == "hvp":
        real = zyg.hvp
        monkeypatch.setattr(zyg, "hvp", lambda *a, **k: real(*a, **k) + 1e-3)
        run = lambda: oracles.check_hvp(fam, poly, (A, 0.8), _grad0, "python")  # noqa: E731
    elif which == "hessian":
        real = zyg.hessian
        monkeypatch.setattr(zyg, "hessian", lambda *a, **k: (lambda *b: real(*a, **k)(*b) * 0.999))
        run = lambda: oracles.check_hessian(fam, poly, (A, 0.8), _grad0, "python")  # noqa: E731
    elif which == "nested":
        real = zyg.grad
        monkeypatch.setattr(zyg, "grad", lambda f, argnums=0, **k: (
            real(f, argnums, **k) if argnums == 1 else (lambda *b: real(f, argnums, **k)(*b) * 0.0)))
        run = lambda: oracles.check_nested(fam, poly, (A, 0.8), 1, _grad0, "python")  # noqa: E731
    else:
        real = zyg.jvp

        def writes(f, primals, tangents, **k):
            out = real(f, primals, tangents, **k)
            primals[0][0] += 1.0
            return out
        monkeypatch.setattr(zyg, "jvp", writes)
        run = lambda: oracles.check_jvp(fam, poly, (A, 0.8), (0, 1), g, y, "python")  # noqa: E731
    with pytest.raises(AssertionError, match=r"\[oracle self-test"):
        run()
    assert sum(v for k, v in oracles.STATS[fam].items() if k.startswith("mismatch")) == 1


def _once(fn):
    """Run ``fn`` inside a one-example hypothesis test (the checkers call event/assume)."""
    from hypothesis import given

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.just(None))
    def run(_):
        fn()
    run()


def test_refusals_are_counted_and_most_refused_fails():
    from test_property_round2 import Program, check_program
    src = "def f(a, x):\n    out = []\n    out.extend([x])\n    return np.sum(a) * out[0]\n"
    prog = Program(src, (A.copy(), 0.5), (0, 1))
    prog.targets = ("python",)
    _once(lambda: check_program("oracle self-test refusals", prog))
    c = oracles.STATS["oracle self-test refusals"]
    assert c["refused"] == 1 and c["checked gradient"] == 0 and c["checked jvp"] == 0
    hs = settings(max_examples=3, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
    with pytest.raises(AssertionError, match="refused"):
        oracles.family_test("oracle self-test mostly refused", st.just(prog),
                            lambda p: check_program("oracle self-test mostly refused", p), hs,
                            oracles=[])


def test_existing_families_reach_the_oracles(monkeypatch):
    """Smoke: the checkers of the existing property files call the jvp and hvp oracles."""
    import test_property_arrays
    import test_property_mutation
    monkeypatch.setattr(oracles, "HVP_EVERY", 1)
    src = ("def f(a, b, x):\n    c = a.copy()\n    s = 0.0\n    for i in range(2):\n"
           "        c[i] = math.sin(c[i] * x)\n        s = s + np.sum(c * b)\n    return s\n")
    _once(lambda: test_property_arrays._check(src, "python"))
    src_m = ("def f(a, b, m, x):\n    c = a.copy()\n    s = np.sum(np.tanh(m @ c)) * x\n"
             "    c *= 0.5\n    return s + np.sum(c * b) + np.sum(m * m)\n")
    _once(lambda: test_property_mutation.check(src_m, ("python",)))
    for fam in ("array programs", "mutation programs"):
        c = oracles.STATS[fam]
        assert c["checked jvp"] >= 1 and c["checked hvp"] + c["unreliable hvp"] >= 1, (fam, dict(c))
        assert c["checked hvp"] >= 1, (fam, dict(c))
