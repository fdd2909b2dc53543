"""Issue 13 leftovers: dict arguments in ``pullback`` and ``jvp`` (and clear refusals in
``hessian``/``hvp``/``jacobian``), read-only and big-endian array arguments,
``math.lgamma``, ``np.convolve`` with a mode string.

Every derivative is compared with central finite differences on both targets; every
refusal is a zyg error whose message names the user's line and says what to write.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import zyg
from conftest import TARGETS

H = 1e-6


def fd_vec(f, x, h=H):
    """Central differences of a (scalar- or array-valued) ``f`` w.r.t. the array or float ``x``:
    shape ``out + in`` for an array ``x``, ``out`` for a float."""
    if not isinstance(x, np.ndarray):
        s = h * max(1.0, abs(x))
        return (np.asarray(f(x + s)) - np.asarray(f(x - s))) / (2 * s)
    cols = []
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        s = h * max(1.0, abs(x.flat[k]))
        up.flat[k] += s
        dn.flat[k] -= s
        cols.append((np.asarray(f(up)) - np.asarray(f(dn))) / (2 * s))
    J = np.stack(cols, axis=-1)
    return J.reshape(J.shape[:-1] + x.shape)


def close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# -- 1. dict arguments in pullback and jvp ------------------------------------------------------

def dict_loss(p, x):
    return np.sum(p["w"] * x) ** 2 + p["b"] * p["w"][0]


def dict_affine(p, x):
    return p["w"] * x + p["b"]


def nested_dict(p, x):
    return np.sum(p["layer"]["w"] * x) * p["scale"] + math.sin(p["layer"]["b"])


P = {"w": np.array([1.0, 2.0]), "b": 0.5}
XD = np.array([0.3, -0.4])


def _with(p, key, v):
    q = dict(p)
    q[key] = v
    return q


def test_pullback_dict_argument_scalar_output(target):
    y, back = zyg.pullback(dict_loss, P, XD, target=target)
    assert y == pytest.approx(dict_loss(P, XD), rel=1e-14)
    gp, gx = back(1.7)
    assert isinstance(gp, dict) and list(gp) == ["w", "b"]
    close(gp["w"], 1.7 * fd_vec(lambda w: dict_loss(_with(P, "w", w), XD), P["w"]))
    close(gp["b"], 1.7 * fd_vec(lambda b: dict_loss(_with(P, "b", b), XD), P["b"]))
    close(gx, 1.7 * fd_vec(lambda x: dict_loss(P, x), XD))


def test_pullback_dict_argument_array_output(target):
    y, back = zyg.pullback(dict_affine, P, XD, target=target)
    close(y, dict_affine(P, XD))
    dy = np.array([0.7, -1.3])
    gp, gx = back(dy)
    assert list(gp) == ["w", "b"]
    close(gp["w"], dy @ fd_vec(lambda w: dict_affine(_with(P, "w", w), XD), P["w"]))
    close(gp["b"], dy @ fd_vec(lambda b: dict_affine(_with(P, "b", b), XD), P["b"]))
    close(gx, dy @ fd_vec(lambda x: dict_affine(P, x), XD))
    # back may be called again (the function writes no array)
    gp2, _ = back(2.0 * dy)
    close(gp2["w"], 2.0 * gp["w"])


def test_pullback_nested_dict(target):
    p = {"layer": {"w": np.array([0.2, -0.5]), "b": 0.3}, "scale": 1.5}
    _, back = zyg.pullback(nested_dict, p, XD, target=target)
    gp, _ = back(1.0)
    assert list(gp) == ["layer", "scale"] and list(gp["layer"]) == ["w", "b"]

    def at(w=p["layer"]["w"], b=p["layer"]["b"], s=p["scale"]):
        return nested_dict({"layer": {"w": w, "b": b}, "scale": s}, XD)
    close(gp["layer"]["w"], fd_vec(lambda w: at(w=w), p["layer"]["w"]))
    close(gp["layer"]["b"], fd_vec(lambda b: at(b=b), p["layer"]["b"]))
    close(gp["scale"], fd_vec(lambda s: at(s=s), p["scale"]))


def test_jvp_dict_argument(target):
    tw, tb, tx = np.array([0.4, -0.9]), 1.3, np.array([-0.2, 0.6])
    # the tangent dict's keys in another order: matched by key, as JAX does
    y, ty = zyg.jvp(dict_affine, (P, XD), ({"b": tb, "w": tw}, tx), target=target)
    close(y, dict_affine(P, XD))
    ref = fd_vec(lambda e: dict_affine({"w": P["w"] + e * tw, "b": P["b"] + e * tb}, XD + e * tx), 0.0)
    close(ty, ref)
    y, ty = zyg.jvp(dict_loss, (P, XD), ({"w": tw, "b": tb}, None), target=target)
    assert float(y) == pytest.approx(dict_loss(P, XD), rel=1e-14)
    ref = fd_vec(lambda e: dict_loss({"w": P["w"] + e * tw, "b": P["b"] + e * tb}, XD), 0.0)
    close(ty, ref)
    # no tangent for the dict argument
    _, ty = zyg.jvp(dict_loss, (P, XD), (None, tx), target=target)
    close(ty, fd_vec(lambda e: dict_loss(P, XD + e * tx), 0.0))


def test_jacobian_with_a_dict_beside_the_argument(target):
    for mode in ("fwd", "rev"):
        J = zyg.jacobian(dict_affine, 1, mode=mode, target=target)(P, XD)
        close(J, fd_vec(lambda x: dict_affine(P, x), XD))


def _assert_names_def(e, fname, def_text):
    msg = str(e)
    assert not isinstance(e, zyg.CompileError)
    assert e.filename == __file__ and def_text in msg, msg
    assert "hint:" in msg


def test_jvp_dict_tangent_with_other_keys_is_refused():
    with pytest.raises(zyg.TypeMismatch) as ei:
        zyg.jvp(dict_loss, (P, XD), ({"w": np.ones(2)}, None), target="python")
    assert "keys of its primal" in str(ei.value) and "['b', 'w']" in str(ei.value)
    _assert_names_def(ei.value, "dict_loss", "def dict_loss(p, x):")


@pytest.mark.parametrize("api", ["hessian", "hvp", "jacobian"])
def test_second_order_and_jacobian_of_a_dict_are_refused(api, target):
    with pytest.raises(zyg.TypeMismatch) as ei:
        if api == "hessian":
            zyg.hessian(dict_loss, 1, target=target)(P, XD)
        elif api == "hvp":
            zyg.hvp(dict_loss, P, P, XD, target=target)
        else:
            zyg.jacobian(dict_affine, 0, target=target)(P, XD)
    msg = str(ei.value)
    assert f"zyg.{api}" in msg and "argument 0 is a dict" in msg, msg
    assert "separate arguments" in msg and "zyg.jvp / zyg.pullback" in msg, msg
    _assert_names_def(ei.value, "", "def dict_" )


# -- 2. read-only and big-endian array arguments --------------------------------------------

def sum_sq_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 2 * x[0]
    return s


def scaled(x, w):
    return np.sum(np.sin(x) * w[0]) + w[1] * x[0]


def fills(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.0
    return np.sum(y * x)


def scales_in_place(x, y):
    y *= 2.0
    return np.sum(y * x)


X4 = np.array([0.5, -1.0, 2.0, 0.3])
W2 = np.array([1.3, -0.7])
_SQ = {t: zyg.grad(sum_sq_loop, target=t) for t in TARGETS}
_FILLS = {t: zyg.grad(fills, (0, 1), target=t) for t in TARGETS}


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def _odd_arrays():
    """Arrays as real code passes them: read-only, broadcast (stride 0), big-endian, and
    big-endian read-only (a memory-mapped file written on another machine)."""
    bc = np.broadcast_to(np.array([1.5]), (3,))
    be_ro = X4.astype(">f8")
    be_ro.flags.writeable = False
    return {"read-only": _readonly(X4), "broadcast": bc, "big-endian": X4.astype(">f8"),
            "big-endian read-only": be_ro}


@pytest.mark.parametrize("kind", ["read-only", "broadcast", "big-endian", "big-endian read-only"])
def test_unusual_array_read(kind, target):
    x = _odd_arrays()[kind]
    before = x.copy()
    ref = fd_vec(sum_sq_loop, np.array(x, dtype=float))
    G = _SQ[target]
    G(np.array(x, dtype=float))                 # a native entry exists first: the cached path
    g = G(x)
    close(g, ref)
    assert g.flags.writeable and not np.shares_memory(g, x)
    np.testing.assert_array_equal(x, before)
    y, back = zyg.pullback(sum_sq_loop, x, target=target)
    assert y == pytest.approx(sum_sq_loop(before), rel=1e-14)
    (gp,) = back(1.0)
    close(gp, ref)
    t = np.linspace(0.3, -0.6, x.shape[0])
    _, ty = zyg.jvp(sum_sq_loop, (x,), (t,), target=target)
    close(ty, ref @ t)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("kind", ["read-only", "big-endian"])
def test_unusual_array_second_order_and_tuple(kind, target):
    x = _odd_arrays()[kind]
    xn = np.array(x, dtype=float)
    H = zyg.hessian(sum_sq_loop, target=target)(x)
    close(H, fd_vec(lambda v: fd_vec(sum_sq_loop, v, 1e-5), xn, 1e-5), rtol=1e-5, atol=1e-6)
    v = np.array([0.2, -0.1, 0.4, 1.0])
    close(zyg.hvp(sum_sq_loop, x, v, target=target), H @ v, rtol=1e-12, atol=1e-12)
    w = W2.astype(">f8") if kind == "big-endian" else _readonly(W2)
    gx, gw = zyg.grad(scaled, (0, 1), target=target)(x, w)
    close(gx, fd_vec(lambda t: scaled(t, W2), xn))
    close(gw, fd_vec(lambda t: scaled(xn, t), W2))


def pair_loss(pr):
    return np.sum(pr[0] * pr[1] ** 2)


def test_big_endian_inside_a_tuple(target):
    a, b = X4.astype(">f8"), np.array([0.1, 0.2, -0.3, 0.4])
    G = zyg.grad(pair_loss, target=target)
    G((X4.copy(), b))
    ga, gb = G((a, b))
    close(ga, fd_vec(lambda t: pair_loss((t, b)), X4))
    close(gb, fd_vec(lambda t: pair_loss((X4, t)), b))


def _assert_write_error(e, line, what):
    msg = str(e)
    assert not isinstance(e, zyg.CompileError), msg
    assert e.filename == __file__ and line in msg, msg
    assert "writes into argument 1 ('y')" in msg and what in msg, msg
    assert "hint:" in msg


def test_read_only_argument_written_is_refused(target):
    G = _FILLS[target]
    gx, gy = G(X4, X4.copy())                     # compiled for writable arrays first
    close(gx, fd_vec(lambda t: fills(t, X4.copy()), X4))
    ro = _readonly(X4)
    for call in (lambda: G(X4, ro), lambda: zyg.grad(fills, (0, 1), target=target)(X4, ro),
                 lambda: zyg.pullback(fills, X4, ro, target=target)):
        with pytest.raises(zyg.TypeMismatch) as ei:
            call()
        _assert_write_error(ei.value, "y[i] = x[i] * 2.0", "read-only")
        assert "y.copy()" in str(ei.value)
    with pytest.raises(zyg.TypeMismatch) as ei:
        zyg.value_and_grad(scales_in_place, target=target)(X4, np.broadcast_to(W2[:1], (4,)))
    _assert_write_error(ei.value, "y *= 2.0", "read-only")


def test_big_endian_argument_written():
    # python: numpy writes big-endian arrays itself, so it just works
    y = X4.astype(">f8")
    gx, gy = _FILLS["python"](X4, y)
    close(gx, fd_vec(lambda t: fills(t, X4.copy()), X4))
    close(gy, fd_vec(lambda t: fills(X4, t), X4.copy()))
    # cpu: a native copy could not carry the write back to the caller's array
    for call in (lambda: _FILLS["cpu"](X4, X4.astype(">f8")),
                 lambda: zyg.pullback(scales_in_place, X4, X4.astype(">f8"), target="cpu")):
        with pytest.raises(zyg.TypeMismatch) as ei:
            call()
        assert "newbyteorder('=')" in str(ei.value)
        line = "y[i] = x[i] * 2.0" if "fills" in str(ei.value) else "y *= 2.0"
        _assert_write_error(ei.value, line, "big-endian")


# -- 3. math.lgamma (and math.gamma) ----------------------------------------------------------

@pytest.mark.parametrize("fn", [math.lgamma, math.gamma], ids=lambda f: f.__name__)
def test_gamma_rules_through_the_rule_checker(fn, target):
    from rulecheck import check_rule, sample_points
    from zyg.rules import registry
    pts = sample_points(registry.lookup(fn))
    assert len(pts) >= 2
    pts = pts + [(-0.45,), (-1.6,)]          # negative non-integers: digamma's reflection branch
    for p in pts:
        check_rule(fn, *p, target=target)


def beta_loglik(a, b, x):
    """Log-likelihood of Beta(a, b) data, as statistics code writes it with math.lgamma."""
    s = 0.0
    for i in range(x.shape[0]):
        s += (a - 1.0) * math.log(x[i]) + (b - 1.0) * math.log(1.0 - x[i])
    n = x.shape[0]
    return s - n * (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))


def test_lgamma_in_a_likelihood(target):
    x = np.array([0.2, 0.55, 0.7, 0.35])
    ga, gb = zyg.grad(beta_loglik, (0, 1), target=target)(2.5, 1.7, x)
    close(ga, fd_vec(lambda a: beta_loglik(a, 1.7, x), 2.5))
    close(gb, fd_vec(lambda b: beta_loglik(2.5, b, x), 1.7))


# -- 4. np.convolve with a mode string ------------------------------------------------------------

CONV_SHAPES = [(6, 3), (3, 5), (4, 4), (5, 2)]


@pytest.mark.parametrize("mode", [None, "full", "same", "valid", "kw-same"])
@pytest.mark.parametrize("shapes", CONV_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_convolve_rule_checker(mode, shapes, target):
    from arraycheck import Lit, check_array_rule
    rng = np.random.default_rng(sum(shapes))
    a, v = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    if mode is None:
        check_array_rule(np.convolve, [a, v], target=target)
    elif mode == "kw-same":
        check_array_rule(np.convolve, [a, v], {"mode": "same"}, target=target)
    else:
        check_array_rule(np.convolve, [a, v, Lit(mode)], target=target)


def conv_bad_mode(x, k):
    return np.sum(np.convolve(x, k, "circular"))


@pytest.mark.parametrize("f, text, line", [
    # numpy itself rejects the mode while zyg infers the result's type: the message names the
    # call, not the mode (a mode that is not a constant string gets the rule's own message)
    (conv_bad_mode, "np.convolve(...) here", "np.convolve(x, k, \"circular\")"),
])
def test_convolve_refusals(f, text, line, target):
    x = np.ones(4)
    with pytest.raises(zyg.ZygError) as ei:
        zyg.grad(f, target=target)(x, np.ones(2))
    msg = str(ei.value)
    assert text in msg and line in msg and ei.value.filename == __file__, msg
    assert not isinstance(ei.value, zyg.CompileError)
