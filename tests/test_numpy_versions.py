"""zyg works with the numpy names that numpy 2.5 removed or deprecated gone (issue 24).

numpy 2.5 (Python >= 3.12) removed ``np.row_stack`` and ``np.chararray`` and deprecated
``np.fix`` and ``np.typename``; this machine's numpy may still have them.  A fresh
process deletes them before importing zyg, then imports every rule table, builds the
docs table from the registries, differentiates a stacking function on the python target
(numba registers ``np.row_stack`` when it compiles on a numpy that should have it, so the cpu
target is not simulated), and checks the CUDA back end's shim restores ``np.row_stack``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import numpy as np
    GONE = ("row_stack", "chararray", "fix", "typename")
    np.__all__ = [n for n in np.__all__ if n not in GONE]
    for n in GONE:
        if n in vars(np):
            delattr(np, n)
    assert not hasattr(np, "row_stack") and not hasattr(np, "fix")

    import zyg
    from zyg.backends import cuda
    from zyg.rules import table

    text = table.supported_table()
    assert "np.vstack" in text and "row_stack" not in text

    def f(x):
        return np.sum(np.vstack((x, 2.0 * x)) ** 2)

    g = zyg.grad(f, target="python")(np.arange(3.0))
    assert np.allclose(g, 10.0 * np.arange(3.0)), g

    assert cuda.numpy_shim() and np.row_stack is np.vstack
    assert not cuda.numpy_shim()        # applied once
    print("ok")
""")


def test_zyg_imports_and_differentiates_without_the_names_numpy_2_5_removed(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               ZYG_CACHE_DIR=str(tmp_path / "cache"))
    script = tmp_path / "np25.py"          # a file: zyg reads f's source
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
