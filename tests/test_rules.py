"""Custom @zyg.adjoint rules, and the generic checker (tests/rulecheck.py) over every built-in rule."""
import math

import numba
import pytest

import zyg
import numpy as np
from zyg.rules import registry

from rulecheck import (builtin_rules, check_rule, check_rule_complex, complex_rules, complex_valued,
                       complex_sample_points, sample_points, usable)


def softclip(x):
    # written with try/except: zyg cannot transform it, so only the rule can make it work
    try:
        return math.tanh(x)
    except Exception:
        return 1.0


def _softclip_rule(x):
    y = softclip(x)

    def back(dy):
        # straight-through estimator: deliberately NOT the derivative of tanh
        return (dy * 1.0,)
    return y, back


@pytest.fixture(autouse=True)
def softclip_rule():
    # registered per test: conftest forgets user rules between tests
    zyg.adjoint(softclip)(_softclip_rule)
    yield


def uses_softclip(x):
    return 3.0 * softclip(x * x)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_custom_rule_is_used(target):
    g = zyg.grad(uses_softclip, target=target)
    x = 0.7
    # the rule says d softclip = 1, so the gradient is 3 * 2x, not 3 * (1 - tanh^2) * 2x
    assert g(x) == pytest.approx(6.0 * x, rel=1e-14)
    assert abs(g(x) - 6.0 * x * (1 - math.tanh(x * x) ** 2)) > 0.1


def test_custom_rule_compiles_under_numba():
    g = zyg.grad(uses_softclip, target="cpu")
    g(0.3)
    entry = g._zyg.cache[float]
    assert hasattr(entry, "py_func") or hasattr(getattr(entry, "compiled", None), "py_func")


def test_rule_with_general_forward_and_backward():
    def stable_softplus(x):
        return math.log1p(math.exp(-abs(x))) + max(x, 0.0)

    @zyg.adjoint(stable_softplus)
    def _(x):
        e = math.exp(-abs(x))
        y = math.log1p(e) + max(x, 0.0)

        def back(dy):
            s = 1.0 / (1.0 + e)
            if x >= 0:
                return (dy * s,)
            return (dy * e * s,)
        return y, back

    def loss(x):
        t = 0.0
        for i in range(3):
            t = t + stable_softplus(x * (i + 1))
        return t

    for target in ("python", "cpu"):
        g = zyg.grad(loss, target=target)
        for x in (-1.3, 0.4):
            ref = sum((i + 1) / (1 + math.exp(-x * (i + 1))) for i in range(3))
            assert g(x) == pytest.approx(ref, rel=1e-12)


# -- user rules: registration, lookup, reset ------------------------------------

@numba.njit
def jitted_cube(x):
    return x * x * x


def test_rule_for_a_numba_function_is_found_through_the_dispatcher():
    @zyg.adjoint(jitted_cube)
    def _(x):
        y = jitted_cube(x)

        def back(dy):
            return (dy * 3.0 * x * x,)
        return y, back

    def f(x):
        return jitted_cube(x) + x

    for target in ("python", "cpu"):
        g = zyg.grad(f, target=target)
        for x in (0.7, -1.3):
            assert g(x) == pytest.approx(3 * x * x + 1.0, rel=1e-14)
    check_rule(jitted_cube, 0.7)
    check_rule(jitted_cube, -1.3, target="cpu")


def scaled_square(x, k):
    return k * x * x


def test_rule_with_samples_and_a_none_entry_passes_the_checker():
    @zyg.adjoint(scaled_square, samples=[(0.7, 2.0), (-1.1, 0.5)])
    def _(x, k):
        y = scaled_square(x, k)

        def back(dy):
            return (dy * 2.0 * k * x, dy * x * x)
        return y, back

    rule = registry.lookup(scaled_square)
    assert sample_points(rule) == [(0.7, 2.0), (-1.1, 0.5)]
    for args in sample_points(rule):
        check_rule(scaled_square, *args)
        check_rule(scaled_square, *args, target="cpu")


def wrong_rule_target(x):
    return math.sin(x)


def test_checker_rejects_a_wrong_rule():
    """The checker is not vacuous: a rule with a wrong derivative fails it."""
    @zyg.adjoint(wrong_rule_target)
    def _(x):
        y = wrong_rule_target(x)

        def back(dy):
            return (dy * math.sin(x),)   # should be cos(x)
        return y, back

    with pytest.raises(AssertionError, match="rule="):
        check_rule(wrong_rule_target, 0.7)


def test_checker_rejects_a_wrong_none_entry():
    @zyg.adjoint(scaled_square)
    def _(x, k):
        y = scaled_square(x, k)

        def back(dy):
            return (dy * 2.0 * k * x, None)   # k does matter
        return y, back

    with pytest.raises(AssertionError, match="no gradient for argument 1"):
        check_rule(scaled_square, 0.7, 2.0)


def test_nondifferentiable_user_function():
    def step(x):
        return 1.0 if x > 0 else 0.0

    zyg.nondifferentiable(step)

    def f(x):
        return step(x) * x * x

    for target in ("python", "cpu"):
        assert zyg.grad(f, target=target)(0.7) == pytest.approx(1.4, rel=1e-15)
        assert zyg.grad(f, target=target)(-0.7) == 0.0


def test_reset_user_rules_forgets_rules():
    assert registry.lookup(softclip) is not None
    registry.reset_user_rules()
    assert registry.lookup(softclip) is None
    # without its rule softclip is inlined, and its try/except cannot be differentiated
    with pytest.raises(zyg.UnsupportedSyntax, match="Try"):
        zyg.grad(uses_softclip, target="python")(0.5)
    # the built-in rules survive a reset
    assert registry.lookup(math.sin) is not None


# -- generic rule checker over every built-in rule ------------------------------

# functions of complex analysis (cmath, complex) go through the complex checker below; the cast
# to float32 (the identity up to rounding, which finite differences of float64 steps cannot
# see past) is checked exactly by test_float32_cast_rule
RULES = [r for r in builtin_rules() if not complex_valued(r) and r.fn is not np.float32]


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_float32_cast_rule(target):
    # points float32 represents exactly: the value is the cast, the derivative 1
    g = zyg.value_and_grad(lambda x: np.float32(x) * 3.0, target=target)
    for x in (0.5, -1.25, 3.0):
        v, d = g(x)
        assert v == 3.0 * x and d == 3.0


@pytest.mark.parametrize("rule", RULES, ids=lambda r: repr(r)[len("<zyg rule for "):-1])
def test_builtin_rule_has_sample_points(rule):
    """Adding a rule whose domain the checker cannot sample fails here: give it
    ``samples=`` or extend the candidates in rulecheck.py."""
    pts = sample_points(rule)
    assert len(pts) >= 2, f"{rule!r} has only {len(pts)} usable sample points: {pts}"
    assert all(usable(rule.fn, p) for p in pts)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: repr(r)[len("<zyg rule for "):-1])
def test_builtin_rule_python(rule):
    for args in sample_points(rule):
        check_rule(rule.fn, *args, target="python")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: repr(r)[len("<zyg rule for "):-1])
def test_builtin_rule_cpu(rule):
    args = sample_points(rule)[0]
    check_rule(rule.fn, *args, target="cpu")


def test_rule_table_is_large():
    assert len(RULES) >= 80
    names = {repr(r) for r in RULES}
    for want in ("math.sin", "np.arccosh", "math.atan2", "np.logaddexp", "operator.pow", "math.erf"):
        assert f"<zyg rule for {want}>" in names


def test_new_rule_applies_to_an_existing_gradient():
    def local_fn(x):
        return x * x

    def f(x):
        return local_fn(x) + x

    g = zyg.grad(f, target="python")
    assert g(0.5) == pytest.approx(2.0, rel=1e-15)      # local_fn is inlined

    @zyg.adjoint(local_fn)
    def _(x):
        y = local_fn(x)

        def back(dy):
            return (dy * 3.0 * x,)       # deliberately not the derivative: shows the rule is used
        return y, back

    assert g(0.5) == pytest.approx(2.5, rel=1e-15)


def _override_sin_then_reset():
    """Override the built-in math.sin rule, call reset_user_rules, and return the
    gradient of sin at 0.5 afterwards, restoring the registry whatever happens."""
    saved_rule = registry._RULES[registry._key(math.sin)]

    def f(x):
        return math.sin(x)

    try:
        g_old = zyg.grad(f, target="python")
        assert g_old(0.5) == pytest.approx(math.cos(0.5), rel=1e-15)

        @zyg.adjoint(math.sin)
        def _(x):
            y = math.sin(x)

            def back(dy):
                return (dy * 100.0,)
            return y, back

        assert g_old(0.5) == 100.0
        registry.reset_user_rules()
        return g_old(0.5), zyg.grad(f, target="python")(0.5)
    finally:
        # restore by hand so a failure here cannot poison the tests that follow
        registry._RULES[registry._key(math.sin)] = saved_rule
        zyg.reset_caches()


def test_reset_user_rules_restores_an_overridden_builtin_rule():
    """reset_user_rules() is documented to forget every rule registered by users; a user
    rule that replaced a built-in one must give the built-in rule back."""
    _, new = _override_sin_then_reset()
    assert new == pytest.approx(math.cos(0.5), rel=1e-15)


def test_reset_user_rules_invalidates_compiled_gradients():
    """A gradient compiled while a user rule was registered must not keep using it
    after the rule is forgotten."""
    old, _ = _override_sin_then_reset()
    assert old == pytest.approx(math.cos(0.5), rel=1e-15)


# -- complex numbers: the same checker with complex samples (docs/complex.md) ----

CRULES = complex_rules()
_cid = lambda r: repr(r)[len("<zyg rule for "):-1]   # noqa: E731


@pytest.mark.parametrize("rule", CRULES, ids=_cid)
def test_complex_rule_has_sample_points(rule):
    pts = complex_sample_points(rule)
    assert len(pts) >= 2, f"{rule!r} has only {len(pts)} usable complex sample points: {pts}"


@pytest.mark.parametrize("rule", CRULES, ids=_cid)
def test_complex_rule_python(rule):
    for args in complex_sample_points(rule):
        check_rule_complex(rule.fn, *args, target="python")


@pytest.mark.parametrize("rule", CRULES, ids=_cid)
def test_complex_rule_cpu(rule):
    check_rule_complex(rule.fn, *complex_sample_points(rule)[0], target="cpu")


def test_every_rule_that_accepts_complex_is_checked_with_complex_samples():
    """A built-in rule whose function takes complex numbers is either checked above
    (it has a complex form) or real-only, and then zyg refuses complex operands."""
    import cmath
    import numpy as np
    import operator
    checked = {registry._key(r.fn) for r in CRULES}
    for want in (np.sin, np.exp, np.log, np.sqrt, np.arccosh, np.power, operator.mul, operator.truediv,
                 operator.pow, abs, np.abs, np.conj, np.real, np.imag, np.angle, cmath.exp, cmath.phase,
                 cmath.rect, complex, cmath.acosh, cmath.log10):
        assert registry._key(want) in checked, want
    from rulecheck import C_CANDIDATES
    for r in builtin_rules():
        if registry._key(r.fn) in checked:
            continue
        assert registry.for_complex(r) is None or not complex_sample_points(r, 1), r
        takes_complex = False
        for c in C_CANDIDATES[:2]:
            try:
                r.fn(*([c] * len(r.converted.params)))
                takes_complex = True
            except TypeError:
                pass
        if takes_complex:
            assert r.real_only, f"{r!r} accepts complex numbers but is neither checked nor real-only"


def test_real_only_rule_rejects_complex_operands():
    def f(z):
        return abs(math.sin(z.real) + np.maximum(z, 1j))

    import numpy as np
    with pytest.raises(zyg.TypeMismatch, match="complex") as e:
        zyg.grad(f, target="python")(0.5 + 0.5j)
    assert "np.maximum" in str(e.value)


def wrong_complex_target(z):
    return np.exp(z)


import numpy as np  # noqa: E402


def test_complex_checker_rejects_a_rule_without_the_conjugate():
    """dz += f'(z) * dy (the derivative not conjugated) fails the complex checker."""
    @zyg.adjoint(wrong_complex_target)
    def _(z):
        y = np.exp(z)

        def back(dy):
            return (dy * y,)
        return y, back

    with pytest.raises(AssertionError, match="rule="):
        check_rule_complex(wrong_complex_target, 0.6 + 0.4j)
    # on the real line the same rule is right: only complex samples find the bug
    check_rule(wrong_complex_target, 0.6)


def test_user_rule_is_used_for_complex_operands():
    """A user rule overriding a built-in replaces its complex form too."""
    @zyg.adjoint(wrong_complex_target)
    def _(z):
        y = np.exp(z)

        def back(dy):
            return (dy * np.conj(y),)
        return y, back

    check_rule_complex(wrong_complex_target, 0.6 + 0.4j)
    check_rule_complex(wrong_complex_target, 0.6 + 0.4j, target="cpu")
