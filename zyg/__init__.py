"""zyg: reverse-mode automatic differentiation of ordinary Python by source
transformation, compiled to native code with numba.

    >>> import math, zyg
    >>> @zyg.grad
    ... def f(x):
    ...     r = 1.0
    ...     for i in range(3):
    ...         r = r * math.sin(x)
    ...     return r
    >>> round(f(0.5), 6)
    0.580683
"""
from .version import __version__  # noqa: F401

from .errors import (ZygError, UnsupportedSyntax, NoAdjoint, CompileError,  # noqa: F401
                     TypeMismatch, AliasedArguments, ModifiedAfterPullback, ShapeChanged,
                     NotPicklable)
from .rules.registry import adjoint, nondifferentiable  # noqa: F401
from .rules.higher import checkpoint, checkpointed_range, hook  # noqa: F401
from . import rules as _rules  # noqa: F401  (registers the built-in rules)
from .api import (grad, value_and_grad, pullback, jvp, hvp, hessian, jacobian,  # noqa: F401
                  stop_gradient, show, reset_caches)
from .numerics import set_boundscheck  # noqa: F401
from .compile import set_compile_notice  # noqa: F401
from .tiered import set_tiered  # noqa: F401
from .cuda import vmap  # noqa: F401
from .cuda_kernel import vjp  # noqa: F401
from . import cuda_tape as _cuda_tape  # noqa: F401  (zyg.cuda.Tape)
from .check import check_grads, GradCheckError  # noqa: F401
from . import tasks  # noqa: F401  (gradient objects pickle: zyg/tasks/pickling.py)

nondifferentiable(stop_gradient)
_rules.registry.end_builtin_phase()

# zyg.torch and zyg.jax (zyg/interop/, docs/interop.md): loaded on first use, so that
# `import zyg` imports neither PyTorch nor JAX
_INTEROP = {"torch": ("torch", "PyTorch", "torch==2.13.0"), "jax": ("jax", "JAX", "jax jaxlib")}


def __getattr__(name):
    if name not in _INTEROP:
        raise AttributeError(f"module 'zyg' has no attribute {name!r}")
    import importlib
    package, what, pip = _INTEROP[name]
    try:
        importlib.import_module(package)
    except ImportError as e:
        raise ImportError(f"zyg.{name} needs {what}, which is not installed here ({e}); install "
                          f"it with: pip install {pip}, or pip install 'zyg[interop]'") from e
    if name == "torch":
        from .interop import torch as module
    else:
        from .interop import jax as module
    globals()[name] = module
    return module


__all__ = ["checkpoint", "checkpointed_range", "hook", "check_grads", "GradCheckError", "grad", "value_and_grad", "pullback", "jvp", "hvp", "hessian", "jacobian", "adjoint", "nondifferentiable",
           "stop_gradient", "show", "ZygError", "UnsupportedSyntax", "NoAdjoint",
           "CompileError", "TypeMismatch", "AliasedArguments", "ModifiedAfterPullback", "ShapeChanged",
           "NotPicklable",
           "set_boundscheck", "set_compile_notice", "set_tiered", "vmap", "vjp"]
