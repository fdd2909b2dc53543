"""The nested transforms: the transforms that need the driver while they run (the layer
above ``zyg/driver.py``, docs/design.md).

* ``recpairs.py`` -- a compiled recursive call's pair, planned and emitted per callee and
  argument kinds (the emitter's side is ``pullbacks/native.py``);
* ``recursion.py`` -- the run-time path of a recursive call and of ``zyg.checkpoint``: the
  callee's pullback called at run time;
* ``ckloop.py`` -- a ``checkpointed_range`` loop: its step's gradient compiled, the binomial
  schedule around it;
* ``gradcall.py`` -- ``zyg.grad(g)(x)`` inside differentiated code: ``g``'s gradient compiled.

The lower layers reach them through tables they fill when imported (``ssa/hooks.py``,
``rules/higher.py``, ``pullbacks/native.provide_builder``); ``import zyg`` imports them.
"""
