"""The one YAML loader for every file an operator writes: policies, operator patterns, the settings file.

PyYAML's safe loader keeps the LAST value of a key given twice in one mapping, silently: a policy
with ``mode: Monitor`` and, further down, ``mode: Action`` validates as Action, and nobody reading
the top of the file would guess it. Here a duplicate key is an error naming the key and both lines
(``DuplicateKeyError``, a ``yaml.YAMLError``, so every caller's existing ``except yaml.YAMLError``
reports it in its usual one line). Merge keys (``<<: *base``) still override as YAML defines: only
keys written twice in the same mapping are refused.

The loader is libyaml's (``CSafeLoader``) when PyYAML was built with it, else the pure-Python one:
both parse the same way and construct through the same Python constructor, where the check lives.
Plain data, no I/O: callers read the file and hand the text in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import yaml

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping. ``str()`` is one line: the key and both (1-based) lines."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r}", again)
        self.key = key
        self.first_line = first.line + 1
        self.line = again.line + 1

    def __str__(self) -> str:
        return (f"duplicate key {self.key!r} at line {self.line} (first given at line {self.first_line}): "
                "a mapping may give a key once")


class UniqueKeyLoader(_Base):  # type: ignore[valid-type,misc]  # CSafeLoader is untyped
    """The safe loader, refusing a key given twice in one mapping (``DuplicateKeyError``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, first, key_node.start_mark)
                seen[key] = key_node.start_mark
        mapping: dict[Hashable, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def load(text: str) -> Any:
    """The one YAML document in ``text`` (None when empty); ``yaml.YAMLError`` on a problem."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: safe


def load_all(text: str) -> Iterator[Any]:
    """Every ``---`` separated document in ``text``, lazily; ``yaml.YAMLError`` on a problem."""
    return yaml.load_all(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: safe


def one_line(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: PyYAML's own message spans several (context, the line, a caret)."""
    return " ".join(str(exc).split())
