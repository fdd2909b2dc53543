"""How generated code is handed to numba on cpu.

A generated module with a dispatch loop (``while _blk >= 0:``) is compiled without numba's
SSA reconstruction and rewrite passes (``backends.cpu.generated_pipeline``): numba's SSA
joined every multiply-assigned value at the loop header with a reference-counted copy in
every case, quadratic in the function (the Hessian of ``loop_array`` below: 12 MB of LLVM IR,
52 s; now 12 s).  Where numba cannot type a module that way, every function of the module is
compiled again with numba's default pipeline (``build._with_numba_ssa``).  Values are the
same either way: the Hessians are checked against closed forms and finite differences.
"""
import sys

import numpy as np
import pytest

import zyg
from zyg import build
from zyg.backends.cpu import generated_pipeline


def loop_array(a):
    b = a * 1.0
    for i in range(2):
        b = b * a
    return np.sum(b) + np.sum(a * 0.0)      # sum(a ** 3): H = diag(6 a)


def branchy(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = s + x[i] * x[i] * x[i]
        else:
            s = s - np.sin(x[i])
    return s


def _modules(stem):
    return [m for name, m in list(sys.modules.items())
            if name.startswith("zyg_gen_cpu_" + stem)]


def test_dispatch_loops_compile_without_numba_ssa_and_values_agree():
    a = np.array([1.0, 2.0, -0.5])
    h = zyg.hessian(loop_array, target="cpu")(a)
    np.testing.assert_allclose(h, np.diag(6.0 * a), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(h, zyg.hessian(loop_array, target="python")(a))
    mods = _modules("loop_array_d0_grad_h")
    assert mods, "the Hessian's generated module was not loaded as zyg_gen_cpu_..."
    pipelines = {getattr(v, "_compiler").pipeline_class
                 for m in mods for v in vars(m).values() if hasattr(v, "_compiler")}
    assert generated_pipeline() in pipelines


def test_branches_in_loops_second_order_on_cpu():
    x = np.array([0.7, -1.2, 0.3, -0.4])
    h = zyg.hessian(branchy, target="cpu")(x)
    want = np.diag(np.where(x > 0, 6.0 * x, np.sin(x)))
    np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-12)
    g = zyg.grad(branchy, target="cpu")(x)
    np.testing.assert_allclose(g, np.where(x > 0, 3 * x * x, -np.cos(x)), rtol=1e-12)


def _typed_only_with_ssa(x, flag):
    # one name, two dtypes on two paths: SSA gives each its own variable, numba without it
    # must unify float32 and float64 arrays and refuses
    if flag:
        y = x * np.float32(2.0)
        return _helper(y, flag)
    y = np.zeros(3)
    return _helper(y, flag)


def _helper(y, flag):
    if flag:
        z = y + np.float32(1.0)
        return z.sum()
    z = np.ones(2)
    return z.sum()


def test_a_module_numba_cannot_type_without_ssa_is_compiled_with_numba_ssa():
    import numba
    pipe = generated_pipeline()
    glob = {"np": np}
    for f in (_typed_only_with_ssa, _helper):
        g = type(f)(f.__code__, glob, f.__name__)
        glob[f.__name__] = numba.njit(pipeline_class=pipe)(g)
    first = build.FirstCall(glob["_typed_only_with_ssa"], "<test>", {}, "_typed_only_with_ssa")
    x = np.arange(3, dtype=np.float32)
    assert first(x, True) == pytest.approx(float((x * 2 + 1).sum()))
    assert first(x, False) == 2.0
    # every function of the module was replaced, callee included
    assert not build._without_ssa(glob["_typed_only_with_ssa"])
    assert not build._without_ssa(glob["_helper"])
    # without SSA numba does refuse it: the fallback was needed
    bare = numba.njit(pipeline_class=pipe)(type(_helper)(_helper.__code__, {"np": np}, "_helper"))
    with pytest.raises(numba.core.errors.TypingError):
        bare(x, True)
