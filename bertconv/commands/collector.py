"""The cycle collector, paused while a command starts: what is made until its checkpoint's
headers are read (modules, parsers, the tree) lives until the process ends, and collecting it
took 4-6 ms of a header command's 100 (`inspect` of BERT-large's pytorch_model.bin or bert4keras
file). The console entry point pauses it (`pause`); every command turns it back on once it has
read its checkpoint, before any tensor is (`resume`, from `common.load`)."""

from __future__ import annotations

import gc

_paused = False  # by `pause`, until `resume`


def pause() -> None:
    """Stop the cycle collector, if it runs, until `resume`."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Turn the cycle collector back on, if `pause` stopped it, with every object made so far
    frozen (`gc.freeze`): no collection needs to look at them again."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
