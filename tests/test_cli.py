"""The command line: ``python -m zyg --help | demo | show``."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zyg.__main__ import parse_args_literal

ROOT = Path(__file__).resolve().parents[1]

POW = textwrap.dedent("""
    import math

    def pow_loop(x, n):
        r = 1.0
        while n > 0:
            n -= 1
            r *= x
        return r

    def branchy(x, y):
        if x > y:
            return math.sin(x) * y
        return x * y

    def uses_try(x):
        try:
            return x * x
        except ValueError:
            return 0.0

    if __name__ == "__main__":
        raise SystemExit("the CLI must not run the file's main block")
""")


def zyg_cli(*args: str, cwd: Path = ROOT, default_opt: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if default_opt:
        env.pop("NUMBA_OPT", None)      # numba's default level, as users run it (conftest.py)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "zyg", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("cli") / "model.py"
    p.write_text(POW)
    return p


def test_help():
    r = zyg_cli("--help")
    assert r.returncode == 0
    assert "demo" in r.stdout and "show" in r.stdout
    r = zyg_cli("show", "--help")
    assert r.returncode == 0 and "--args" in r.stdout


def test_no_command_prints_usage():
    r = zyg_cli()
    assert r.returncode == 2
    assert "usage:" in r.stdout


def test_show_pow_loop(model):
    r = zyg_cli("show", f"{model}:pow_loop", "--args", "1.0,3")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # the IR: entry block with named parameters, the loop header with block parameters, a branch
    assert "=== SSA IR of pow_loop ===" in out
    assert "1: (%1 x, %2 n)" in out
    assert re.search(r"^\d+: \(%\d+ n, %\d+ r\)$", out, re.M)
    assert re.search(r"br %\d+ \? \d+\(\) : \d+\(\)", out)
    assert "argument kinds: %1: float, %2: int" in out
    # the generated code: primal with a tape push, adjoint, fused value-and-gradient
    assert "def pow_loop_primal(x_1, n_2):" in out
    assert "def pow_loop_adjoint(" in out
    assert "def pow_loop_vg(" in out
    assert re.search(r"_fs\[_fsp \+ 0\] = r_\d+", out)
    assert "while True:" in out and "_blk = " in out


def test_show_default_args_are_floats(model):
    r = zyg_cli("show", f"{model}:pow_loop")
    assert r.returncode == 0, r.stderr
    assert "argument kinds: %1: float, %2: float" in r.stdout


def test_show_argnums_and_relative_path(model):
    r = zyg_cli("show", "model.py:branchy", "--argnums", "0,1", cwd=model.parent)
    assert r.returncode == 0, r.stderr
    assert "=== SSA IR of branchy ===" in r.stdout
    assert "math.sin(%1)" in r.stdout
    assert "dy_2" in r.stdout      # the adjoint accumulates a cotangent for y too


def test_show_module_path():
    r = zyg_cli("show", "zyg.__main__:taylor", "--args", "0.5,10")
    assert r.returncode == 0, r.stderr
    assert "=== SSA IR of taylor ===" in r.stdout


def test_show_unsupported_syntax_is_clean(model):
    r = zyg_cli("show", f"{model}:uses_try")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "UnsupportedSyntax" in r.stderr and "'Try' statements are not supported" in r.stderr
    assert f'File "{model}", line' in r.stderr and "hint:" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["show", "{model}:nope"], "has no function 'nope'"),
    (["show", "/does/not/exist.py:f"], "no such file"),
    (["show", "{model}"], "expected FILE.py:FUNCTION"),
    (["show", "{model}:pow_loop", "--args", "1.0"], "takes 2 arguments (x, n) but --args gives 1"),
    (["show", "{model}:pow_loop", "--args", "1.0,("], "--args must be Python literals"),
    (["show", "{model}:pow_loop", "--argnums", "7"], "--argnums 7"),
])
def test_show_usage_errors_are_clean(model, args, message):
    r = zyg_cli(*[a.format(model=model) for a in args])
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert message in r.stderr


def test_parse_args_literal():
    assert parse_args_literal("1.0,3") == (1.0, 3)
    assert parse_args_literal("2") == (2,)
    assert parse_args_literal("True, -0.5") == (True, -0.5)
    assert parse_args_literal(None) == ()


def test_demo_quick():
    r = zyg_cli("demo", "--quick", default_opt=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    errors = [float(e) for e in re.findall(r"rel\. error ([0-9.]+e[+-]\d+)", out)]
    # pow, taylor, bessel: one each; projectile: three arguments; heat: an array and alpha
    assert len(errors) >= 8, out
    assert max(errors) < 1e-6, out
    for name in ("pow_loop", "taylor", "bessel_j", "projectile", "heat"):
        assert re.search(rf"^{name}\s+\S+e[+-]\d+\s", out, re.M), f"no summary row for {name}:\n{out}"
    assert "numba primal" in out and "ratio" in out and "first call" in out
    assert "FAILED" not in out
