"""Dump the generated source of many functions, to compare two versions of zyg to the byte.

    PYTHONPATH=<worktree> python scripts/code_text_dump.py OUTDIR

writes one file per (function, view) into OUTDIR: ``zyg.show`` (python target), the text of
``emit_fused``, ``emit_split`` and forward mode (jvp) on both targets, and every module
``zyg.hessian`` and ``zyg.grad`` load (python target), each with structured emission on and
off.  Run it on two checkouts and ``diff -r`` the folders (an error is written as its
message, so a case that fails in both fails the same way).  Inputs: every
benchmark workload (its quick arguments) and the test functions listed below.
"""
from __future__ import annotations

import io
import os
import re
import sys
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

import zyg  # noqa: E402
from zyg import backends  # noqa: E402
from zyg.api import _kinds, _with_hidden, ssa_of  # noqa: E402
import zyg.pullbacks.structured as structured  # noqa: E402
from zyg.pullbacks.forward import Forward  # noqa: E402
from zyg.pullbacks.transform import emit_fused, emit_split, plan  # noqa: E402
from zyg.ssa.emit import _ident  # noqa: E402


def cases():
    """(label, function, args, argnums) for every function compared."""
    from benchmarks.workloads import WORKLOADS
    for w in WORKLOADS:
        yield f"wl_{w.name}", w.fn, w.cases[0].arguments(True), tuple(w.argnums)
    import test_structured as ts
    for f, points, _ in ts.SCALAR:
        yield f"st_{f.__name__}", f, points[0], (0,)
    for f, make, argnums, _ in ts.ARRAYS + ts.FORWARD:
        a = argnums if isinstance(argnums, tuple) else (argnums,)
        yield f"st_{f.__name__}", f, make(), a
    yield "st_slice_records", ts.slice_records, (np.ones(6), 0.5, 3), (0, 1)
    import test_forward_structured as tf
    yield "fs_nest", tf.nest, (0.7, 4), (0,)
    yield "fs_with_break", tf.with_break, (1.4, 9), (0,)
    import test_loop_exits as tl
    for k, (f, x) in enumerate(tl.CASES):
        yield f"le_{k}_{f.__name__}", f, (x,), (0,)
    import test_checkpointed as tc
    for name in sorted(tc.CASES):
        f, plain, make, argnums = tc.CASES[name]
        a = argnums if isinstance(argnums, tuple) else (argnums,)
        yield f"ck_{name}", f, make(7, 2), a
        yield f"ck_{name}_plain", plain, make(7, 2), a
    import test_calls as tcl
    for f, args in [(tcl.power, (1.3, 6)), (tcl.tree, (0.7, 4)), (tcl.even_steps, (0.7, 5)),
                    (tcl.recursion_in_a_loop, (0.6, 5)), (tcl.spectrum_loss, (np.ones(8),))]:
        yield f"rc_{f.__name__}", f, args, (0,)
    import test_indexing as tx
    for f, args, argnums in [
            (tx.gather, (tx.x5, tx.IDX), 0), (tx.gather_rows_cols, (tx.X34, tx.IDX3), 0),
            (tx.gather_in_loop, (tx.x5, tx.IDX), 0), (tx.scatter, (tx.x5, tx.IDX), 0),
            (tx.scatter_scalar, (tx.x5, tx.IDX, 0.7), (0, 2)), (tx.scatter_add, (tx.x5, tx.IDX), 0),
            (tx.scatter_rows, (tx.X34, tx.IDX3, np.ones(4)), (0, 2)),
            (tx.scatter_in_loop, (tx.x5, tx.IDX), 0), (tx.mask_read, (tx.x6,), 0),
            (tx.mask_read_2d, (tx.X34,), 0), (tx.mask_write, (tx.x6,), 0),
            (tx.mask_write_early_return, (tx.x6,), 0), (tx.mask_write_2d, (tx.X34,), 0),
            (tx.mask_scale_in_loop, (tx.x6,), 0), (tx.where_indices, (tx.x6,), 0),
            (tx.where_loop, (tx.x6,), 0), (tx.ndindex_2d, (tx.X34,), 0),
            (tx.ndindex_args_break, (tx.X34,), 0), (tx.flat_iter, (tx.X34,), 0),
            (tx.flat_index, (tx.X34,), 0)]:
        yield f"ix_{f.__name__}", f, args, argnums if isinstance(argnums, tuple) else (argnums,)
    import test_index_unsigned as ti
    yield "iu_shifted_reads", ti.shifted_reads, (np.ones(6), 0.5), (0, 1)
    yield "iu_mixed_indices", ti.mixed_indices, (np.ones(6), 0.5), (0, 1)
    yield "iu_packed_triangle", ti.packed_triangle, (np.ones(6), np.ones(3)), (0, 1)


def views(f, args, argnums):
    """(view name, text) of each generated text of ``f``."""
    def guard(fn):
        try:
            return fn()
        except Exception as e:      # compared like the text: the same failure both sides
            return f"ERROR {type(e).__name__}: {e}\n"
    out = io.StringIO()
    yield "show", guard(lambda: zyg.show(f, *args, argnums=argnums, file=out) and out.getvalue())
    ir = ssa_of(f)
    name = _ident(ir.name)
    for target in ("cpu", "python"):
        def plan_():
            kinds = _kinds(_with_hidden(ir, args), ir.name)
            return plan(ir, kinds, list(argnums), backends.get(target))

        def fused():
            p = plan_()
            return emit_fused(p, name + "_vg", value=True)[1].text(p.backend.storage)

        def split():
            p = plan_()
            return emit_split(p, name)[0].text(p.backend.storage)

        def jvp():
            p = plan_()
            return Forward(p).emit(name + "_jvp").text(p.backend.storage)
        yield f"fused_{target}", guard(fused)
        yield f"split_{target}", guard(split)
        yield f"jvp_{target}", guard(jvp)
    # what the api loads (python target: no compiling): zyg.hessian's modules (driver.py's
    # gradient source, forward.py's jvp, api.py's hvp/hessian) and zyg.grad's
    from zyg.backends.base import Backend
    for view, run in (("loaded_hessian", lambda g: zyg.hessian(g, argnums=argnums[0],
                                                              target="python")(*args)),
                      ("loaded_grad", lambda g: zyg.grad(g, argnums=argnums,
                                                         target="python")(*args))):
        texts = []
        load = Backend.load

        def spy(self, code, ns, names, stem, texts=texts, load=load):
            texts.append(f"# {stem}\n" + code.text(self.storage))
            return load(self, code, ns, names, stem)
        Backend.load = spy
        try:
            g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__,
                                   f.__closure__)
            err = guard(lambda: (run(g), "")[1])
        finally:
            Backend.load = load
        yield view, "".join(texts) + (err if err.startswith("ERROR") else "")


def normal(text: str) -> str:
    """``text`` without what differs between two checkouts: their paths, the cache folder,
    and the content hashes of generated file names (their text holds the paths)."""
    text = text.replace(ROOT, "<ROOT>")
    cache = os.environ.get("ZYG_CACHE_DIR")
    if cache:
        text = text.replace(cache, "<CACHE>")
    return re.sub(r"_[0-9a-f]{16}\.py", "_<HASH>.py", text)


def main(outdir: str) -> None:
    os.makedirs(outdir, exist_ok=True)
    n = 0
    seen = set()
    for label, f, args, argnums in cases():
        while label in seen:
            label += "_"
        seen.add(label)
        for on in (True, False):
            structured.STRUCTURED = on
            for view, text in views(f, args, argnums):
                with open(os.path.join(outdir, f"{label}.{'s' if on else 'd'}.{view}.txt"), "w") as fh:
                    fh.write(normal(text))
                n += 1
    structured.STRUCTURED = True
    print(f"{n} texts written to {outdir}")


if __name__ == "__main__":
    main(sys.argv[1])
