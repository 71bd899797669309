"""Read YAML into dicts and lists that remember the line each key and item was written on.

Chip files, graph files and `--set` values all come through here, so that every error about them
can name the line. Only PyYAML's safe scalar constructors run (no Python objects, no custom
tags), duplicate keys are errors (PyYAML would silently keep the last one), anchors, aliases and
`<<` merge keys work as YAML defines them, and syntax errors become ConfigErrors reading
"file:line: message".

Nothing read here can exhaust the host (isa/limits.py): a file is read up to YAML_BYTES,
collections nest at most YAML_DEPTH deep (libyaml's own limit, 1000, bounds its parser first),
and every value an alias repeats is counted as it is built, so a "billion laughs" document stops
at YAML_ALIAS_NODES. Merge keys are resolved on the built mappings (a key taken once however
often it is merged), never by PyYAML's flatten_mapping, whose lists of pairs double with each
level of a merge of merges.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, cast

import yaml

from . import limits
from .errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from yaml.cyaml import CSafeLoader
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

# What a YAML document or one of its values holds: YamlDict, YamlList, str, int, float, bool or None.
# Any, not their union: each reader checks the kind it expects (chips/loader.py, isa/graphfile.py) and says where it is not.
Yaml: TypeAlias = Any
Node: TypeAlias = "ScalarNode | MappingNode | SequenceNode"

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlDict(dict[Any, Yaml]):
    """A mapping read from YAML: `.line` is where it starts, `.line_of(key)` where a key is."""

    def __init__(self, items: Iterable[tuple[Any, Yaml]] = (), line: int | None = None) -> None:
        super().__init__(items)
        self.line = line
        self.lines: dict[Any, int] = {}  # key -> 1-based line of the key

    def line_of(self, key: object) -> int | None:
        """Line of `key`, or of the mapping itself for a key it does not have (e.g. a missing one)."""
        return self.lines.get(key, self.line)


class YamlList(list[Yaml]):
    """A sequence read from YAML: `.line` is where it starts, `.line_of(index)` where an item is."""

    def __init__(self, items: Iterable[Yaml] = (), line: int | None = None) -> None:
        super().__init__(items)
        self.line = line
        self.lines: list[int] = []  # index -> 1-based line of the item

    def line_of(self, index: object) -> int | None:
        """Line of item `index`, or of the sequence itself for an index it does not have."""
        try:
            return self.lines[index]  # type: ignore[call-overload]  # any key: a non-index is a TypeError, answered below
        except (IndexError, TypeError):
            return self.line


def read(path: str | Path) -> Yaml:
    """Parse the YAML file at `path` (see `parse`)."""
    try:
        with limits.open_input(path) as f:
            data = f.read(limits.YAML_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limits.YAML_BYTES:
        raise ConfigError(f"{path}: larger than the limit of {limits.YAML_BYTES} bytes for a YAML file "
                          "(put large tensors in .npy files)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse(text, str(path))


# libyaml's parser (PyYAML's C binding) is some ten times faster than PyYAML's Python one and
# stops at 1000 levels of nesting; the Python one is the fallback where PyYAML was built without it.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(text: str, filename: str = "<string>") -> Yaml:
    """Plain data from one YAML document: YamlDict, YamlList, str, int, float, bool or None.

    An empty document gives None. `filename` is only used in error messages.
    """
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _Builder(loader, filename).build(cast("Node", node))  # the composer makes these three kinds
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        message = ", ".join(m for m in (exc.context, exc.problem) if m)
        raise ConfigError(f"{where}: {message}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: {exc}") from None
    except RecursionError:  # PyYAML's Python composer recurses once per level of nesting
        raise ConfigError(f"{filename}: collections nested more than {limits.YAML_DEPTH} deep") from None
    finally:
        loader.dispose()


def _line(node: Node) -> int:
    return node.start_mark.line + 1


class _Builder:
    """Turns composed nodes into YamlDict / YamlList / scalars, keeping their lines and counting
    what aliases expand to."""

    def __init__(self, loader: yaml.SafeLoader | CSafeLoader, filename: str) -> None:
        self.loader = loader
        self.filename = filename
        self.open: list[Node] = []  # the collections being built, outermost first: an alias back to one is a cycle
        self.built: set[int] = set()  # ids of the nodes built once: building one again is an alias's copy
        self.copying = False  # building an alias's copy: every value built counts
        self.copied = 0  # values built as aliases' copies

    def error(self, node: Node, message: str) -> ConfigError:
        return ConfigError(f"{self.filename}:{_line(node)}: {message}")

    def build(self, node: Node) -> Yaml:
        if id(node) in self.built and not self.copying:
            self.copying = True
            try:
                return self.build(node)
            finally:
                self.copying = False
        self.built.add(id(node))
        if self.copying:
            self.copied += 1
            if self.copied > limits.YAML_ALIAS_NODES:
                raise self.error(node, f"aliases repeat more than {limits.YAML_ALIAS_NODES} values (the limit of a YAML document)")
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if any(node is n for n in self.open):
            raise self.error(node, "an alias refers to a collection that contains it")
        if len(self.open) >= limits.YAML_DEPTH:
            raise self.error(node, f"collections nested more than {limits.YAML_DEPTH} deep (an alias counts as the collection it repeats)")
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise self.error(node, f"unsupported tag {node.tag!r}")
        self.open.append(node)
        try:
            return self.mapping(node) if isinstance(node, yaml.MappingNode) else self.sequence(node)
        finally:
            self.open.pop()

    def scalar(self, node: ScalarNode) -> Yaml:
        """A scalar; an integer has at most NUMBER_DIGITS digits, so every message can print it."""
        try:
            value = self.loader.construct_object(node)
        except (ValueError, OverflowError):  # more digits than Python converts
            value = None
        else:
            if not isinstance(value, int) or abs(value) < 10**limits.NUMBER_DIGITS:
                return value
        raise self.error(node, f"the number {node.value[:40]!r}... has more digits than the limit of {limits.NUMBER_DIGITS}")

    def sequence(self, node: SequenceNode) -> YamlList:
        out = YamlList(line=_line(node))
        for item in node.value:
            out.append(self.build(item))
            out.lines.append(_line(item))
        return out

    def mapping(self, node: MappingNode) -> YamlDict:
        """Merged keys first (`<<: *base`, or a list of mappings: the first that has a key gives
        it), then the mapping's own, which win."""
        self.check_duplicates(node)
        out = YamlDict(line=_line(node))
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self.merge(out, value_node)
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                key = self.key(key_node)
                out[key] = self.build(value_node)
                out.lines[key] = _line(key_node)
        return out

    def merge(self, out: YamlDict, node: Node) -> None:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for source in sources:
            merged = self.build(source) if isinstance(source, yaml.MappingNode) else None
            if merged is None:
                raise self.error(source, "a << merge key takes a mapping or a list of mappings")
            for key, value in merged.items():
                if key not in out:
                    out[key] = value
                    out.lines[key] = merged.line_of(key)

    def check_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, int] = {}
        merges = 0
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                merges += 1
                if merges > 1:
                    raise self.error(key_node, "a second << merge key (list the mappings to merge in one: <<: [*a, *b])")
                continue
            key = self.key(key_node)
            if key in seen:
                raise self.error(key_node, f"duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = _line(key_node)

    def key(self, node: Node) -> Yaml:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, "a mapping key must be a plain value, not a list or mapping")
        return self.scalar(node)
