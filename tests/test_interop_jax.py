"""``zyg.jax.function`` (docs/interop.md): zyg functions inside JAX, through ``jax.custom_vjp``
and ``jax.pure_callback``.

Gradients are compared with ``jax.grad`` of an equivalent ``jax.numpy`` function and with
central finite differences, eagerly and under ``jax.jit``, in float64 (the ``x64`` fixture
turns on ``jax_enable_x64`` for each test and restores it) and in float32.  The functions
are defined at module level, so each compiles once for the whole file.
"""
from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is the interop extra: pip install \".[interop]\"")
jnp = pytest.importorskip("jax.numpy")

import zyg  # noqa: E402


@pytest.fixture(autouse=True)
def x64():
    """float64 in JAX for every test (tests of float32 create float32 arrays themselves)."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


# -- the functions (plain numba-style Python) ---------------------------------------------------

def chain_energy(x, k):
    e = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        e += k * d * d
    return e


def jnp_chain_energy(x, k):
    return k * jnp.sum(jnp.diff(x) ** 2)


def scaled_sines(x, w, n):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = np.sin(x[i]) * w[i] ** n
    return out


def jnp_scaled_sines(x, w, n):
    return jnp.sin(x) * w ** n


def doubles_first(x):
    x[0] = x[0] * 2.0
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


def gather_moments(x, idx):
    m = np.zeros(2)
    for j in range(idx.shape[0]):
        v = x[idx[j]]
        m[0] += v
        m[1] += v * v
    return m, np.sum(x * x * x)


def first_n(x, n):
    out = np.empty(n)
    for i in range(n):
        out[i] = x[i] * x[i]
    return out


def squares_to(x, n):
    out = np.empty(n + 1)
    for i in range(n + 1):
        out[i] = x[i] * x[i]
    return out


ENERGY = zyg.jax.function(chain_energy, argnums=0)
ENERGY_ALL = zyg.jax.function(chain_energy)
SINES = zyg.jax.function(scaled_sines)
DOUBLES = zyg.jax.function(doubles_first)
MOMENTS = zyg.jax.function(gather_moments)
FIRST_N = zyg.jax.function(first_n)
SQUARES_TO = zyg.jax.function(squares_to)


def _points(n=6, seed=0):
    return np.random.default_rng(seed).standard_normal(n)


def _fd(f, x, h=1e-6):
    """Central differences of a scalar function of a float64 array, one element at a time."""
    g = np.empty_like(x)
    for i in range(x.size):
        up, dn = x.copy(), x.copy()
        step = h * max(1.0, abs(x[i]))
        up[i] += step
        dn[i] -= step
        g[i] = (float(f(up)) - float(f(dn))) / (2 * step)
    return g


# -- gradients -----------------------------------------------------------------------------------

def test_grad_matches_jax_and_finite_differences():
    x = jnp.asarray(_points())
    y = ENERGY(x, 0.7)
    assert y.dtype == jnp.float64 and y.shape == ()
    np.testing.assert_allclose(y, jnp_chain_energy(x, 0.7), rtol=1e-14)
    g = jax.grad(ENERGY)(x, 0.7)
    np.testing.assert_allclose(g, jax.grad(jnp_chain_energy)(x, 0.7), rtol=1e-13, atol=1e-15)
    fd = _fd(lambda v: chain_energy(v, 0.7), np.asarray(x))
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * max(1.0, abs(float(y))))
    # target="python" runs the same generated code in the interpreter: the same numbers
    py = zyg.jax.function(chain_energy, argnums=0, target="python")
    np.testing.assert_allclose(jax.grad(py)(x, 0.7), g, rtol=1e-15, atol=1e-300)


def test_under_jit_and_grad_and_vmap():
    x = jnp.asarray(_points(5, 1))
    w = jnp.asarray(np.abs(_points(5, 2)) + 0.5)
    loss = lambda x, w: jnp.sum(SINES(x, w, 3) ** 2)          # noqa: E731
    ref = lambda x, w: jnp.sum(jnp_scaled_sines(x, w, 3) ** 2)  # noqa: E731
    v, (gx, gw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, w)
    rv, (rx, rw) = jax.value_and_grad(ref, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(v, rv, rtol=1e-14)
    np.testing.assert_allclose(gx, rx, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gw, rw, rtol=1e-13, atol=1e-15)
    # the array result's Jacobian, and a batch through vmap (one callback per element)
    J = jax.jit(jax.jacobian(lambda x: SINES(x, w, 3)))(x)
    np.testing.assert_allclose(J, jax.jacobian(lambda x: jnp_scaled_sines(x, w, 3))(x), rtol=1e-13,
                               atol=1e-15)
    xs = jnp.stack([x, 2.0 * x])
    gb = jax.vmap(jax.grad(ENERGY), in_axes=(0, None))(xs, 0.7)
    np.testing.assert_allclose(gb, jax.vmap(jax.grad(jnp_chain_energy), in_axes=(0, None))(xs, 0.7),
                               rtol=1e-13, atol=1e-15)


def test_argnums_and_constants():
    x = jnp.asarray(_points(5, 3))
    # argnums=None: every float JAX array, here k too when it is traced by jax.grad
    gx, gk = jax.grad(ENERGY_ALL, argnums=(0, 1))(x, 0.7)
    rx, rk = jax.grad(jnp_chain_energy, argnums=(0, 1))(x, 0.7)
    np.testing.assert_allclose(gx, rx, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gk, rk, rtol=1e-13)
    # argnums=0: k is a constant of ENERGY, its cotangent is zero (as jax.lax.stop_gradient)
    assert float(jax.grad(ENERGY, argnums=1)(x, 0.7)) == 0.0
    assert float(jax.grad(jnp_chain_energy, argnums=1)(x, 0.7)) != 0.0
    # a numpy array and a Python int are passed to f as they are, and not changed
    w = np.abs(_points(5, 4)) + 0.5
    w0 = w.copy()
    g = jax.jit(jax.grad(lambda x: jnp.sum(SINES(x, w, 2))))(x)
    np.testing.assert_allclose(g, jnp.cos(x) * w ** 2, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(w, w0)


def test_tuple_result_and_an_integer_index_array():
    x = jnp.asarray(_points(5, 5))
    idx = jnp.array([0, 2, 2, 4])

    def loss(x):
        m, c = MOMENTS(x, idx)
        return m[1] + 3.0 * m[0] + c

    def ref(x):
        v = x[idx]
        return jnp.sum(v * v) + 3.0 * jnp.sum(v) + jnp.sum(x ** 3)
    np.testing.assert_allclose(jax.jit(loss)(x), ref(x), rtol=1e-14)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), jax.grad(ref)(x), rtol=1e-13, atol=1e-15)


def test_a_function_that_writes_into_its_argument():
    x = jnp.array([1.0, 2.0, 3.0])
    assert float(DOUBLES(x)) == 17.0
    np.testing.assert_array_equal(jax.grad(DOUBLES)(x), [8.0, 4.0, 6.0])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    a = np.array([1.0, 2.0, 3.0])       # a numpy constant it writes into: a copy is written
    assert float(DOUBLES(a)) == 17.0
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])


def test_float32():
    x64 = _points(6, 6)
    x = jnp.asarray(x64, dtype=jnp.float32)
    y = ENERGY(x, 0.7)
    g = jax.jit(jax.grad(ENERGY))(x, 0.7)
    assert y.dtype == g.dtype == jnp.float32
    np.testing.assert_allclose(g, jax.grad(jnp_chain_energy)(jnp.asarray(x64), 0.7), rtol=1e-5, atol=1e-6)
    w = jnp.asarray(np.abs(x64) + 0.5, dtype=jnp.float32)
    gw = jax.grad(lambda w: jnp.sum(SINES(x, w, 2)))(w)
    assert gw.dtype == jnp.float32
    np.testing.assert_allclose(gw, jnp.sin(x) * 2 * w, rtol=1e-5, atol=1e-6)


def test_float32_without_x64():
    jax.config.update("jax_enable_x64", False)
    x = jnp.asarray(_points(6, 7))       # float32: JAX's default
    assert x.dtype == jnp.float32
    g = jax.jit(jax.grad(ENERGY))(x, 0.7)
    assert g.dtype == jnp.float32
    np.testing.assert_allclose(g, jax.grad(jnp_chain_energy)(x, 0.7), rtol=1e-5, atol=1e-6)


def test_result_shape_given_and_checked():
    x = jnp.asarray(_points(6, 8))
    f = zyg.jax.function(first_n, result_shape=jax.ShapeDtypeStruct((4,), jnp.float64))
    np.testing.assert_allclose(f(x, 4), x[:4] ** 2, rtol=1e-15)
    g = jax.grad(lambda x: jnp.sum(f(x, 4)))(x)
    np.testing.assert_allclose(g, jnp.where(jnp.arange(6) < 4, 2 * x, 0.0), rtol=1e-15)
    # a Python int n is a constant: the shape is learned for each n
    np.testing.assert_allclose(jax.jit(lambda x: FIRST_N(x, 3))(x), x[:3] ** 2, rtol=1e-15)
    np.testing.assert_allclose(FIRST_N(x, 5), x[:5] ** 2, rtol=1e-15)
    # a wrong declaration is an error, never a wrong result
    bad = zyg.jax.function(first_n, result_shape=jax.ShapeDtypeStruct((3,), jnp.float64))
    with pytest.raises(Exception, match=r"has shape \(4,\), but shape \(3,\) was declared"):
        jax.block_until_ready(bad(x, 4))
    # n as a JAX array: the run on zeros learns shape (1,), and the real call is refused
    with pytest.raises(Exception, match=r"has shape \(4,\), but shape \(1,\) was declared to JAX "
                                        r"\(learned from a run on zeros"):
        jax.block_until_ready(SQUARES_TO(x, jnp.int64(3)))
    # ... and an empty result learned on zeros would never be checked (JAX skips the call)
    with pytest.raises(zyg.TypeMismatch, match=r"is empty \(shape \(0,\)\)"):
        FIRST_N(x, jnp.int64(4))


# -- what is refused -----------------------------------------------------------------------------

def test_wrong_inputs_are_refused():
    x = jnp.asarray(_points(4, 9))
    with pytest.raises(zyg.TypeMismatch, match="argument 0 is an integer array"):
        ENERGY(jnp.arange(4), 0.5)
    with pytest.raises(zyg.TypeMismatch, match="argument 0 is a complex128 array"):
        ENERGY(x.astype(jnp.complex128), 0.5)
    with pytest.raises(zyg.TypeMismatch, match="argument 0 is a float16 array"):
        ENERGY_ALL(x.astype(jnp.float16), 0.5)
    with pytest.raises(ValueError, match="argnums 2 out of range"):
        zyg.jax.function(chain_energy, argnums=(0, 2))(x, 0.5)
    with pytest.raises(TypeError, match="argnums must be"):
        zyg.jax.function(chain_energy, argnums=1.0)
    with pytest.raises(TypeError, match="result_shape must be"):
        zyg.jax.function(chain_energy, result_shape=(3,))(x, 0.5)


def test_the_example_in_docs_interop_runs(tmp_path):
    """docs/interop.md's JAX example (in a file: zyg reads the functions' source)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "interop.md").read_text()
    section = text[text.index("## JAX"):]
    script = tmp_path / "interop_jax_example.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    ns = runpy.run_path(str(script))
    np.testing.assert_allclose(ns["g"], [-1.0, -1.0, 2.0], rtol=1e-15)
    assert float(ns["gk"]) == 5.0
    np.testing.assert_allclose(ns["batch"], [[-1.0, -1.0, 2.0], [-2.0, -2.0, 4.0]], rtol=1e-15)
    x, w = np.array([0.0, 1.0, 3.0]), np.array([0.5, 1.5, 2.0])
    np.testing.assert_allclose(ns["J"], np.diag(np.cos(x) * w ** 2), rtol=1e-14, atol=1e-300)


def test_forward_mode_is_refused_by_jax():
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        jax.jvp(lambda x: ENERGY(x, 0.5), (jnp.ones(3),), (jnp.ones(3),))
