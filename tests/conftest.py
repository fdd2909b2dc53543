"""Shared test helpers: finite-difference references and a cached zyg.grad builder.

``fd_grad`` is the independent reference every gradient test compares against
(central differences in float64).  ``assert_grad_matches`` builds ``zyg.grad`` once
per (function, argnums, target) so that numba compiles each function once per
test session, and compares it with ``fd_grad`` and the primal value with
``zyg.value_and_grad``.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, Sequence, Tuple, Union

import numpy as np
import pytest

# zyg's own tests run compiled code with bounds checking: an index error is an IndexError
# on both targets instead of garbage or a crash (docs/numerics.md)
os.environ.setdefault("ZYG_BOUNDSCHECK", "1")
# ... and numba's optimisation level 0 (ZYG_TEST_NUMBA_OPT=3 runs them at numba's default):
# the tests check values, not speed, and LLVM's optimisation is most of a first call's
# compile (the cpu cases of test_loop_locals_lists.py and test_last13.py: 343 s -> 135 s).
# Without fastmath (zyg never asks for it) LLVM's levels give the same floating-point
# results. The demo (test_cli.test_demo_quick) and the long property runs compile at
# numba's default level; the level is part of the generated code's cache key
# (numerics.options_tag), so a cache shared with other runs never mixes the two.
os.environ["NUMBA_OPT"] = os.environ.get("ZYG_TEST_NUMBA_OPT", "0")
# tiered first calls (zyg/tiered.py) answer from the python target: the cpu tests must test
# the compiled code, so they stay off here (tests/test_tiered.py turns them on)
os.environ["ZYG_TIERED"] = "0"

import zyg  # noqa: E402
import zyg.ssa.passes  # noqa: E402

# the verifier runs after every IR pass in tests
zyg.ssa.passes.VERIFY = True

TARGETS = ("python", "cpu")

FD_STEP = 1e-6
RTOL = 1e-6


def _is_diff(a: Any) -> bool:
    return isinstance(a, (float, np.floating)) and not isinstance(a, (bool, np.bool_))


def _norm_argnums(argnums, nargs):
    single = isinstance(argnums, int)
    nums = [argnums] if single else list(argnums)
    return [a % nargs for a in nums], single


def fd_partial(f: Callable, args: Sequence[Any], i: int, h: float = FD_STEP) -> float:
    """Central difference df/d(args[i]) with a step relative to the argument's size."""
    x = float(args[i])
    step = h * max(1.0, abs(x))
    up = list(args)
    dn = list(args)
    up[i] = x + step
    dn[i] = x - step
    return (float(f(*up)) - float(f(*dn))) / (2.0 * step)


def fd_grad(f: Callable, args: Sequence[Any], argnums: Union[int, Sequence[int]] = 0,
            h: float = FD_STEP):
    """Central finite-difference gradient in float64, shaped like ``zyg.grad``'s result.

    Integer and boolean arguments get ``None`` (they are not differentiable).
    """
    nums, single = _norm_argnums(argnums, len(args))
    out = tuple(fd_partial(f, args, i, h) if _is_diff(args[i]) else None for i in nums)
    return out[0] if single else out


_GRADS: Dict[Tuple[Any, Any, str, str], Callable] = {}


def cached(kind: str, f: Callable, argnums=0, target: str = "cpu") -> Callable:
    """``zyg.grad`` / ``zyg.value_and_grad`` of ``f``, built once per session."""
    key = (f, argnums if isinstance(argnums, int) else tuple(argnums), target, kind)
    g = _GRADS.get(key)
    if g is None:
        maker = zyg.grad if kind == "grad" else zyg.value_and_grad
        g = _GRADS[key] = maker(f, argnums, target=target)
    return g


def _scale(v: float) -> float:
    return max(1.0, abs(v))


def close(a: float, b: float, rtol: float = RTOL, atol: float = 0.0) -> bool:
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def assert_grad_matches(f: Callable, args: Sequence[Any], argnums: Union[int, Sequence[int]] = 0,
                        targets: Sequence[str] = TARGETS, rtol: float = RTOL) -> None:
    """zyg's gradient (and value) of ``f`` at ``args`` equal central finite differences.

    The absolute slack is ``rtol * max(1, |f(args)|)``: the rounding error of a central
    difference is about eps * |f| / h, which is far below that.
    """
    args = tuple(args)
    y = float(f(*args))
    assert math.isfinite(y), f"test point {args} gives a non-finite value {y}"
    expect = fd_grad(f, args, argnums)
    atol = rtol * _scale(y)
    nums, single = _norm_argnums(argnums, len(args))
    exp_t = (expect,) if single else expect
    for t in targets:
        got = cached("grad", f, argnums, t)(*args)
        got_t = (got,) if single else got
        assert isinstance(got_t, tuple) and len(got_t) == len(exp_t), \
            f"[{t}] {f.__name__}{args}: expected {len(exp_t)} gradients, got {got!r}"
        for i, g, e in zip(nums, got_t, exp_t):
            if e is None:
                assert g is None, f"[{t}] {f.__name__}{args}: gradient of int/bool argument {i} " \
                                  f"should be None, got {g!r}"
                continue
            assert g is not None, f"[{t}] {f.__name__}{args}: gradient of argument {i} is None"
            assert close(float(g), e, rtol, atol), \
                f"[{t}] {f.__name__}{args}: d/d(arg {i}) zyg={g!r} fd={e!r}"
        v, gv = cached("value_and_grad", f, argnums, t)(*args)
        assert close(float(v), y, 1e-12, 1e-300), f"[{t}] {f.__name__}{args}: value {v!r} != {y!r}"
        gv_t = (gv,) if single else gv
        for g1, g2 in zip(got_t, gv_t):
            assert (g1 is None) == (g2 is None)
            if g1 is not None:
                assert close(float(g1), float(g2), 1e-12, 1e-300), \
                    f"[{t}] {f.__name__}{args}: grad {g1!r} != value_and_grad's {g2!r}"


@pytest.fixture(params=TARGETS)
def target(request) -> str:
    """Run a test once per zyg target."""
    return request.param


@pytest.fixture(autouse=True)
def _forget_user_rules():
    """Each test starts from the built-in rules only."""
    yield
    zyg.rules.registry.reset_user_rules()
