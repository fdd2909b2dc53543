"""Execute examples/quickstart.ipynb in a fresh kernel and check what it computed.

nbclient, nbformat and ipykernel are test extras (``pip install ".[test]"``); the test
is skipped only when they are missing.  The kernel is the interpreter running the tests
(jupyter_client maps the ``python3`` kernel to ``sys.executable``) with the repository
on ``PYTHONPATH``, so it differentiates this checkout's zyg.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "".join(out)


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, \
                "clear the notebook's outputs before committing it"


@pytest.fixture(scope="module")
def executed():
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + env_path if env_path else "")
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()   # raises CellExecutionError if any cell fails
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            os.environ.pop("PYTHONPATH", None)
    return [c for c in nb.cells if c.cell_type == "code"]


def test_notebook_finite_difference_check(executed):
    text = _text(executed[-1])
    m = re.search(r"finite-difference relative error: ([0-9.eE+-]+)", text)
    assert m, f"the last cell should print the finite-difference error, got:\n{text}"
    assert float(m.group(1)) < 1e-7


def test_notebook_outputs(executed):
    texts = [_text(c) for c in executed]
    everything = "\n".join(texts)
    # grad of sin(x) * y + x**2 / y at (1, 2), printed by zyg and by hand
    first = [float(t) for t in texts[1].split()]
    assert len(first) == 2 and first[0] == pytest.approx(first[1], rel=1e-14)
    # the pow loop: (10 * 1.1**9, None)
    assert "None)" in texts[3]
    assert "=== SSA IR of pow_loop ===" in everything
    assert "def pow_loop_adjoint(" in everything
    # the UnsupportedSyntax message names the line in the cell and gives a hint
    assert "'Try' statements are not supported" in everything
    assert "line 2" in everything and "hint:" in everything
