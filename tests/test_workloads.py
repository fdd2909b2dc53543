"""The array benchmark workloads: zyg's gradient against the hand-written numba adjoint.

Issue 3 asks GMM, LSTM and ODE gradients to agree with a hand-written (or finite
difference) reference to 1e-8 relative; the hand adjoints themselves are checked
against finite differences by ``python -m benchmarks.check_workloads``. Small sizes
(the workloads' ``quick_args``) keep this fast; the same functions run at full size
in the benchmark runner, which verifies before timing.
"""
import numpy as np
import pytest

import zyg
from benchmarks.workloads import get_workload

NAMES = ["gmm", "lstm", "ode", "lse_loop", "lse_np", "logreg", "mlp"]


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("name", NAMES)
def test_zyg_matches_hand_adjoint(name):
    w = get_workload(name)
    args = w.cases[0].quick_args
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want_v, want_g = w.hand(*args)
    nums = tuple(w.argnums)
    got_v, got_g = zyg.value_and_grad(w.fn, argnums=nums if len(nums) > 1 else nums[0])(*args)
    for a, b in zip(args, before):          # the contract: inputs unchanged
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    assert got_v == pytest.approx(want_v, rel=1e-12)
    want_g = want_g if isinstance(want_g, tuple) else (want_g,)
    got_g = got_g if isinstance(got_g, tuple) else (got_g,)
    assert len(got_g) == len(want_g)
    for g, h in zip(got_g, want_g):
        assert np.shape(g) == np.shape(h)
        assert _rel(g, h) < 1e-8, (name, _rel(g, h))
