"""Record every derivative zyg computes, to compare two versions of zyg bit for bit.

Issue 14 (the program tree and back-end seam) must not change any gradient: on every
function of the test suite and every benchmark workload, the results on cpu before and
after a refactoring are equal to the bit.  This module records them and compares records.

* As a pytest plugin (works on any version of zyg: it wraps the public entry points
  ``grad``, ``value_and_grad``, ``pullback``, ``jvp``, ``hvp``, ``hessian``, ``jacobian`` of
  ``zyg`` and ``zyg.api`` before the test modules import them)::

      ZYG_GRADRECORD=/tmp/before.jsonl python -m pytest -p scripts.gradrecord tests

* On the benchmark workloads (every case, the quick and the full arguments)::

      ZYG_GRADRECORD=/tmp/before.jsonl python -m scripts.gradrecord bench

* Compare two records::

      python -m scripts.gradrecord compare /tmp/before.jsonl /tmp/after.jsonl

A record line is ``{"key": ..., "digest": ...}``: the key names the differentiated function
(module and qualified name), the entry point, its options (target, argnums), a digest of the
input bytes and the occurrence count of that key; the digest is a SHA-1 of the result's
bytes (arrays with dtype and shape, floats as IEEE bits, nested tuples/lists/dicts in order)
or of the exception type when the call raised.  Keys present in one record only (tests whose
inputs are random, say) are counted and listed, not compared.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import sys
from collections import Counter
from typing import Any

_OUT = os.environ.get("ZYG_GRADRECORD")
_SEEN: Counter = Counter()
_FILE = None


def _feed(h, x: Any, depth: int = 0) -> None:
    import numpy as np
    if depth > 20:
        h.update(b"<deep>")
        return
    if isinstance(x, np.ndarray):
        h.update(f"A{x.dtype.str}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, (bool, np.bool_)):
        h.update(b"B1" if x else b"B0")
    elif isinstance(x, (int, np.integer)):
        h.update(f"I{int(x)}".encode())
    elif isinstance(x, (float, np.floating)):
        h.update(b"F" + struct.pack("<d", float(x)))
    elif isinstance(x, (complex, np.complexfloating)):
        h.update(b"C" + struct.pack("<dd", x.real, x.imag))
    elif isinstance(x, (tuple, list)):
        h.update(f"T{len(x)}(".encode())
        for v in x:
            _feed(h, v, depth + 1)
        h.update(b")")
    elif isinstance(x, dict):
        h.update(f"D{len(x)}(".encode())
        for k in x:
            h.update(repr(k).encode())
            _feed(h, x[k], depth + 1)
        h.update(b")")
    elif x is None:
        h.update(b"N")
    elif callable(x):
        h.update(b"<fn>")
    else:
        h.update(type(x).__name__.encode())


def _digest(x: Any) -> str:
    h = hashlib.sha1()
    _feed(h, x)
    return h.hexdigest()


def _name(f: Any) -> str:
    f = getattr(f, "__func__", f)
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__name__)}"


def _emit(key: str, result: Any = None, exc: BaseException = None) -> None:
    global _FILE
    if _OUT is None:
        return
    _SEEN[key] += 1
    line = {"key": f"{key}#{_SEEN[key]}",
            "digest": ("raise " + type(exc).__name__) if exc is not None else _digest(result)}
    if _FILE is None:
        _FILE = open(_OUT, "a")
    _FILE.write(json.dumps(line) + "\n")
    _FILE.flush()


def _recording(fn, key: str):
    """``fn`` with every call's result recorded under ``key`` + the inputs' digest."""
    if not callable(fn) or getattr(fn, "_zyg_recorded", False):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        k = f"{key}|in={_digest((args, kwargs))}"
        try:
            out = fn(*args, **kwargs)
        except BaseException as e:          # the same error before and after is a match
            _emit(k, exc=e)
            raise
        if "pullback" in key and isinstance(out, tuple) and len(out) == 2 and callable(out[1]):
            _emit(k, out[0])
            return out[0], _recording(out[1], k + "|back")
        _emit(k, out)
        return out
    call._zyg_recorded = True
    return call


def _opts(kwargs: dict) -> str:
    return ",".join(f"{k}={kwargs[k]!r}" for k in sorted(kwargs) if k != "doc")


def _wrap_transform(name: str, orig):
    """``grad``-like entry points: ``orig(f, *opts) -> callable`` (or a decorator)."""
    @functools.wraps(orig)
    def transform(f=None, *args, **kwargs):
        if f is None:
            return lambda g: transform(g, *args, **kwargs)
        return _recording(orig(f, *args, **kwargs),
                          f"{name}({_name(f)};{args!r};{_opts(kwargs)})")
    transform._zyg_recorded = True
    return transform


def _wrap_direct(name: str, orig):
    """``pullback(f, *args)``, ``jvp(f, primals, tangents)``, ``hvp(f, x, v)``."""
    @functools.wraps(orig)
    def direct(f, *args, **kwargs):
        return _recording(lambda *a, **k: orig(f, *a, **k),
                          f"{name}({_name(f)};{_opts(kwargs)})")(*args, **kwargs)
    direct._zyg_recorded = True
    return direct


def install() -> None:
    import zyg
    import zyg.api as api
    for name in ("grad", "value_and_grad", "hessian", "jacobian"):
        orig = getattr(api, name, None)
        if orig is not None and not getattr(orig, "_zyg_recorded", False):
            w = _wrap_transform(name, orig)
            setattr(api, name, w)
            if getattr(zyg, name, None) is orig:
                setattr(zyg, name, w)
    for name in ("pullback", "jvp", "hvp"):
        orig = getattr(api, name, None)
        if orig is not None and not getattr(orig, "_zyg_recorded", False):
            w = _wrap_direct(name, orig)
            setattr(api, name, w)
            if getattr(zyg, name, None) is orig:
                setattr(zyg, name, w)


if _OUT is not None and "pytest" in sys.modules:
    install()


def bench() -> None:
    """Every benchmark case, quick and full arguments, through ``zyg.value_and_grad``."""
    install()
    import zyg
    from benchmarks import zyg_api
    from benchmarks.workloads import WORKLOADS
    for w in WORKLOADS:
        for case in w.cases:
            for quick in (True, False):
                args = case.arguments(quick)
                vg = zyg_api.value_and_grad(zyg, w.fn, w.argnums)
                vg(*args)
                print(w.case_id(case), "quick" if quick else "full", flush=True)


def _load(path: str) -> dict:
    out = {}
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            out[r["key"]] = r["digest"]
    return out


def compare(a: str, b: str) -> int:
    ra, rb = _load(a), _load(b)
    both = sorted(set(ra) & set(rb))
    diff = [k for k in both if ra[k] != rb[k]]
    only_a = sorted(set(ra) - set(rb))
    only_b = sorted(set(rb) - set(ra))
    cpu = [k for k in both if "'cpu'" in k or "target=" not in k]
    print(f"compared {len(both)} results ({len(cpu)} on cpu, the default target): "
          f"{len(both) - len(diff)} equal to the bit, {len(diff)} different; "
          f"{len(only_a)} only in {a}, {len(only_b)} only in {b}")
    for k in diff:
        print("DIFFERENT", k, ra[k], rb[k])
    for k in only_a[:20]:
        print("only before:", k)
    for k in only_b[:20]:
        print("only after: ", k)
    return 1 if diff else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["bench"]:
        bench()
    elif sys.argv[1:2] == ["compare"]:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        print(__doc__)
