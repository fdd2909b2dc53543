"""A gradient run in two fresh processes sharing one zyg cache directory: the second must
load every generated function from numba's disk cache and compile nothing."""
from __future__ import annotations

import os
import subprocess
import sys

_REPORT = """
import sys as _sys
import numba as _numba
_hits = _misses = 0
for _m in [m for k, m in list(_sys.modules.items()) if k.startswith({prefix!r})]:
    for _d in vars(_m).values():
        if isinstance(_d, _numba.core.dispatcher.Dispatcher):
            _hits += sum(_d.stats.cache_hits.values())
            _misses += sum(_d.stats.cache_misses.values())
print(repr(RESULT), _hits, _misses)
"""


def assert_second_process_compiles_nothing(tmp_path, source: str, function: str) -> None:
    """``source`` (a script that sets ``RESULT``) differentiates ``function`` on cpu; run it
    twice: the same result, the first process compiles, the second only loads."""
    script = tmp_path / f"{function}_script.py"    # zyg reads the source it transforms
    script.write_text(source + _REPORT.format(prefix=f"zyg_gen_cpu_{function}"))
    env = dict(os.environ, ZYG_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (r.stdout.split() for r in runs)
    assert first[:-2] == second[:-2]
    assert int(first[-1]) >= 1, runs[0].stdout          # the first process compiled it
    assert int(second[-1]) == 0 and int(second[-2]) >= 1, runs[1].stdout
