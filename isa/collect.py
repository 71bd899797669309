"""Python's cyclic garbage collector paused while a program is built or run."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused(kept: bool = False) -> Iterator[None]:
    """The collector off for the block (and back on after, if it was on). Lowering and running
    allocate millions of long-lived objects (instructions, events) and free few: each collection
    walks them all and finds nothing, which cost a 7B decode step's lowering a third of its time.
    With `kept` (what the block made outlives it, and no cycle holds much of it: a lowered
    program), those objects go to the oldest generation after the block (gc.freeze then
    gc.unfreeze move lists, not objects): left in the youngest, the first collection after the
    block walks them all (a 7B decode step's 3.2 million instructions: seconds), and again in
    each generation after it; the oldest is walked in full collections only."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if kept:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()
