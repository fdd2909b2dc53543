"""``zyg.jax.function(f)``: a function differentiated by zyg as a JAX function with a custom VJP.

    >>> import jax, jax.numpy as jnp, zyg
    >>> def energy(x, k):
    ...     e = 0.0
    ...     for i in range(x.shape[0] - 1):
    ...         d = x[i + 1] - x[i]
    ...         e += k * d * d
    ...     return e
    >>> E = zyg.jax.function(energy)
    >>> jax.jit(jax.grad(E))(jnp.array([0.0, 1.0, 3.0]), 0.5)
    Array([-1., -1.,  2.], dtype=float32)

The result is a ``jax.custom_vjp`` function whose primal and backward passes are
``jax.pure_callback`` calls into zyg: the primal runs ``zyg.pullback(f, ...)`` and returns
its value; the backward pass runs the pullback again on the same inputs (a callback
cannot hand a tape to a later one) and calls its ``back`` with the cotangent.  It works
under ``jax.jit``, ``jax.grad``, ``jax.vjp`` and ``jax.vmap`` (one call per batch
element).

Arguments that are JAX arrays (tracers included) go through the callbacks; the others
(Python numbers, numpy arrays, tuples) are constants passed to ``f`` as they are: a
Python int stays an int, so ``f`` may use it as a loop count or a size.

``pure_callback`` needs the shape and dtype of the result before it runs.  Pass them as
``result_shape=`` (a ``jax.ShapeDtypeStruct``, or a tuple of them for a tuple result);
otherwise they are learned once per signature (argument shapes and dtypes, the constant
arguments' types, and the values of constant ints and bools) by running zyg's primal of
``f`` on zeros of the arrays' shapes.  Every call checks that the result has that shape
and raises a :class:`zyg.ZygError` where it does not (a result whose shape depends on the
values of array arguments needs ``result_shape=``, or the value as a Python int).
See docs/interop.md.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import jax
import numpy as np

from .. import backends
from ..api import pullback
from ..errors import TypeMismatch
from . import common

__all__ = ["function", "ZygJaxFunction"]

_MAX_SHAPES = 256       # learned result shapes kept per function


def _is_jax(a: Any) -> bool:
    return isinstance(a, jax.Array)        # tracers are jax.Arrays too


def _canonical(dt: Any) -> np.dtype:
    return np.dtype(jax.dtypes.canonicalize_dtype(dt))


class ZygJaxFunction(common.Wrapped):
    """What :func:`function` returns: call it with JAX arrays (and other arguments) as ``f``."""
    api = "zyg.jax.function"

    def __init__(self, f: Callable, argnums: common.Argnums, result_shape: Any, target: str):
        super().__init__(f, argnums, target)
        self.result_shape = result_shape
        self._shapes: Dict[Any, Any] = {}

    # -- arguments ------------------------------------------------------------------------
    def _split(self, args: Sequence[Any]) -> Tuple[List[int], List[Any], Tuple[int, ...]]:
        """The positions of the arguments that go through the callbacks, those arguments as
        JAX arrays, and the positions (among all) that get cotangents."""
        nums = common.positions(self.argnums, len(args))
        pos, vals = [], []
        for i, a in enumerate(args):
            wanted = nums is not None and i in nums
            if not (_is_jax(a) or wanted):
                continue            # a constant: passed to f as it is
            if not _is_jax(a):
                try:
                    a = jax.numpy.asarray(a)
                except TypeError:
                    raise self._error(f"argument {i} is a {type(a).__name__}, and argnums asks "
                                      f"for its gradient; gradients go to JAX arrays") from None
            dt = np.dtype(a.dtype)
            if dt.kind == "f" and dt in (np.float64, np.float32):
                pass
            elif dt.kind in "iub" and dt in (np.int64, np.int32, np.bool_):
                if wanted:
                    raise self._error(
                        f"argument {i} is an integer array ({dt}), and argnums asks for its "
                        f"gradient; zyg differentiates float64 and float32 arrays",
                        hint=f"pass floats as argument {i}, or leave {i} out of argnums: "
                             f"integer arrays are read without a gradient")
            else:
                raise self._error(
                    f"argument {i} is a {dt} array; zyg.jax.function takes float64 and float32 "
                    f"arrays (and int64, int32 and bool arrays, without a gradient)",
                    hint=f"convert it (argument {i}.astype(jnp.float32))")
            pos.append(i)
            vals.append(a)
        if nums is None:
            diff = tuple(i for i, a in zip(pos, vals) if np.dtype(a.dtype).kind == "f")
        else:
            diff = nums
        return pos, vals, diff

    def _assemble(self, args: Sequence[Any], pos: Sequence[int], xs: Sequence[Any]) -> List[Any]:
        """``f``'s arguments for one callback: the constants, and the arrays JAX hands over
        (0-d ones as numbers); copies of those ``f`` writes into (JAX's are read-only, and a
        constant numpy array of the caller must not change)."""
        out = list(args)
        for i, x in zip(pos, xs):
            v = np.asarray(x)
            out[i] = common.scalar_of(v) if v.ndim == 0 else v
        for i in common.written_arguments(self.f, out, self.target):
            out[i] = common.copy_arrays(out[i])
        return out

    # -- the result's shape ---------------------------------------------------------------
    def _signature(self, args: Sequence[Any], pos: Sequence[int], vals: Sequence[Any]) -> Any:
        """What the learned result shape is kept for: the traced arrays' shapes and dtypes,
        and :func:`_constant_key` of the other arguments."""
        traced = dict(zip(pos, vals))
        return tuple(("array", tuple(traced[i].shape), np.dtype(traced[i].dtype)) if i in traced
                     else _constant_key(a) for i, a in enumerate(args))

    def _spec_of(self, y: Any, vals: Sequence[Any], what: str = "the result") -> Any:
        """The ``jax.ShapeDtypeStruct`` (a tuple of them for a tuple) of a result ``y``."""
        if isinstance(y, tuple):
            return tuple(self._spec_of(v, vals, f"result {k}") for k, v in enumerate(y))
        if isinstance(y, np.ndarray):
            if y.dtype.kind not in "fiub":
                raise self._error(f"{what} is a {y.dtype} array; zyg.jax.function returns float, "
                                  f"int and bool arrays",
                                  hint="return the real and imaginary parts separately"
                                  if y.dtype.kind == "c" else None)
            return jax.ShapeDtypeStruct(y.shape, _canonical(y.dtype))
        if isinstance(y, (bool, np.bool_)):
            return jax.ShapeDtypeStruct((), np.dtype(np.bool_))
        if isinstance(y, (int, np.integer)):
            return jax.ShapeDtypeStruct((), _canonical(np.int64))
        if isinstance(y, np.floating):
            return jax.ShapeDtypeStruct((), _canonical(y.dtype))
        if isinstance(y, float):
            dt = common.float_result_dtype([np.dtype(v.dtype) for v in vals])
            return jax.ShapeDtypeStruct((), _canonical(dt))
        raise self._error(f"{what} is a {type(y).__name__}; zyg.jax.function returns numbers, "
                          f"arrays and tuples of them")

    def _given_spec(self, s: Any) -> Any:
        if isinstance(s, (tuple, list)):
            return tuple(self._given_spec(v) for v in s)
        if hasattr(s, "shape") and hasattr(s, "dtype"):
            return jax.ShapeDtypeStruct(tuple(s.shape), _canonical(s.dtype))
        raise TypeError(f"zyg.jax.function({self.__name__}): result_shape must be a "
                        f"jax.ShapeDtypeStruct (or a tuple of them), not {type(s).__name__}")

    def _result_spec(self, args: Sequence[Any], pos: Sequence[int], vals: Sequence[Any]) -> Any:
        if self.result_shape is not None:
            return self._given_spec(self.result_shape)
        key = self._signature(args, pos, vals)
        spec = self._shapes.get(key)
        if spec is None:
            zeros = [np.zeros(v.shape, np.dtype(v.dtype)) for v in vals]
            try:
                y, _ = pullback(self.f, *self._assemble(args, pos, zeros), target=self.target)
            except Exception as e:
                if hasattr(e, "add_note"):
                    e.add_note(f"(zyg.jax.function({self.__name__}) ran {self.__name__} on zeros of "
                               f"its array arguments' shapes to learn the shape of its result; "
                               f"pass result_shape=jax.ShapeDtypeStruct(shape, dtype) to skip that)")
                raise
            spec = self._spec_of(y, vals)
            if all(0 in s.shape for s in _leaves(spec)):
                # JAX skips a callback whose results are all empty: nothing would check them
                raise self._error(
                    f"the result, run on zeros of the array arguments' shapes to learn its "
                    f"shape, is empty ({_shapes_text(spec)}); its shape seems to depend on the "
                    f"values of array arguments, and JAX would not run the function to check it",
                    hint="pass result_shape=jax.ShapeDtypeStruct(shape, dtype), or the value "
                         "that sets the size as a Python int")
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = spec
        return spec

    def _to_spec(self, y: Any, spec: Any, what: str = "the result") -> Any:
        """``y`` as numpy values of the declared shapes and dtypes (ZygError otherwise)."""
        if isinstance(spec, tuple):
            if not isinstance(y, tuple) or len(y) != len(spec):
                raise self._mismatch(what, f"a tuple of {len(spec)}", y)
            return tuple(self._to_spec(v, s, f"result {k}") for k, (v, s) in enumerate(zip(y, spec)))
        if isinstance(y, tuple) or np.shape(y) != tuple(spec.shape):
            raise self._mismatch(what, f"shape {tuple(spec.shape)}", y)
        return np.asarray(y, dtype=spec.dtype)

    def _mismatch(self, what: str, expected: str, y: Any) -> TypeMismatch:
        got = f"a tuple of {len(y)}" if isinstance(y, tuple) else f"shape {np.shape(y)}"
        how = ("given as result_shape" if self.result_shape is not None else
               "learned from a run on zeros of the arguments' shapes")
        return self._error(
            f"{what} has {got}, but {expected} was declared to JAX ({how})",
            hint="pass result_shape=jax.ShapeDtypeStruct(shape, dtype) with the right shape; a "
                 "shape that depends on the values of array arguments must be given this way, "
                 "or the value passed as a Python int")

    # -- calls ----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{self!r} takes positional arguments only")
        pos, vals, diff = self._split(args)
        spec = self._result_spec(args, pos, vals)
        in_specs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in vals]
        flat_spec = _leaves(spec)
        floats = [np.dtype(s.dtype).kind == "f" for s in flat_spec]
        grads = [j for j, i in enumerate(pos) if i in diff]

        def primal(*xs):
            y, _ = pullback(self.f, *self._assemble(args, pos, xs), target=self.target)
            return self._to_spec(y, spec)

        def cotangents(*xs_dys):
            xs, dys = xs_dys[:len(pos)], list(xs_dys[len(pos):])
            _, back = pullback(self.f, *self._assemble(args, pos, xs), target=self.target)
            # 0-d arrays are fine as back's numbers; None: a zero cotangent (int results)
            flat_dy = iter([np.asarray(dys.pop(0)) if fl else None for fl in floats])
            dy = _unflatten(spec, flat_dy)
            cots = back(dy)
            out = []
            for j in grads:
                c = cots[pos[j]]
                c = np.zeros(in_specs[j].shape, in_specs[j].dtype) if c is None else \
                    np.asarray(c, dtype=in_specs[j].dtype).reshape(in_specs[j].shape)
                out.append(c)
            return tuple(out)

        @jax.custom_vjp
        def call(*xs):
            return jax.pure_callback(primal, spec, *xs, vmap_method="sequential")

        def fwd(*xs):
            return call(*xs), xs

        def bwd(xs, dy):
            if not grads:
                return (None,) * len(xs)
            dys = [d for d, fl in zip(jax.tree_util.tree_leaves(dy), floats) if fl]
            got = jax.pure_callback(cotangents, tuple(in_specs[j] for j in grads), *xs, *dys,
                                    vmap_method="sequential")
            out: List[Any] = [None] * len(xs)
            for j, c in zip(grads, got):
                out[j] = c
            return tuple(out)
        call.defvjp(fwd, bwd)
        return call(*vals)


def _constant_key(a: Any) -> Any:
    """A constant argument in the key of a learned result shape: a numpy array by shape and
    dtype, an int or bool by value (a size, a loop count), a float by type, a tuple entry
    by entry, another object by equality where it hashes, else by identity."""
    if isinstance(a, np.ndarray):
        return ("numpy", a.shape, a.dtype)
    if isinstance(a, (bool, int, np.integer, np.bool_)):
        return (type(a), a)
    if isinstance(a, (float, complex, np.floating, np.complexfloating)):
        return type(a)
    if isinstance(a, tuple):
        return (type(a),) + tuple(_constant_key(x) for x in a)
    try:
        hash(a)
    except TypeError:
        return ("id", id(a))
    return ("object", a)


def _leaves(spec: Any) -> List[Any]:
    """The ``jax.ShapeDtypeStruct`` leaves of ``spec`` (a tuple structure), in order."""
    if isinstance(spec, tuple):
        return [leaf for s in spec for leaf in _leaves(s)]
    return [spec]


def _shapes_text(spec: Any) -> str:
    return ", ".join(f"shape {tuple(s.shape)}" for s in _leaves(spec))


def _unflatten(spec: Any, leaves) -> Any:
    """The values of ``leaves`` in the tuple structure of ``spec``."""
    if isinstance(spec, tuple):
        return tuple(_unflatten(s, leaves) for s in spec)
    return next(leaves)


def function(f: Callable, argnums: common.Argnums = None, *, result_shape: Any = None,
             target: str = "cpu") -> ZygJaxFunction:
    """``f`` as a JAX function: a ``jax.custom_vjp`` whose primal and backward passes call
    zyg's compiled primal and pullback of ``f`` through ``jax.pure_callback``.

    ``argnums`` (None: every float JAX array argument; or an int or a tuple of ints)
    selects the arguments that get cotangents; the others get zero cotangents, as
    constants.  Arguments that are not JAX arrays are passed to ``f`` unchanged.
    ``result_shape``: a ``jax.ShapeDtypeStruct`` (or a tuple of them) describing ``f``'s
    result; when None it is learned by running ``f`` once on zeros of the arguments'
    shapes (once per signature).  ``target``: ``"cpu"`` or ``"python"``.
    See docs/interop.md.
    """
    if not callable(f):
        raise TypeError(f"zyg.jax.function takes a function, not {type(f).__name__}")
    backends.host(target, "zyg.jax.function")
    return ZygJaxFunction(f, common.check_argnums(argnums, "zyg.jax.function"), result_shape,
                          target)
