"""Running a window template (a convolution, a pooling) over a run of its output's rows: a layer
group (isa/lower/schedule/chain.py) runs it slice by slice. A mixin: the output box a tiling covers, the
classes of tile positions the lowering's estimate prices (isa/lower/estimate.tiled), and each
tiling worked out once per kind of run.

A template using it has `ctx`, `group`, `out` (the graph tensor it makes), `axes` (the window
axes of its spatial dimensions, isa/lower/templates/window.py), calls init_rows() and has `_search()`:
the (tiling, estimated cycles) of the run in self.rows, worked out once per lowering for its
signature (isa/lower/schedule/searches.py)."""

from __future__ import annotations

import collections
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..schedule.tiling import boxes

if TYPE_CHECKING:
    from ...graph import Tensor
    from ..context import Lowering
    from ..schedule.fusion import Group
    from .window import Axis

# a class of tile positions along one dimension: (start, extent) and, along a spatial axis,
# what the tile reads there (count, buffer position, gaps)
Position = tuple[Any, ...]


class RowsTiled(ABC):
    # what the template using it has (the module's docstring)
    ctx: Lowering
    group: Group
    out: Tensor
    axes: Sequence[Axis]
    rows: tuple[int, int] | None  # the output rows run (init_rows); None: an output without rows
    floor: Callable[[], float]  # a lower bound of tiling()'s cycles for the run in self.rows, without a search

    def floor_of(self, rows: tuple[int, int]) -> float:
        """floor() of output rows `rows`."""
        self.rows = rows
        return self.floor()

    @abstractmethod
    def _search(self) -> tuple[Any, float]:
        """(the template's own tiling, its estimated cycles) of the run in self.rows."""

    def init_rows(self) -> None:
        self.rows = (0, self.out.shape[2]) if len(self.out.shape) > 2 else None  # the output rows run
        self._classes: dict[Hashable, Any] = {}  # (dimension, tile extent, rows) -> axis_classes' row; ("counts", ...) -> axis_counts'
        self._tilings: dict[Hashable, tuple[Any, float]] = {}  # how a run of rows reads -> tiling()

    def span(self, channels: int) -> tuple[int, ...]:
        """The output box a tiling covers: (batch, channels, the rows run, the rest)."""
        rows = () if self.rows is None else (self.rows[1] - self.rows[0],)
        return (self.out.shape[0], channels) + rows + self.out.shape[3:]

    def placed_boxes(self, channels: int, tile: Sequence[int]) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(starts, extents) of the run's tiles, starts in the whole output."""
        first = 0 if self.rows is None else self.rows[0]
        for starts, extents in boxes(self.span(channels), tile):
            yield tuple(s + first if d == 2 else s for d, s in enumerate(starts)), extents

    def tiling(self, rows: tuple[int, int] | None = None) -> tuple[Any, float]:
        """(tiling, estimated cycles) of output rows `rows` (default: the rows run), worked out
        once for runs of rows that read alike."""
        if rows is not None:
            self.rows = rows
        key = None
        if self.rows is not None:
            n = self.rows[1] - self.rows[0]
            key = (n,) + self.axes[0].reads(self.rows[0], n)[1:]
        if key not in self._tilings:
            self._tilings[key] = self.ctx.search(self.group.nodes, self.group.stores, ("rows", key), self._search)
        return self._tilings[key]

    def rows_note(self) -> str:
        """" (output rows a-b)" when the run is not every row, for the program's notes."""
        if self.rows is None or self.rows == (0, self.out.shape[2]):
            return ""
        return f" (output rows {self.rows[0]}-{self.rows[1] - 1})"

    def axis_counts(self, shape: Sequence[int], tile: Sequence[int]) -> list[collections.Counter[Position]]:
        """Per dimension of the box `shape`, how many tile positions of each class but for its
        start there are (axis_classes')."""
        key = ("counts", tuple(shape), tuple(tile), self.rows)
        if key not in self._classes:
            self._classes[key] = [self._counted(d, t, a) for d, (t, a) in enumerate(zip(tile, self.axis_classes(shape, tile)))]
        return self._classes[key]

    def _counted(self, d: int, t: int, classes: list[Position]) -> collections.Counter[Position]:
        """axis_counts' of dimension d with tile extent t, counted once (as axis_classes' row is
        worked out once): the tiles of a search share their extents along most dimensions."""
        key = ("count", d, t, self.rows)
        if key not in self._classes:
            self._classes[key] = collections.Counter(c[1:] for c in classes)
        return self._classes[key]

    def axis_classes(self, shape: Sequence[int], tile: Sequence[int]) -> list[list[Position]]:
        """Per dimension of the box `shape`, a class per tile position in order: (start,
        extent) and, along a spatial axis, what the tile reads there (count, buffer position,
        gaps): tiles of one class in every dimension do the same work."""
        out: list[list[Position]] = []
        for d, (n, t) in enumerate(zip(shape, tile)):
            if (d, t, self.rows) not in self._classes:
                o = self.rows[0] if d == 2 and self.rows is not None else 0
                row: list[Position] = [(s, min(t, o + n - s)) for s in range(o, o + n, t)]
                if d >= 2:
                    row = [(s, e) + self.axes[d - 2].reads(s, e)[1:] for s, e in row]
                kinds: dict[Position, Position] = {}
                # one start per class; on a chip that caches DDR each position its own (estimate.tiled)
                cached = self.ctx.chip.cache is not None
                self._classes[d, t, self.rows] = row if cached else [kinds.setdefault(c[1:], c) for c in row]
            out.append(self._classes[d, t, self.rows])
        return out
