"""Read YAML into dicts and lists that remember the line each key and item was written on.

Chip files and graph files both come through here, so that every error about them can name the
line. Only PyYAML's safe scalar constructors run (no Python objects, no custom tags), duplicate
keys are errors (PyYAML would silently keep the last one), anchors, aliases and `<<` merge keys
work as YAML defines them, and syntax errors become ConfigErrors reading "file:line: message".
"""

from pathlib import Path

import yaml

from .errors import ConfigError

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlDict(dict):
    """A mapping read from YAML: `.line` is where it starts, `.line_of(key)` where a key is."""

    def __init__(self, items=(), line=None):
        super().__init__(items)
        self.line = line
        self.lines = {}  # key -> 1-based line of the key

    def line_of(self, key):
        """Line of `key`, or of the mapping itself for a key it does not have (e.g. a missing one)."""
        return self.lines.get(key, self.line)


class YamlList(list):
    """A sequence read from YAML: `.line` is where it starts, `.line_of(index)` where an item is."""

    def __init__(self, items=(), line=None):
        super().__init__(items)
        self.line = line
        self.lines = []  # index -> 1-based line of the item

    def line_of(self, index):
        """Line of item `index`, or of the sequence itself for an index it does not have."""
        try:
            return self.lines[index]
        except (IndexError, TypeError):
            return self.line


def read(path):
    """Parse the YAML file at `path` (see `parse`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse(text, str(path))


def parse(text, filename="<string>"):
    """Plain data from one YAML document: YamlDict, YamlList, str, int, float, bool or None.

    An empty document gives None. `filename` is only used in error messages.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _Builder(loader, filename).build(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        message = ", ".join(m for m in (exc.context, exc.problem) if m)
        raise ConfigError(f"{where}: {message}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: {exc}") from None
    finally:
        loader.dispose()


def _line(node):
    return node.start_mark.line + 1


class _Builder:
    """Turns composed nodes into YamlDict / YamlList / scalars, keeping their lines."""

    def __init__(self, loader, filename):
        self.loader = loader
        self.filename = filename
        self.open = set()  # ids of the collections being built: an alias back to one is a cycle

    def error(self, node, message):
        return ConfigError(f"{self.filename}:{_line(node)}: {message}")

    def build(self, node):
        if isinstance(node, yaml.ScalarNode):
            return self.loader.construct_object(node)
        if id(node) in self.open:
            raise self.error(node, "an alias refers to a collection that contains it")
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise self.error(node, f"unsupported tag {node.tag!r}")
        self.open.add(id(node))
        try:
            return self.mapping(node) if isinstance(node, yaml.MappingNode) else self.sequence(node)
        finally:
            self.open.discard(id(node))

    def sequence(self, node):
        out = YamlList(line=_line(node))
        for item in node.value:
            out.append(self.build(item))
            out.lines.append(_line(item))
        return out

    def mapping(self, node):
        self.check_duplicates(node)
        self.loader.flatten_mapping(node)  # `<<: *base` merges: merged keys first, so explicit keys win
        out = YamlDict(line=_line(node))
        for key_node, value_node in node.value:
            key = self.key(key_node)
            out[key] = self.build(value_node)
            out.lines[key] = _line(key_node)
        return out

    def check_duplicates(self, node):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.key(key_node)
            if key in seen:
                raise self.error(key_node, f"duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = _line(key_node)

    def key(self, node):
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, "a mapping key must be a plain value, not a list or mapping")
        return self.loader.construct_object(node)
