"""Dict arguments as pytrees: ``params["a"]`` in differentiated code, and a gradient that
is a dict with the same keys (as JAX users expect).

A dict argument is passed to the compiled code as a namedtuple whose fields are its keys
(one class per tuple of keys, created once); ``d["key"]`` with a constant string key
is lowered like the field access ``d.key`` (``zyg/ssa/lower.py``).  Gradients of such
arguments are namedtuples of these classes, turned back into dicts here.  Values may
be numbers, arrays, tuples and dicts (nested).  numpy records and structured arrays take
the same path (their fields are the keys): they are read as data, not differentiated.
"""
from __future__ import annotations

import collections
import keyword
from typing import Any, Dict, Tuple

import numpy as np

from .errors import TypeMismatch

_CLASSES: Dict[Tuple[str, ...], type] = {}


def _class_for(keys: Tuple[str, ...]) -> type:
    cls = _CLASSES.get(keys)
    if cls is None:
        for k in keys:
            if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k):
                raise TypeMismatch(f"a dict argument has the key {k!r}; zyg differentiates dicts "
                                   "whose keys are strings that are valid Python names "
                                   "(params['w1'])")
        cls = collections.namedtuple("zyg_dict", keys)
        cls._zyg_dict = True
        cls = _CLASSES.setdefault(keys, cls)     # two threads: both get the first one
    return cls


def is_record(v: Any) -> bool:
    """A numpy structured value: a record (``np.void`` with fields) or a structured array."""
    return isinstance(v, (np.void, np.ndarray)) and v.dtype.names is not None


def has_dict(args) -> bool:
    """Whether dicts or records are among ``args`` (at any depth in tuples)."""
    return any(isinstance(a, dict) or is_record(a) or isinstance(a, tuple) and has_dict(a)
               for a in args)


def check_records_not_wrt(f: Any, args, wrt) -> None:
    """Records are read as data: refuse a gradient with respect to one."""
    for i in wrt:
        if 0 <= i < len(args) and is_record(args[i]):
            code = getattr(f, "__code__", None)
            raise TypeMismatch(
                f"argument {i} of {getattr(f, '__name__', 'f')} is a numpy structured "
                f"{'array' if isinstance(args[i], np.ndarray) else 'record'}: zyg reads its fields "
                "(p['x1']) as data but does not differentiate with respect to them",
                code.co_filename if code else None, code.co_firstlineno if code else None,
                hint="pass the fields to differentiate as separate arrays or floats, or as a "
                     "dict of them (params['x1']), and leave the record out of argnums")


def to_tuples(v: Any) -> Any:
    """Dicts (at any depth in tuples and dicts) as namedtuples of their keys; numpy records
    and structured arrays as namedtuples of their fields (``p['x1']`` reads a field)."""
    if isinstance(v, dict):
        cls = _class_for(tuple(v))
        return cls(*[to_tuples(x) for x in v.values()])
    if is_record(v):
        names = tuple(v.dtype.names)
        return _class_for(names)(*[to_tuples(v[n]) for n in names])
    if isinstance(v, tuple) and type(v) is tuple:
        return tuple(to_tuples(x) for x in v)
    return v


def to_dicts(v: Any) -> Any:
    """The inverse of :func:`to_tuples` on gradients."""
    if isinstance(v, tuple) and getattr(type(v), "_zyg_dict", False):
        return {k: to_dicts(x) for k, x in zip(v._fields, v)}
    if isinstance(v, tuple) and type(v) is tuple:
        return tuple(to_dicts(x) for x in v)
    return v


def tangent_like(t: Any, x: Any, what: str, where: Tuple[Any, Any] = (None, None)) -> Any:
    """The tangent ``t`` of the value ``x`` with dicts as :func:`to_tuples` makes them.

    A dict tangent of a dict primal is reordered to the primal's keys (as JAX matches
    dicts by key, not by order); different keys raise :class:`TypeMismatch`.  ``None``
    (no tangent) stays ``None``.  ``where``: the file and line of the function, for the error.
    """
    if t is None:
        return None
    if isinstance(x, dict):
        if not isinstance(t, dict) or set(t) != set(x):
            got = sorted(t) if isinstance(t, dict) else type(t).__name__
            raise TypeMismatch(f"jvp: the tangent of {what} must be a dict with the keys of its "
                               f"primal, {sorted(x)}; got {got}", *where,
                               hint="pass a dict with the same keys (None for no tangent)")
        cls = _class_for(tuple(x))
        return cls(*[tangent_like(t[k], v, f"{what}[{k!r}]", where) for k, v in x.items()])
    if type(x) is tuple and isinstance(t, tuple) and len(t) == len(x):
        return tuple(tangent_like(a, b, f"{what}[{j}]", where) for j, (a, b) in enumerate(zip(t, x)))
    return t

