"""What every back end shares: the files generated modules live in, and their keys.

Generated source is written to a real file in the cache directory (``ZYG_CACHE_DIR``,
default ``~/.cache/zyg``), named by a hash of its text and zyg's version, so that
tracebacks and pdb show real lines and numba's ``cache=True`` can reuse machine code
in a later process.  The back ends themselves (python, cpu) are in ``zyg/backends/``.
"""
from __future__ import annotations

import hashlib
import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
import time
import types
from typing import Any, Dict, List, Optional

import numpy as np

from .version import __version__
from .caches import BUILD_LOCK
from .errors import CompileError

# first calls from several threads: one builds a module at a time (the fast path never
# locks); numba's compiler lock itself (zyg/caches.py: one lock, no order to get wrong)
LOAD_LOCK = BUILD_LOCK


def cache_dir() -> str:
    d = os.environ.get("ZYG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "zyg")
    os.makedirs(d, exist_ok=True)
    return d


def write_source(text: str, stem: str) -> str:
    h = hashlib.sha256((__version__ + "\n" + text).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"{stem}_{h}.py")
    if not _holds(path, text):
        # missing, or damaged (truncated, edited): tracebacks and numba's cache read it
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            # where another process (an MPI rank, a pytest worker) wrote it meanwhile, its
            # file stays: replacing it would change the modification time that numba's
            # cache index of it was stamped with
            os.link(tmp, path)
            os.remove(tmp)
        except OSError:
            if _holds(path, text):
                os.remove(tmp)
            else:
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


# numba_mpi: its functions read addresses of this process (mpi4py's handles), and code
# that calls them is never cached by numba (it calls MPI through ctypes pointers); hashing
# those addresses made the generated text differ from rank to rank (tasks/mpi_native.py)
_LIBRARY_MODULES = {"numpy", "numba", "math", "cmath", "builtins", "scipy", "zyg", "operator",
                    "llvmlite", "numba_mpi"}


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


# numba's SSA reconstruction (numba/core/ssa.py: _find_def_from_top and
# _find_def_from_bottom call each other once per block on the way to a definition) is as
# deep as the chain of blocks a variable's definition is looked up through: a straight-line
# function of 300 statements is ~500 blocks in numba's CFG (every zero-cotangent guard is
# an 'if'), and RecursionError at Python's default limit of 1000.  It is numba's code, so
# the limit is raised while numba compiles zyg's generated modules, to a bound: on
# Python >= 3.11 these pure-Python calls take no C stack, and below that each frame takes
# well under 1 KiB of the 8 MiB of the main thread.
NUMBA_RECURSION_LIMIT = 20000
_LIMIT_LOCK = threading.Lock()
_LIMIT_USERS = [0, 0]        # compiles running, the limit before the first of them


@contextlib.contextmanager
def _numba_recursion_limit():
    with _LIMIT_LOCK:
        if _LIMIT_USERS[0] == 0:
            _LIMIT_USERS[1] = sys.getrecursionlimit()
            if _LIMIT_USERS[1] < NUMBA_RECURSION_LIMIT:
                sys.setrecursionlimit(NUMBA_RECURSION_LIMIT)
        _LIMIT_USERS[0] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _LIMIT_USERS[0] -= 1
            if _LIMIT_USERS[0] == 0 and sys.getrecursionlimit() == NUMBA_RECURSION_LIMIT:
                sys.setrecursionlimit(_LIMIT_USERS[1])


_NOTICE_AFTER = [None]   # seconds; None: the env var ZYG_COMPILE_NOTICE (default 2), 0: off
_NOTICE_DEPTH = threading.local()


def set_compile_notice(seconds: Optional[float]) -> None:
    """Log a one-line notice (logger ``"zyg"``, level WARNING) when numba takes longer than
    ``seconds`` to compile code zyg generated, naming the function; ``0`` or ``False``
    silences it, ``None`` follows the env var ``ZYG_COMPILE_NOTICE`` (default 2 s)."""
    _NOTICE_AFTER[0] = None if seconds is None else float(seconds or 0)


def _notice_after() -> float:
    if _NOTICE_AFTER[0] is not None:
        return _NOTICE_AFTER[0]
    try:
        return float(os.environ.get("ZYG_COMPILE_NOTICE", "2") or 0)
    except ValueError:
        return 2.0


@contextlib.contextmanager
def compile_notice(fname: str, locs=None):
    """Around a numba compile of code generated for ``fname``: past the notice delay, one
    line says what is being compiled (the outermost compile of a thread only)."""
    delay = _notice_after()
    depth = getattr(_NOTICE_DEPTH, "n", 0)
    if delay <= 0 or depth:
        yield
        return
    where = ""
    lines = [v for v in (locs or {}).values() if getattr(v, "lineno", None)]
    if lines:
        first = min(lines, key=lambda v: v.lineno)
        where = f" ({os.path.basename(first.filename)}:{first.lineno})"
    t0 = time.perf_counter()

    def notice():
        logging.getLogger("zyg").warning(
            "zyg: numba is still compiling the code generated for %r%s after %.0f s; a first "
            "call compiles once per argument types (later processes load it from the cache); "
            "zyg.set_compile_notice(0) silences this", fname, where, time.perf_counter() - t0)

    timer = threading.Timer(delay, notice)
    timer.daemon = True
    _NOTICE_DEPTH.n = depth + 1
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _NOTICE_DEPTH.n = depth


def compile_for_types(dispatcher, sig: tuple) -> None:
    with _numba_recursion_limit(), _other_processes_wait(dispatcher), _quiet_matmul_layout():
        _compile_for_types(dispatcher, sig)


@contextlib.contextmanager
def _quiet_matmul_layout():
    """Generated adjoints multiply by transposes (``a.T @ dy``) with no copy; numba warns
    ("'@' is faster on contiguous arrays") when an operand has the 'A' layout (a view the
    user passed) and copies it itself.  That is the right thing, and the warning would point
    at generated code the user cannot change: silenced while zyg compiles."""
    import warnings
    from numba.core.errors import NumbaPerformanceWarning
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'@' is faster on contiguous arrays",
                                category=NumbaPerformanceWarning)
        yield


#: longest wait (seconds) for another process compiling the same module
COMPILE_WAIT = 900.0


@contextlib.contextmanager
def _other_processes_wait(dispatcher):
    """While this process compiles a module numba caches on disk, other processes that
    compile the same module (the ranks of an MPI program, pytest's workers, a pool's
    workers) wait for it, then load its machine code from the cache instead of compiling it
    too.  A lock file beside numba's index, held with ``flock`` (released if the process
    dies); taken inside numba's own compiler lock, so that this process's threads queue on
    numba's lock first.  After ``COMPILE_WAIT`` seconds a process compiles anyway."""
    try:
        import fcntl
        cache = dispatcher._cache
        path = os.path.join(cache._cache_path, cache._cache_file._index_name + ".zyglock")
    except (ImportError, AttributeError):       # no disk cache (NullCache) or no flock
        yield
        return
    from numba.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:
        if path in _HELD:            # this process holds it (a nested compile of the module)
            yield
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            yield
            return
        # inside another module's compile (this process holds its lock) nobody waits: two
        # processes each holding one module's lock and compiling the other's as a callee
        # would otherwise wait for each other until COMPILE_WAIT
        nested = bool(_HELD)
        _HELD.add(path)
        try:
            deadline = time.monotonic() + (0.0 if nested else COMPILE_WAIT)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
            yield
        finally:
            _HELD.discard(path)
            os.close(fd)        # releases the lock


_HELD: set = set()      # lock files this process holds (under numba's compiler lock)


def _compile_for_types(dispatcher, sig: tuple) -> None:
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


def ns_signature(ns: Dict[str, Any]) -> tuple:
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
