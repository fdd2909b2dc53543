"""Run by tests/test_reliability.py in a subprocess: Ctrl-C at given points of first-call
compiles, then the same gradient called again must be right.

Each argument is PREFIX:N.  A fresh function's gradient is built with SIGINT sent (a real
signal, to this process) at the N-th Python call into a module whose name starts with
PREFIX (``import:N``: at the N-th import of a numba module, to cut numba's lazy import),
so that the interrupt lands in a chosen phase whatever the machine's load.  The line
printed per phase is checked by the test.
"""
import linecache
import os
import signal
import sys
import time

import numpy as np

import zyg

X = np.array([0.3, 0.5, 0.7])


def define(k: int):
    src = (f"def f{k}(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n"
           f"        s = s + np.sin(x[i]) * x[i] * {k + 1}.0\n"
           f"    return s + np.sum(x * x) * s\n")
    name = f"<zyg-sigint-{k}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {"np": np}
    exec(compile(src, name, "exec"), ns)
    return ns[f"f{k}"]


class ImportTrap:
    """A meta-path finder that sends SIGINT at the N-th import of a numba module."""

    def __init__(self, n: int, sent: list):
        self.n, self.sent = n, sent

    def find_spec(self, name, path=None, target=None):
        if name.startswith("numba") and not self.sent[0]:
            self.n -= 1
            if self.n <= 0:
                self.sent[0] = True
                os.kill(os.getpid(), signal.SIGINT)
        return None


def phase(k: int, prefix: str, n: int) -> str:
    f = define(k)
    g = zyg.value_and_grad(f)
    sent = [False]
    count = [0]

    def prof(frame, event, arg):
        if event == "call" and not sent[0] and \
                frame.f_globals.get("__name__", "").startswith(prefix):
            count[0] += 1
            if count[0] >= n:
                sent[0] = True
                sys.setprofile(None)
                os.kill(os.getpid(), signal.SIGINT)

    trap = None
    how = "no"
    try:
        if prefix == "import":
            trap = ImportTrap(n, sent)
            sys.meta_path.insert(0, trap)
        else:
            sys.setprofile(prof)
        g(X)
    except KeyboardInterrupt:
        how = "yes"
    finally:
        sys.setprofile(None)
        if trap is not None:
            sys.meta_path.remove(trap)
    if sent[0] and how == "no":
        try:                      # delivered after the call returned
            time.sleep(1.0)
        except KeyboardInterrupt:
            how = "late"
    h = 1e-6
    fd = np.array([(f(X + h * e) - f(X - h * e)) / (2 * h) for e in np.eye(3)])
    try:
        v1, g1 = g(X)                              # the same gradient object
        v2, g2 = zyg.value_and_grad(f)(X)          # and a new one
        ok = (np.allclose(g1, fd, rtol=1e-6, atol=1e-9) and np.array_equal(g1, g2)
              and abs(v1 - f(X)) <= 1e-12 * abs(f(X)) and v1 == v2)
        res = "ok" if ok else f"wrong {g1} {g2} fd {fd}"
    except Exception as e:
        res = f"error {type(e).__name__}: {e}"
    return f"{prefix}:{n} sent={sent[0]} interrupted={how} {res}"


if __name__ == "__main__":
    for k, arg in enumerate(sys.argv[1:]):
        p, n = arg.rsplit(":", 1)
        print(phase(int(os.environ.get("ZYG_SIGINT_BASE", "0")) + k, p, int(n)), flush=True)
