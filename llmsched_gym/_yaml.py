"""YAML reading for every loader (scenario, engine config, cost profile): bounded and unambiguous.

Uses libyaml's C parser when PyYAML has it (much faster than pure Python). A document is first
composed into its node graph, where an alias is one shared node, and checked before any Python
value is built:

* the text is at most ``MAX_BYTES`` long and nests at most ``MAX_DEPTH`` levels;
* aliases add at most ``MAX_ALIAS_EXPANSION`` nodes once expanded, and never refer to a node
  that contains them: a "billion laughs" file of a few hundred bytes would otherwise expand to
  10**9 values, hang the validators that walk it and the messages that print it;
* a mapping holds each key once (YAML 1.2 requires it; PyYAML silently keeps the last value).

A violation raises ``YAMLLimitError`` (a ``yaml.YAMLError``, so every loader's existing handling
applies), naming the line and the key or the limit.
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 16 * 1024 * 1024
"""Largest YAML text read (16 MiB; the largest shipped file is a few kB)."""
MAX_DEPTH = 64
"""Deepest nesting of collections (the shipped files nest at most 5 levels)."""
MAX_ALIAS_EXPANSION = 10_000
"""Most nodes that aliases may add to a document once expanded."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLLimitError(yaml.YAMLError):
    """A YAML document exceeds a size bound, or is ambiguous (a duplicate key)."""


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through the C loader when available, with the module's checks first.

    Args:
        text: The YAML document.

    Returns:
        The same Python value as ``yaml.safe_load(text)`` for every document that passes.

    Raises:
        YAMLLimitError: The text is too large or nested too deeply, aliases expand too far or
            refer to themselves, or a mapping repeats a key.
        yaml.YAMLError: The text is not valid YAML.
    """
    if len(text) > MAX_BYTES:
        raise YAMLLimitError(
            f"document is {len(text):,} characters, more than the {MAX_BYTES:,} a YAML input "
            "may have; split it or pass the data as a file of the trace format"
        )
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node)
        return loader.construct_document(node)
    except YAMLLimitError:
        raise
    except yaml.YAMLError as exc:
        # PyYAML's messages span several lines (problem, context, mark): one line for the CLI.
        raise yaml.YAMLError(" ".join(str(exc).split())) from None
    finally:
        loader.dispose()


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1 if node.start_mark is not None else 0


def _check(root: yaml.Node) -> None:
    """Checks depth, alias expansion and duplicate keys of a composed document, iteratively."""
    distinct = 0
    expanded: dict[int, int] = {}  # id(node) -> nodes it stands for once aliases are expanded
    # Post-order walk with an explicit stack: (node, depth, children done?).
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    open_nodes: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _children(node))
            continue
        if key in expanded:
            continue  # an alias of a node already measured
        if key in open_nodes:
            raise YAMLLimitError(
                f"line {_line(node)}: an alias refers to a collection that contains it "
                "(a recursive structure); YAML inputs here must be trees"
            )
        if depth > MAX_DEPTH:
            raise YAMLLimitError(
                f"line {_line(node)}: collections nested more than {MAX_DEPTH} levels deep"
            )
        distinct += 1
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(node)
        open_nodes.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node))
    extra = expanded[id(root)] - distinct
    if extra > MAX_ALIAS_EXPANSION:
        raise YAMLLimitError(
            f"aliases (*name) expand the document by more than {MAX_ALIAS_EXPANSION:,} values "
            f"({min(extra, 10**12):,}{'+' if extra > 10**12 else ''}); write the values out or "
            "use fewer nested aliases"
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_unique_keys(node: yaml.MappingNode) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        ident = (key_node.tag, key_node.value)
        if ident in seen:
            shown = key_node.value if len(key_node.value) <= 60 else key_node.value[:57] + "..."
            raise YAMLLimitError(
                f"line {_line(key_node)}: duplicate key {shown!r} (first on line "
                f"{seen[ident]}); keep one of them"
            )
        seen[ident] = _line(key_node)
