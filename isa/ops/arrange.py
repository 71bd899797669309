"""How data-arrangement ops describe their output for the DMA template (isa/lower/arrange.py):
as pieces, each a strided view of one input copied to a strided view of the output."""

from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """A strided view of a dense tensor, in elements: a zero stride repeats, an offset selects."""

    offset: int
    shape: tuple
    strides: tuple


@dataclass(frozen=True)
class Piece:
    input: int  # which of the op's inputs
    src: View  # of that input
    dst: View  # of the output
