"""Quantities as people write them in a chip YAML: sizes, counts, frequencies, bandwidths, latencies.

Each function takes what YAML gave (an int, a float or a string such as "512KiB") and returns
the number npusim uses: bytes, hertz, bytes per cycle or cycles. Arithmetic is exact (Fraction),
so "80ns" at 550MHz is 44 cycles, not 45. Bad input raises ValueError saying what was expected;
the chip loader adds the file and the key.

A written number has at most NUMBER_DIGITS digits and a decimal exponent within
+-NUMBER_EXPONENT (isa/limits.py), so reading it is quick ("1e999999999" would take Fraction
minutes), and every result lies within [1/QUANTITY_MAX, QUANTITY_MAX] of its unit, so it is
finite as a float and exact as an integer.

PyYAML reads `1410e6` (no dot) as a string and `on`/`yes` as True: numeric strings are numbers,
booleans are always errors.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction

from isa.limits import NUMBER_DIGITS, NUMBER_EXPONENT, QUANTITY_MAX

SIZE_UNITS = {
    "B": 1,
    "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,  # SI, as DRAM vendors quote bandwidth
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,  # binary, as SRAM sizes are quoted
}
FREQUENCY_UNITS = {"Hz": 1, "kHz": 10**3, "MHz": 10**6, "GHz": 10**9}
TIME_UNITS: dict[str, int | Fraction] = {"s": 1, "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "ns": Fraction(1, 10**9)}
PER_SECOND_UNITS: dict[str, int | Fraction] = {f"{unit}/s": factor for unit, factor in SIZE_UNITS.items()}
PER_CYCLE = "B/cycle"
CYCLES = "cycles"

_QUANTITY = re.compile(r"\s*([-+]?[0-9.]+(?:[eE]([-+]?[0-9]+))?)\s*(\S*)\s*")


def size(value: object) -> int:
    """Bytes, a whole number >= 1: "512KiB", "12GiB", "1.5MB" (SI), "64B", or a plain 4096."""
    what = "a size such as 512KiB, 1.5MB or 4096 (bytes)"
    number, unit = _quantity(value, what)
    return _whole(number * _factor(unit, {"": 1, **SIZE_UNITS}, value, what), 1, value, what)


def count(value: object) -> int:
    """A plain whole number >= 1 (lanes, banks, elements per cycle, ...)."""
    what = "a whole number >= 1"
    number, unit = _quantity(value, what)
    _factor(unit, {"": 1}, value, what)
    return _whole(number, 1, value, what)


def frequency(value: object) -> float:
    """Hertz, > 0: "550MHz", "1.1GHz", or a plain 1e9."""
    what = "a frequency such as 550MHz, 1.1GHz or 1e9 (Hz)"
    number, unit = _quantity(value, what)
    return float(_positive(number * _factor(unit, {"": 1, **FREQUENCY_UNITS}, value, what), value, what))


def bandwidth(value: object, clock_hz: float) -> float:
    """Bytes per cycle of `clock_hz`, > 0: "32GB/s", "64GiB/s", or per cycle "64B/cycle" or a plain 64."""
    what = "a bandwidth such as 32GB/s, 64GiB/s, 64B/cycle or 64 (bytes per cycle)"
    number, unit = _quantity(value, what)
    if unit in ("", PER_CYCLE):
        per_cycle = number
    else:
        per_cycle = number * _factor(unit, {PER_CYCLE: 1, **PER_SECOND_UNITS}, value, what) / _exact(clock_hz)
    return float(_positive(per_cycle, value, what))


def latency(value: object, clock_hz: float) -> int:
    """Cycles of `clock_hz`, a whole number >= 0: a plain 100, "100cycles", or a time ("80ns",
    "1us") rounded up to whole cycles."""
    what = "a latency such as 100 (cycles), 80ns or 1us"
    number, unit = _quantity(value, what)
    if unit in ("", CYCLES):
        return _whole(number, 0, value, what)
    seconds = number * _factor(unit, {CYCLES: 1, **TIME_UNITS}, value, what)
    return _whole(Fraction(math.ceil(seconds * _exact(clock_hz))), 0, value, what)


def cycles_per(value: object, clock_hz: float) -> float:
    """Cycles of `clock_hz` per unit of work, > 0 and possibly fractional: a plain 0.25,
    "0.25cycles", or a time ("1.7ns"), for a unit clocked apart from the chip (a host CPU)."""
    what = "a cost such as 0.25 (cycles), 2cycles or 1.7ns"
    number, unit = _quantity(value, what)
    if unit not in ("", CYCLES):
        number = number * _factor(unit, {CYCLES: 1, **TIME_UNITS}, value, what) * _exact(clock_hz)
    return float(_positive(number, value, what))


def factor(value: object) -> float:
    """A plain number > 0, possibly fractional (a cost multiplier)."""
    what = "a number > 0 such as 2 or 1.5"
    number, unit = _quantity(value, what)
    _factor(unit, {"": 1}, value, what)
    return float(_positive(number, value, what))


def _quantity(value: object, what: str) -> tuple[Fraction, str]:
    """(exact number, unit text) of a YAML value; the unit is "" for a plain number."""
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got {value} (YAML reads on/off/yes/no/true/false as booleans)")
    if isinstance(value, (int, float)):
        if not abs(value) <= QUANTITY_MAX:  # also NaN
            raise ValueError(f"expected {what} of at most {QUANTITY_MAX:.0e}, got {value}")
        return _exact(value), ""
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {describe(value)}")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"expected {what}, got {value!r}")
    digits, exponent, unit = match.groups()
    if sum(c.isdigit() for c in digits) > NUMBER_DIGITS:
        raise ValueError(f"{value[:60]!r} has more digits than the limit of {NUMBER_DIGITS}; expected {what}")
    if exponent is not None and abs(int(exponent)) > NUMBER_EXPONENT:
        raise ValueError(f"{value[:60]!r}: exponent {exponent[:20]} is beyond the limit of +-{NUMBER_EXPONENT}; expected {what}")
    try:
        return Fraction(digits), unit
    except ValueError:  # digits Fraction rejects ("1.2.3")
        raise ValueError(f"expected {what}, got {value!r}") from None


def _exact(number: float | Fraction) -> Fraction:
    """A float as the decimal it was written as (1.1 -> 11/10), an int as itself."""
    return Fraction(repr(number)) if isinstance(number, float) else Fraction(number)


def _factor(unit: str, units: Mapping[str, int | Fraction], value: object, what: str) -> Fraction | int:
    """The scale of `unit`; `units` lists every unit accepted here, so the error can name them."""
    if unit not in units:
        known = ", ".join(u for u in units if u) or "none"
        raise ValueError(f"{value!r}: unknown unit {unit!r} (known: {known}); expected {what}")
    return units[unit]


def _positive(number: Fraction, value: object, what: str) -> Fraction:
    if number <= 0:
        raise ValueError(f"{value!r} must be > 0; expected {what}")
    return _bounded(number, value, what)


def _whole(number: Fraction, minimum: int, value: object, what: str) -> int:
    if number.denominator != 1:
        raise ValueError(f"{value!r} is not a whole number; expected {what}")
    if number < minimum:
        raise ValueError(f"{value!r} must be >= {minimum}; expected {what}")
    return int(_bounded(number, value, what))


def _bounded(number: Fraction, value: object, what: str) -> Fraction:
    """number, once it is 0 or within [1/QUANTITY_MAX, QUANTITY_MAX] in magnitude."""
    if number and not Fraction(1, QUANTITY_MAX) <= abs(number) <= QUANTITY_MAX:
        raise ValueError(f"{value!r} comes to {float(number):.3g} (bytes, Hz, cycles or bytes per cycle), outside the limits "
                         f"[1/{QUANTITY_MAX:.0e}, {QUANTITY_MAX:.0e}]; expected {what}")
    return number


def describe(value: object) -> str:
    """A value's kind for an error message: "a list", "nothing (null)", "int 5"."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
