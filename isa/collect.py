"""Python's cyclic garbage collector paused while a program is built or run."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (and back on after, if it was on). Lowering and running
    allocate millions of long-lived objects (instructions, events) and free few: each collection
    walks them all and finds nothing, which cost a 7B decode step's lowering a third of its time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
