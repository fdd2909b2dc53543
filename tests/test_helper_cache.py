"""zyg's own helpers on disk (``numerics.on_disk``, ``backends/cpu.helper_cache``, issue 24).

The tape's ``grow``, the shadows' ``zeros_as`` and the gradient's ``has_nan`` keep their
machine code in the cache directory: a second process building a *new* gradient loads them
instead of compiling them.  What must hold:

* a second process loads them (numba's cache hits), and the gradient is right there;
* the place is keyed by zyg's sources: a changed source file (an upgrade, an edit) gives
  another place, so machine code compiled from other sources is never loaded;
* only with zyg's default options (numba's cache key has no compile options): with bounds
  checking on, the helpers are compiled per process;
* only zyg's own module-level functions without closures qualify.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zyg
from zyg import backends
from zyg.backends import cpu
from zyg.pullbacks import arraytape, tape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import zyg
    from zyg import backends
    from zyg.pullbacks import arraytape, tape

    def {name}(x, w):
        s = 0.0
        acc = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            acc[i] = np.sin(x[i]) * w
            if acc[i] > 0.0:
                s += acc[i] ** 2
            else:
                s -= acc[i]
        return s

    x = np.linspace(-1.0, 2.0, 7)
    v, (gx, gw) = zyg.value_and_grad({name}, (0, 1))(x, 1.5)
    cpu = backends.get("cpu")
    # (the tape binds grow by Backend.helper, a shadow zeros_as by Backend.wrap)
    hits = {{"grow": int(sum(cpu.helper(tape.grow).stats.cache_hits.values())),
             "zeros_as": int(sum(cpu.wrap(arraytape.zeros_as).stats.cache_hits.values()))}}
    print("RESULT", json.dumps({{"v": v, "gx": list(gx), "gw": gw, "hits": hits}}))
""")


def _run(name: str, cache: str, **env) -> dict:
    import json
    script = os.path.join(os.path.dirname(cache), f"{name}.py")     # zyg reads its source
    with open(script, "w") as fh:
        fh.write(_CHILD.format(name=name))
    e = dict(os.environ, ZYG_CACHE_DIR=cache, PYTHONPATH=ROOT, ZYG_COMPILE_NOTICE="0", **env)
    e.pop("ZYG_BOUNDSCHECK", None) if "ZYG_BOUNDSCHECK" not in env else None
    out = subprocess.run([sys.executable, script], env=e, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _expected(x, w):
    acc = np.sin(x) * w
    gx = np.where(acc > 0.0, 2.0 * acc, -1.0) * np.cos(x) * w
    gw = float(np.sum(np.where(acc > 0.0, 2.0 * acc, -1.0) * np.sin(x)))
    return gx, gw


def test_a_second_process_building_a_new_gradient_loads_the_helpers(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run("loss_one", cache)
    second = _run("loss_two", cache)          # another function: its own code is new
    assert first["hits"] == {"grow": 0, "zeros_as": 0}
    assert second["hits"]["grow"] > 0 and second["hits"]["zeros_as"] > 0
    gx, gw = _expected(np.linspace(-1.0, 2.0, 7), 1.5)
    for r in (first, second):
        np.testing.assert_allclose(r["gx"], gx, rtol=1e-12)
        assert abs(r["gw"] - gw) < 1e-12 * max(1.0, abs(gw))
    assert os.listdir(os.path.join(cache, "helpers")) == [cpu.sources_stamp()]
    # data files named by their signature's hash, not numba's counter (two processes
    # saving two signatures at once never write each other's entry)
    import re
    data = [f for _, _, fs in os.walk(os.path.join(cache, "helpers")) for f in fs if f.endswith(".nbc")]
    assert data and all(re.search(r"\.[0-9a-f]{16}\.nbc$", f) for f in data), data
    grows = [f for f in data if f.startswith("tape.grow-")]
    assert len(grows) == len(set(grows)) >= 2       # the float and the int (tag) stacks


def test_bounds_checking_keeps_the_helpers_off_the_disk(tmp_path):
    cache = str(tmp_path / "cache")
    _run("loss_one", cache, ZYG_BOUNDSCHECK="1")
    assert not os.path.exists(os.path.join(cache, "helpers"))
    r = _run("loss_two", cache, ZYG_BOUNDSCHECK="1")
    assert r["hits"] == {"grow": 0, "zeros_as": 0}


def test_the_place_changes_with_any_source_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    s0 = cpu.stamp_of(str(pkg), "1.0")
    assert cpu.stamp_of(str(pkg), "1.0") == s0
    assert cpu.stamp_of(str(pkg), "1.1") != s0                  # another version
    (pkg / "sub" / "b.py").write_text("y = 22\n")                # an edit (size)
    s1 = cpu.stamp_of(str(pkg), "1.0")
    assert s1 != s0
    st = os.stat(pkg / "a.py")
    os.utime(pkg / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))   # a touch
    assert cpu.stamp_of(str(pkg), "1.0") != s1
    (pkg / "notes.txt").write_text("not a source")
    s2 = cpu.stamp_of(str(pkg), "1.0")
    (pkg / "notes.txt").write_text("still not a source")
    assert cpu.stamp_of(str(pkg), "1.0") == s2


@pytest.fixture
def default_options():
    zyg.set_boundscheck(False)      # the suite runs with bounds checking on (conftest.py)
    yield
    zyg.set_boundscheck(None)


def test_only_zyg_functions_without_closures_go_on_disk(default_options):
    from numba.core.caching import NullCache
    be = backends.get("cpu")
    assert not isinstance(be.helper(tape.grow)._cache, NullCache)
    assert not isinstance(be.helper(arraytape.zeros_as)._cache, NullCache)

    def user(x):
        return x + 1.0
    user._zyg_on_disk = True            # a marked function outside zyg is not cached
    assert isinstance(be.jit(user)._cache, NullCache)

    # the locator: a file of zyg's, a module-level function (no closure)
    locator = cpu._helper_cache_class()._impl_class._locator_classes[0]
    zyg_file = os.path.join(cpu._zyg_root(), "pullbacks", "tape.py")
    k = 2.0

    def closure(x):
        return x * k

    def plain(x):
        return x * 2.0
    assert locator.from_function(closure, zyg_file) is None
    assert locator.from_function(plain, __file__) is None
    got = locator.from_function(plain, zyg_file)
    assert got is not None and got.get_cache_path().startswith(
        os.path.join(zyg.compile.cache_dir(), "helpers", cpu.sources_stamp()))
