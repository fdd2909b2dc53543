"""What a transform differentiates when it is given more than a plain function of
positional arguments: default and keyword arguments, bound methods, ``functools.partial``.

``adapt(f)`` returns the plain function zyg lowers and, when calls need it, a *binder*:
a generated Python function with ``f``'s signature that fills in defaults (read at call
time from ``__defaults__``/``__kwdefaults__``/``partial.keywords``, so a changed default
is never stale), accepts keywords, and calls the transform with every parameter
positional.  ``argnums`` number the positional parameters of what the user calls
(after the arguments a method or a partial binds).

A bound method ``obj.m`` and a partial ``partial(g, a, k=v)`` are differentiated through
a small generated *entry function* ``m(x, ...)`` whose body calls the underlying
function with the bound values (``return _zyg_fn(_zyg_b0, x, ...)``); zyg inlines the
call, so the bound object is static (its attributes are read at call time, see
``zyg/ssa/objects.py``) and bound arrays are read at call time like captured ones.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import gast

from .caches import BUILD_LOCK

_MISSING = object()
_COUNT = itertools.count()


def _parts(f: Any) -> Tuple[Any, list, dict]:
    """``(function, bound positional values, bound keyword values)`` behind methods and
    partials (nested ones too)."""
    pre: list = []
    kw: dict = {}
    for _ in range(20):
        if isinstance(f, functools.partial):
            pre = list(f.args) + pre
            kw = {**f.keywords, **kw}
            f = f.func
        elif isinstance(f, types.MethodType):
            pre = [f.__self__] + pre
            f = f.__func__
        else:
            break
    return f, pre, kw


def _params(fn) -> Tuple[List[str], List[str]]:
    code = fn.__code__
    npos = code.co_argcount
    return list(code.co_varnames[:npos]), list(code.co_varnames[npos:npos + code.co_kwonlyargcount])


class Binder:
    """Binds a call with keywords and defaults to the full positional argument tuple."""

    def __init__(self, fn, pos: List[str], kwonly: List[str], partial_kw: Dict[str, Any], skip: int):
        self.fn = fn                  # the function whose defaults are read
        self.pos = pos[skip:]         # positional parameters the user passes
        self.kwonly = kwonly
        self.partial_kw = partial_kw
        self.skip = skip
        self.names = self.pos + kwonly

    def default(self, name: str) -> Any:
        """The current default of parameter ``name`` (_MISSING when it has none)."""
        if name in self.partial_kw:
            return self.partial_kw[name]
        if name in self.kwonly:
            return (self.fn.__kwdefaults__ or {}).get(name, _MISSING)
        allpos = self.pos if not self.skip else [None] * self.skip + self.pos
        d = self.fn.__defaults__ or ()
        j = allpos.index(name) - (len(allpos) - len(d))
        return d[j] if j >= 0 else _MISSING

    def bind(self, args: tuple, kwargs: dict, fname: str) -> tuple:
        """The full positional tuple for ``f(*args, **kwargs)`` (Python's rules)."""
        if len(args) > len(self.pos):
            raise TypeError(f"{fname}() takes {len(self.pos)} positional arguments but "
                            f"{len(args)} were given")
        out = list(args)
        for name in self.names[len(args):]:
            if name in kwargs:
                out.append(kwargs[name])
                continue
            v = self.default(name)
            if v is _MISSING:
                raise TypeError(f"{fname}() missing required argument: {name!r}")
            out.append(v)
        for k in kwargs:
            if k not in self.names:
                raise TypeError(f"{fname}() got an unexpected keyword argument {k!r}")
            if self.names.index(k) < len(args):
                raise TypeError(f"{fname}() got multiple values for argument {k!r}")
        return tuple(out)

    def wrap(self, inner: Callable, fname: str) -> Callable:
        """A caller taking ``f``'s arguments (positional or keyword) that binds and calls
        ``inner`` with all of them positional; calls passing everything positionally skip
        the binding."""
        n = len(self.names)

        def call(*args, **kwargs):
            if not kwargs and len(args) == n:
                return inner(*args)
            return inner(*self.bind(args, kwargs, fname))
        return call


def adapt(f: Any) -> Tuple[Any, Optional[Binder]]:
    """The function to differentiate in place of ``f`` and its binder (None: ``f`` is a
    plain function of positional parameters without defaults)."""
    from .ssa.lower import unwrap
    base, pre, kw = _parts(f)
    if hasattr(base, "_zyg"):
        return f, None
    py = unwrap(base)
    if not isinstance(py, types.FunctionType):
        return f, None
    pos, kwonly = _params(py)
    if not pre and not kw and not py.__defaults__ and not kwonly:
        return f, None
    if len(pre) > len(pos):
        raise TypeError(f"{py.__qualname__}() takes {len(pos)} positional arguments but the "
                        f"partial or method binds {len(pre)}")
    binder = Binder(py, pos, kwonly, kw, len(pre))
    if not pre and not kw:
        return base, binder
    return _entry_function(py, base, pre, binder), binder


_ENTRIES: Dict[Any, Any] = {}


def _entry_function(py, base, pre: list, binder: Binder) -> Any:
    """:func:`_entry_function_unlocked` under the build lock (two threads binding the same
    partial get one entry function)."""
    with BUILD_LOCK:
        return _entry_function_unlocked(py, base, pre, binder)


def _entry_function_unlocked(py, base, pre: list, binder: Binder) -> Any:
    """``def name(<remaining parameters>): return _zyg_fn(<bound values>, <parameters>)``,
    registered as its own source so that zyg can lower it."""
    from .ssa import lower as L
    key = (py, tuple(id(v) for v in pre), tuple(binder.partial_kw))
    got = _ENTRIES.get(key)
    if got is not None and all(a is b for a, b in zip(got[0], pre)):
        return got[1]
    rest = binder.names
    name = py.__name__ if py.__name__ != "<lambda>" else "lambda"
    ps = [f"{p}_" if p.startswith("_zyg") else p for p in rest]
    bound = [f"_zyg_b{k}" for k in range(len(pre))]
    kwonly = set(binder.kwonly)
    args = bound + [p for p, r in zip(ps, rest) if r not in kwonly] + \
        [f"{r}={p}" for p, r in zip(ps, rest) if r in kwonly]
    text = f"def {name}({', '.join(ps)}):\n    return _zyg_fn({', '.join(args)})\n"
    filename = f"<zyg entry {next(_COUNT)} of {py.__qualname__}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    glob: Dict[str, Any] = {"_zyg_fn": base}
    for b, v in zip(bound, pre):
        glob[b] = v
    ns = dict(glob)
    exec(compile(text, filename, "exec"), ns)
    fn = ns[name]
    fn.__globals__.update(glob)
    src = L._Source.__new__(L._Source)
    src.fn, src.filename, src.coloff, src.lineoff = fn, filename, 0, 0
    src.node = gast.parse(text).body[0]
    L._SOURCES[fn] = src
    _ENTRIES[key] = (list(pre), fn)
    return fn


def signature_text(f: Any) -> str:
    try:
        return str(inspect.signature(f))
    except (TypeError, ValueError):
        return "(...)"
