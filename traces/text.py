"""Numbers and tables as text, for the summaries and comparisons the CLI prints."""

import textwrap
from collections.abc import Collection, Sequence


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; below 1 KiB, plain bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    power = 0
    while n >= 1024 and power < len(units) - 1:
        n /= 1024
        power += 1
    return f"{n:,.0f} B" if power == 0 else f"{n:,.1f} {units[power]}"


def si(n: float) -> str:
    """33554432 -> '33.6M'; below 1000, the number to 3 significant digits."""
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.1f}{suffix}"
    return f"{n:.3g}"


MIN_COLUMN = 8  # the narrowest a column is wrapped to where a table is wider than its room


def table(rows: Sequence[Sequence[object]], indent: str = "  ", left: Collection[int] = (0,), width: int | None = None) -> list[str]:
    """Lines of `rows` (lists of cells) in aligned columns two spaces apart: the columns in
    `left` left-aligned, the others (numbers) right-aligned. With a `width` the whole rows do
    not fit in, the cells wrap within narrower columns (table_columns), so no line is longer
    than `width` (one of at least 2 * MIN_COLUMN + 2 + len(indent) characters, with headers
    of words no longer than MIN_COLUMN)."""
    text = [[str(cell) for cell in row] for row in rows]
    if not text:
        return []
    widths = [max(len(row[i]) for row in text) for i in range(len(text[0]))]
    whole = [_line(indent, row, widths, left) for row in text]
    if width is None or max(map(len, whole)) <= width:
        return whole
    room = width - len(indent)
    least = [min(w, max([MIN_COLUMN, *map(len, head.split())])) for w, head in zip(widths, text[0])]
    lines: list[str] = []
    for columns, fitted in table_columns(widths, least, room):
        lines += [""] * bool(lines)  # a blank line between blocks
        aligned = [j for j, i in enumerate(columns) if i in left]
        for row in text:
            cells = [textwrap.wrap(row[i], max(w, 1), break_on_hyphens=False) or [""] for i, w in zip(columns, fitted)]
            for k in range(max(map(len, cells))):
                lines.append(_line(indent, [c[k] if k < len(c) else "" for c in cells], fitted, aligned))
    return lines


def table_columns(widths: list[int], least: list[int], room: int) -> list[tuple[list[int], list[int]]]:
    """How a table whose rows are wider than `room` is printed: blocks of (column indices,
    their widths), each block led by the first column (the rows' names) and followed by as many
    others as fit at their `least` widths (the header's longest word, at least MIN_COLUMN, or
    the column's own width if less); within a block the room left is shared out (_shares)."""
    room = max(room, 2 * MIN_COLUMN + 2)
    key = min(widths[0], room if len(widths) == 1 else max(least[0], room // 3))
    blocks: list[list[int]] = []
    block: list[int] = []
    for i in range(1, len(widths)):
        if block and sum(least[j] + 2 for j in [*block, i]) > room - key:
            blocks.append(block)
            block = []
        block.append(i)
    blocks.append(block)
    return [([0, *block], [key, *_shares([widths[i] for i in block], [least[i] for i in block], room - key - 2 * len(block))])
            for block in blocks]


def _shares(widths: list[int], least: list[int], room: int) -> list[int]:
    """Widths for columns of natural `widths` in `room` characters (at least the sum of `least`):
    the highest level such that each column takes its width or the level, whichever is less,
    but never less than its `least`. Narrow columns keep their width; the wide ones share the rest equally."""
    fitted = lambda level: [min(w, max(floor, level)) for w, floor in zip(widths, least)]  # noqa: E731
    low, high = 0, max(widths, default=0)
    while low < high:
        level = (low + high + 1) // 2
        low, high = (level, high) if sum(fitted(level)) <= room else (low, level - 1)
    return fitted(low)


def _line(indent: str, cells: list[str], widths: list[int], left: Collection[int]) -> str:
    return indent + "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
