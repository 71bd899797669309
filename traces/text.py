"""Numbers and tables as text, for the summaries and comparisons the CLI prints."""


def human_bytes(n):
    """1536 -> '1.5 KiB'; below 1 KiB, plain bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    power = 0
    while n >= 1024 and power < len(units) - 1:
        n /= 1024
        power += 1
    return f"{n:,.0f} B" if power == 0 else f"{n:,.1f} {units[power]}"


def si(n):
    """33554432 -> '33.6M'; below 1000, the number to 3 significant digits."""
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.1f}{suffix}"
    return f"{n:.3g}"


def table(rows, indent="  ", left=(0,)):
    """Lines of `rows` (lists of cells) in aligned columns two spaces apart: the columns in
    `left` left-aligned, the others (numbers) right-aligned."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return [
        indent + "  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
        for row in rows
    ]
