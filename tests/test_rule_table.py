"""docs/subset.md's table of supported functions is generated from the rule registries
(zyg/rules/table.py); these tests fail when a rule is added without regenerating it."""
import re

import numpy as np
import pytest

import zyg  # noqa: F401  (registers the built-in rules)
from zyg.rules import table

REGEN = "run `python -m zyg.rules.table` to regenerate docs/subset.md's rule table"


def _doc():
    with open(table.DOC, encoding="utf-8") as f:
        return f.read()


def test_doc_table_is_current():
    got = table.region(_doc())
    assert got is not None, f"docs/subset.md lost its rule table markers; {REGEN}"
    env = re.search(r"\(Python (\d+\.\d+), numpy (\d+)\)", got)
    assert env is not None, REGEN
    here = table._environment()
    if f"Python {env.group(1)}, numpy {env.group(2)}" != here:
        pytest.skip(f"the table was generated with Python {env.group(1)}, numpy {env.group(2)}; "
                    f"this is {here} (the available functions differ)")
    assert got == table.supported_table(), f"docs/subset.md's rule table is stale: {REGEN}"


def test_table_covers_every_registry():
    from zyg.rules import arrays, linalg, numpy_extra, registry
    names = {r[0] for r in table.rows()}
    for rule in registry._BUILTIN_RULES.values():
        assert table.spelling(rule.fn) in names, rule
    for reg in (arrays.ARRAY_RULES, numpy_extra.EXTRA_RULES, linalg.LINALG_RULES, linalg.TUPLE_RULES):
        for fn in reg:
            assert table.spelling(fn) in names, fn
    for fn in arrays.NONDIFF_ARRAY:
        assert table.spelling(fn) in names


def test_rows_say_what_the_registries_say():
    rows = {r[0]: r[1:] for r in table.rows()}
    assert rows["np.linalg.solve"][:3] == ("-", "yes", "yes")
    assert rows["math.exp"][:2] == ("yes", "-")
    assert rows["np.zeros"][0] == "no gradient"
    assert "keepdims=" in rows["np.sum"][3]
    assert rows["a + b"][:2] == ("yes", "yes")
    assert "`np.abs`" in rows["np.absolute"][3]
    assert rows["scipy.linalg.cho_factor"][2] == "yes"     # its tuple rule has a forward form
    assert table.spelling(np.maximum.accumulate) == "np.maximum.accumulate"


def test_table_ignores_user_rules():
    def mine(x):
        return x
    before = table.supported_table()
    zyg.nondifferentiable(mine)
    try:
        assert table.supported_table() == before
    finally:
        from zyg.rules.registry import reset_user_rules
        reset_user_rules()
