"""Back ends: turn generated source into callables (``python``) or numba code (``cpu``).

Generated source is written to a real file in the cache directory (``ZYG_CACHE_DIR``,
default ``~/.cache/zyg``), named by a hash of its text and zyg's version, so that
tracebacks and pdb show real lines and numba's ``cache=True`` can reuse machine code
in a later process.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
import types
from typing import Any, Dict, List

import numpy as np

from . import numerics
from .version import __version__
from .errors import CompileError
from .ssa.emit import Code

TARGETS = ("python", "cpu")

_njit_cache: Dict[Any, Any] = {}
# first calls from several threads: one builds a module at a time (the fast path never locks)
LOAD_LOCK = threading.RLock()


def cache_dir() -> str:
    d = os.environ.get("ZYG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "zyg")
    os.makedirs(d, exist_ok=True)
    return d


def wrapper_for(target: str):
    """How objects referenced by generated code are prepared for the target."""
    if target == "python":
        return lambda obj: obj
    import numba
    import math
    import numpy as np
    # math functions numba's nopython mode lacks, and their numpy equivalents
    subst = {id(math.cbrt): np.cbrt, id(math.fmod): np.fmod}
    from .rules import special        # scipy.special: numba-compilable implementations
    subst.update({id(fn): impl for fn, impl in special.numba_substitutes().items()})

    def wrap(obj):
        if id(obj) in subst:
            return subst[id(obj)]
        if isinstance(obj, types.FunctionType) and not \
                (getattr(obj, "__module__", "") or "").startswith("numpy"):
            # (numpy's Python-level functions such as np.ones have numba implementations)
            key = (id(obj), numerics.options_tag())
            got = _njit_cache.get(key)
            if got is None or got[0] is not obj:
                got = (obj, numerics.njit(obj))
                if getattr(obj, "_zyg_uncacheable", False):
                    # object mode inside (zyg/ssa/raising.py): callers skip the disk cache
                    got[1]._zyg_uncacheable = True
                _njit_cache[key] = got
            return got[1]
        return obj
    return wrap


def write_source(text: str, stem: str) -> str:
    h = hashlib.sha256((__version__ + "\n" + text).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"{stem}_{h}.py")
    if not _holds(path, text):
        # missing, or damaged (truncated, edited): tracebacks and numba's cache read it
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def _code_bytes(co: types.CodeType, h) -> None:
    h.update(co.co_code)
    h.update(repr(co.co_names).encode())
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            _code_bytes(c, h)
        else:
            h.update(repr(c).encode())


_ATOMS = (bool, int, float, complex, str, bytes, type(None))


def _fingerprint_obj(obj: Any, h, seen: set, depth: int) -> None:
    """Feed into ``h`` what compiled code that refers to ``obj`` depends on: a function's
    code, defaults, closure and the globals it reads (recursively), an array's contents
    (numba freezes global arrays), a constant's value."""
    if isinstance(obj, _ATOMS) or isinstance(obj, np.number):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
        return
    if id(obj) in seen or depth > 8:
        h.update(b"@")
        return
    seen.add(id(obj))
    if isinstance(obj, types.ModuleType):
        h.update(f"module:{obj.__name__};".encode())
    elif isinstance(obj, np.ndarray):
        h.update(f"array:{obj.dtype.str}:{obj.shape};".encode())
        h.update(hashlib.sha256(np.ascontiguousarray(obj).tobytes()).digest())
    elif isinstance(obj, tuple):
        for e in obj:
            _fingerprint_obj(e, h, seen, depth + 1)
    elif hasattr(obj, "py_func"):
        _fingerprint_obj(obj.py_func, h, seen, depth)
    elif isinstance(obj, types.FunctionType):
        mod = (getattr(obj, "__module__", "") or "").split(".")[0]
        h.update(f"fn:{mod}.{obj.__qualname__};".encode())
        if mod in _LIBRARY_MODULES:
            return
        _code_bytes(obj.__code__, h)
        for d in obj.__defaults__ or ():
            _fingerprint_obj(d, h, seen, depth + 1)
        for c in obj.__closure__ or ():
            try:
                _fingerprint_obj(c.cell_contents, h, seen, depth + 1)
            except ValueError:
                pass
        g = obj.__globals__
        for n in _names_of(obj.__code__):
            if n in g:
                _fingerprint_obj(g[n], h, seen, depth + 1)
    elif isinstance(obj, type):
        h.update(f"type:{obj.__module__}.{obj.__qualname__};".encode())
    elif callable(obj) and not hasattr(obj, "__dict__"):
        h.update(f"builtin:{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj)!r};"
                 .encode())
    else:
        h.update(f"obj:{type(obj).__module__}.{type(obj).__qualname__};".encode())
        for k, v in sorted(getattr(obj, "__dict__", {}).items()):
            h.update(k.encode())
            _fingerprint_obj(v, h, seen, depth + 1)


def _names_of(co: types.CodeType) -> List[str]:
    out = list(co.co_names)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            out += _names_of(c)
    return out


_LIBRARY_MODULES = {"numpy", "numba", "math", "cmath", "builtins", "scipy", "zyg", "operator",
                    "llvmlite"}


def fingerprint(ns: Dict[str, Any]) -> str:
    """A hash of everything the objects a generated module refers to depend on.  It goes
    into the module's text (and so its file name), so that numba's disk cache, which keys
    machine code by the source file only, never serves code built against an older
    version of a helper, a rule or a global it reads."""
    h = hashlib.sha256()
    seen: set = set()
    for name in sorted(ns):
        h.update(name.encode() + b"=")
        _fingerprint_obj(ns[name], h, seen, 0)
    return h.hexdigest()[:16]


def _holds(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == text
    except (OSError, UnicodeDecodeError):
        return False


def load(code: Code, ns: Dict[str, Any], names: List[str], target: str, stem: str):
    """Exec the generated module and return the named functions, compiled for ``target``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    # the options line keeps code compiled with other options (or for the other target)
    # in another file, module and numba cache entry
    text = (f"# generated by zyg {__version__}; do not edit\n{numerics.options_tag(target)}\n"
            f"# depends on: {fingerprint(ns)}\n" + code.text())
    path = write_source(text, stem)
    # a real module (registered in sys.modules) so that numba's on-disk cache can
    # rebuild the function's environment in a later process; one per target, since the
    # cpu target replaces the module's functions by numba dispatchers
    modname = f"zyg_gen_{target}_" + os.path.splitext(os.path.basename(path))[0]
    with LOAD_LOCK:
        mod = sys.modules.get(modname)
        if mod is None or getattr(mod, "__zyg_ns_ids__", None) != _ns_signature(ns):
            mod = types.ModuleType(modname)
            mod.__file__ = path
            mod.__dict__.update(ns)
            mod.__zyg_ns_ids__ = _ns_signature(ns)
            if target == "python":
                # numpy's float semantics: inf / nan where Python raises (zyg/numerics.py)
                mod.__dict__.update(numerics.HELPERS)
                exec(numerics.python_semantics(text, path, ns), mod.__dict__)
            else:
                exec(compile(text, path, "exec"), mod.__dict__)
            sys.modules[modname] = mod
        return _load_names(mod, code, ns, names, target, path)


def _load_names(mod, code: Code, ns: Dict[str, Any], names: List[str], target: str, path: str):
    glob = mod.__dict__
    out = []
    # code calling object-mode helpers (recursive calls) cannot be reloaded from numba's
    # disk cache in another process (their environments are not cached): compile it afresh
    cache = not any(getattr(v, "_zyg_uncacheable", False) for v in ns.values())
    for n in names:
        f = glob[n]
        if target == "cpu" and not hasattr(f, "py_func"):
            f = numerics.njit(f, cache=cache)
            glob[n] = f
        out.append(f)
    locs = {k + 3: v for k, v in code.locs.items()}   # +3 for the header comment lines
    return out, path, locs


def compile_for_types(dispatcher, sig: tuple) -> None:
    """``dispatcher.compile(sig)``, rebuilding instead of failing when numba's on-disk
    cache of it is damaged (a truncated index or data file raises from numba's loader)."""
    import numba.core.errors as nerr
    try:
        dispatcher.compile(sig)
        return
    except nerr.NumbaError:
        raise
    except Exception:
        cache = getattr(dispatcher, "_cache", None)
        if cache is None or not getattr(cache, "_cache_file", None):
            raise
    # forget the damaged entries (numba rewrites an empty index) and compile afresh
    try:
        cache.flush()
    except Exception:
        _drop_cache_files(cache)
    dispatcher.compile(sig)


def _drop_cache_files(cache) -> None:
    try:
        path = cache._cache_path
        prefix = cache._cache_file._index_name.rsplit(".", 1)[0]
    except AttributeError:
        return
    for name in os.listdir(path):
        if name.startswith(prefix):
            try:
                os.remove(os.path.join(path, name))
            except OSError:
                pass


def _ns_signature(ns: Dict[str, Any]) -> tuple:
    return tuple(sorted((k, id(v)) for k, v in ns.items()))


_LINE_RE = re.compile(r'File "([^"]+)", line (\d+)')


def compile_error(exc: Exception, path: str, locs, fname: str) -> CompileError:
    """Re-raise a numba error as a CompileError naming the generated and the user line."""
    msg = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))   # numba's terminal colours
    gen_line = None
    for m in _LINE_RE.finditer(msg):
        if os.path.abspath(m.group(1)) == os.path.abspath(path):
            gen_line = int(m.group(2))
    loc = locs.get(gen_line) if gen_line else None
    first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
    # the reason numba gives, without its pipeline banner and source excerpts
    reason = []
    for ln in msg.splitlines()[1:]:
        t = ln.strip()
        if not t or t.startswith(("File ", "During:", "^", "raise ", "- ", "No implementation")) or \
                t.startswith("Failed in") or "<source" in t:
            continue
        reason.append(t)
        if len(reason) == 2:
            break
    text = f"numba could not compile the code zyg generated for {fname!r}: {first}"
    if reason:
        text += "\n  " + "\n  ".join(reason)
    if gen_line:
        text += f"\n  generated code: {path}, line {gen_line}"
    hint = ("run with target='python' to debug, or check that the function is numba-compatible; "
            "zyg.show(f) prints the generated code")
    if loc is not None:
        return CompileError(text, loc.filename, loc.lineno, loc.col, hint)
    return CompileError(text, None, None, None, hint)
