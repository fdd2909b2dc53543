"""Run every script in examples/ as a user would (``python examples/x.py``) and check its output."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").glob("*.py"))


def run_script(path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, str(path)], cwd=str(path.parent), env=env,
                          capture_output=True, text=True, timeout=600)


def test_there_are_examples():
    assert any(p.name == "bessel.py" for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_example_runs(path):
    r = run_script(path)
    assert r.returncode == 0, f"{path.name} failed:\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr


def test_bessel_example_output():
    r = run_script(ROOT / "examples" / "bessel.py")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    m = re.search(r"max error of zyg's derivative against scipy.special.jvp: ([0-9.eE+-]+)", out)
    assert m, out
    assert float(m.group(1)) < 1e-10
    zeros = dict(re.findall(r"first zero of J_(\d): ([0-9.]+)", out))
    assert float(zeros["0"]) == pytest.approx(2.404825557695773, rel=1e-13)
    assert float(zeros["1"]) == pytest.approx(3.831705970207512, rel=1e-13)
    assert float(zeros["2"]) == pytest.approx(5.135622301840683, rel=1e-13)
    m = re.search(r"back\(2\.0\) = \(([0-9.eE+-]+), None\)", out)
    assert m and float(m.group(1)) == pytest.approx(0.029996236270685, rel=1e-12)


def test_readme_example(tmp_path):
    """The README's Python example runs and prints what its comment says."""
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    code += "\nprint(repr(value), repr(dz), repr(dnu))\n"
    script = tmp_path / "readme_example.py"      # zyg reads source code: it must live in a file
    script.write_text(code)
    r = run_script(script)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    expected = re.search(r"print\(dj\(2\.5, 2\)\)\s+# ([0-9.]+)", code).group(1)
    assert lines[0] == expected
    value, dz, dnu = lines[1].split()
    assert float(dz) == float(expected) and dnu == "None"
    assert float(value) == pytest.approx(0.4460590584396173, rel=1e-14)


# --- the documentation stays true --------------------------------------------------------

SHOW_SOURCES = '''
def pow_loop(x, n):
    r = 1.0
    while n > 0:
        n -= 1
        r *= x
    return r


def clipped(x, n):
    r = x
    for i in range(n):
        if r > 2.0:
            r = r * 0.5
        else:
            r = r * x
    return r


def swap(x, n):
    a = x
    b = 1.0
    for i in range(n):
        a, b = b, a * x
    return a + b
'''


def test_docs_show_md_quotes_real_output(tmp_path):
    """Every IR or generated-code excerpt in docs/show.md is verbatim zyg.show output."""
    import importlib.util
    import io

    import zyg

    path = tmp_path / "pow.py"
    path.write_text(SHOW_SOURCES.lstrip("\n"))   # pow_loop on line 1, as in the doc
    spec = importlib.util.spec_from_file_location("zyg_docs_show_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = io.StringIO()
    for name in ("pow_loop", "clipped", "swap"):
        zyg.show(getattr(mod, name), 1.5, 3 if name == "pow_loop" else 4, file=out)
    real = out.getvalue().replace(str(path), "pow.py")
    doc = (ROOT / "docs" / "show.md").read_text()
    blocks = re.findall(r"```(?:python)?\n(.*?)```", doc, re.S)
    quoted = [b for b in blocks
              if "..." not in b and (b.startswith("===") or "_blk" in b or re.match(r"\d+: \(", b))]
    assert len(quoted) >= 8
    for b in quoted:
        assert b in real, ("docs/show.md quotes zyg.show output that zyg no longer produces; "
                           "regenerate the excerpt with python -m zyg show:\n" + b)


def test_docs_name_every_pass():
    """docs/design.md and docs/api.md (ZYG_DUMP_AFTER) list every pass of the pipeline."""
    from zyg.ssa.passes import PIPELINE
    design = (ROOT / "docs" / "design.md").read_text()
    api = (ROOT / "docs" / "api.md").read_text()
    for name, _ in PIPELINE:
        assert f"`{name}`" in design and f"`{name}`" in api, f"pass {name!r} is not documented"


def test_docs_links_resolve():
    """Relative links in README.md and docs/*.md point at files that exist."""
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        # code is not links: dk[blocks, threads](x, dx) in a code span or block
        text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (md.parent / target).exists(), f"{md.name}: broken link {target}"


def test_readme_array_example(tmp_path):
    """The README's array example runs, leaves u0 unchanged and matches finite differences."""
    text = (ROOT / "README.md").read_text()
    code = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "def heat" in c][0]
    code += (
        "\nu1 = u0.copy()\n"
        "assert np.array_equal(u1, np.sin(np.linspace(0.0, np.pi, 64)))   # unchanged by grad\n"
        "h = 1e-6\n"
        "fd = (heat(u1.copy(), 0.2 + h, 500) - heat(u1.copy(), 0.2 - h, 500)) / (2 * h)\n"
        "e = np.zeros(64); e[10] = 1.0\n"
        "fd0 = (heat(u1 + h * e, 0.2, 500) - heat(u1 - h * e, 0.2, 500)) / (2 * h)\n"
        "print(abs(dalpha - fd) / abs(fd), abs(du0[10] - fd0) / abs(fd0))\n"
    )
    script = tmp_path / "readme_arrays.py"
    script.write_text(code)
    r = run_script(script)
    assert r.returncode == 0, r.stderr
    e1, e2 = map(float, r.stdout.split())
    assert e1 < 1e-6 and e2 < 1e-6
