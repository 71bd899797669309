"""Chip configurations: the chip YAMLs shipped in this folder, and `load()` for them or any chip YAML.

    chip = chips.load("bm1684")
    chip = chips.load("my_npu.yaml", overrides={"memories.ddr.bandwidth": "68GB/s"})

The YAML format is described in docs/chips.md; units in `chips.units`; validation and
overrides in `chips.loader`; the typed result in `chips.schema`.
"""
from __future__ import annotations

import os
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from isa import yamlfile
from isa.errors import ConfigError

from .loader import apply_overrides, from_raw, load_file
from .schema import Chip, Engine, MatrixUnit, Memory, OpSupport, VectorUnit

if TYPE_CHECKING:

    from isa.yamlfile import YamlDict

__all__ = [
    "Chip", "Engine", "MatrixUnit", "Memory", "OpSupport", "VectorUnit",
    "apply_overrides", "available", "is_path", "load", "load_file",
]

SHIPPED_DIR = Path(__file__).parent


def available() -> list[str]:
    """Names of the shipped chips, sorted."""
    return sorted(path.stem for path in SHIPPED_DIR.glob("*.yaml"))


def load(name_or_path: str, overrides: dict[str, str] | None = None) -> Chip:
    """A freshly validated Chip from a shipped chip's name or alias, or a chip YAML's path.

    `overrides` maps dotted keys to values, applied before validation:
    `{"memories.ddr.bandwidth": "68GB/s", "memories.lmem.size": "1MiB"}`.
    """
    text = str(name_or_path)
    if is_path(name_or_path):
        return load_file(text, overrides)
    path = _shipped_path(text)
    raw = _read_shipped(path)
    chip = from_raw(raw, str(path), overrides)
    if raw.get("name") != path.stem:
        line = raw.line_of("name")
        raise ConfigError(f"{path}:{line}: name: {raw.get('name')!r} must be the file's name {path.stem!r}")
    return chip


def is_path(name_or_path: str) -> bool:
    """Whether load() reads `name_or_path` as a chip YAML's path rather than a shipped chip's name."""
    text = str(name_or_path)
    return isinstance(name_or_path, os.PathLike) or text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text


def _shipped_path(name: str) -> Path:
    """The shipped YAML called `name` or listing it under `aliases` (case-insensitive)."""
    key = name.lower()
    names = available()
    if key in names:
        return SHIPPED_DIR / f"{key}.yaml"
    for stem in names:
        if key in _aliases(stem):
            return SHIPPED_DIR / f"{stem}.yaml"
    listed = ", ".join(f"{stem} ({', '.join(_aliases(stem))})" if _aliases(stem) else stem for stem in names)
    raise ConfigError(f"unknown chip {name!r} (available: {listed}; or give the path of a chip .yaml file)")


def _aliases(stem: str) -> list[str]:
    """A shipped chip's aliases as written (validated when that chip is loaded)."""
    raw = _read_shipped(SHIPPED_DIR / f"{stem}.yaml")
    aliases = raw.get("aliases") if isinstance(raw, dict) else None
    return [str(a).lower() for a in aliases] if isinstance(aliases, list) else []


@cache
def _read_shipped(path: Path) -> YamlDict:
    """Parsed once per process: shipped files do not change, and validation never mutates them."""
    return yamlfile.read(path)
