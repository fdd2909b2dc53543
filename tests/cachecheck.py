"""A gradient run in two fresh processes sharing one zyg cache directory: the second must
load every generated function from numba's disk cache and compile nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

_REPORT = """
import sys as _sys
import numba as _numba
_hits = _misses = 0
for _m in [m for k, m in list(_sys.modules.items()) if k.startswith(PREFIX)]:
    for _d in vars(_m).values():
        if isinstance(_d, _numba.core.dispatcher.Dispatcher):
            _hits += sum(_d.stats.cache_hits.values())
            _misses += sum(_d.stats.cache_misses.values())
import json as _json
print(_json.dumps({"result": RESULT, "hits": _hits, "misses": _misses}))
"""


def assert_second_process_compiles_nothing(tmp_path, source: str, function: str) -> None:
    """``source`` (a script that sets ``RESULT``, lists of numbers) differentiates
    ``function`` on cpu; run it twice: the same result to rounding, the first process
    compiles, the second only loads."""
    script = tmp_path / f"{function}_script.py"    # zyg reads the source it transforms
    script.write_text(source + _REPORT.replace("PREFIX", repr(f"zyg_gen_cpu_{function}")))
    env = dict(os.environ, ZYG_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    # to rounding: a parallel loop's atomic additions run in no fixed order
    np.testing.assert_allclose(np.hstack([np.ravel(v) for v in first["result"]]),
                               np.hstack([np.ravel(v) for v in second["result"]]), rtol=1e-12, atol=1e-14)
    assert first["misses"] >= 1, runs[0].stdout         # the first process compiled it
    assert second["misses"] == 0 and second["hits"] >= 1, runs[1].stdout
