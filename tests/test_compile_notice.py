"""The one-line notice of a long compile (issue 24): past a delay, numba's compile of the
code generated for a function is announced on the ``zyg`` logger, naming the function and
its file and line; ``zyg.set_compile_notice(0)`` silences it."""
import logging
import os

import numpy as np
import pytest

import zyg


def noticed(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.sin(x[i]) * x[i]
    return s


def silenced(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.cos(x[i]) * x[i]
    return s


@pytest.fixture
def restore():
    yield
    zyg.set_compile_notice(None)


def test_a_compile_past_the_delay_is_announced_with_the_function_and_its_line(caplog, restore):
    zyg.set_compile_notice(0.001)
    with caplog.at_level(logging.WARNING, logger="zyg"):
        v, g = zyg.value_and_grad(noticed, target="cpu")(np.array([0.3, 0.7]))
    assert np.allclose(g, np.sin([0.3, 0.7]) + np.array([0.3, 0.7]) * np.cos([0.3, 0.7]))
    got = [r.getMessage() for r in caplog.records if r.name == "zyg"]
    assert len(got) == 1, got
    line = noticed.__code__.co_firstlineno + 2
    assert "'noticed'" in got[0] and f"{os.path.basename(__file__)}:{line}" in got[0], got[0]
    assert "\n" not in got[0]


def test_set_compile_notice_0_silences_it_and_python_compiles_nothing(caplog, restore):
    zyg.set_compile_notice(0)
    with caplog.at_level(logging.WARNING, logger="zyg"):
        zyg.value_and_grad(silenced, target="cpu")(np.array([0.3, 0.7]))
    zyg.set_compile_notice(0.001)
    with caplog.at_level(logging.WARNING, logger="zyg"):
        zyg.value_and_grad(silenced, target="python")(np.array([0.3, 0.7]))
    assert not [r for r in caplog.records if r.name == "zyg"]
