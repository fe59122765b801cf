"""YAML input with bounds: config and scenario files are read through here.

A YAML file is small on disk and can be huge in memory: an alias (``*a``) names
a whole earlier subtree, so nine lines of ``&a [*b, *b, ...]`` ("billion
laughs", 356 bytes) describe 10^9 values. PyYAML builds the shared objects
cheaply, but everything after it (validation, expansion of ``count``, a diff)
walks the expanded tree: ``gpuq config apply --dry-run`` on such a file ran
past 60 s and 1.2 GB. So a document is refused before anything walks it when

- the file is larger than ``MAX_YAML_BYTES``, or
- its tree, with every alias expanded, has more than ``MAX_YAML_VALUES``
  values (counted on the composed node graph, each shared subtree once, so the
  count itself costs time in the file's size, not in its expansion), or
- an alias refers to a node that contains it (a recursive structure).

Anchors and aliases within the bounds keep working (``<<: *defaults``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_YAML_BYTES = 16 * 1024 * 1024
# values once aliases are expanded; a scenario of 100,000 jobs has ~2 million
MAX_YAML_VALUES = 5_000_000


class YamlInputError(ValueError):
    """The YAML document is over a bound or malformed (the message says which, on one
    line); ``context`` holds the lines around a syntax error with a caret under it,
    which the command line prints below the message (:func:`app.domain.errors.error_line`)."""

    def __init__(self, message: str, context: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.context = context


def syntax_error(source: str, text: str, e: yaml.YAMLError) -> YamlInputError:
    """PyYAML's error in a person's words: ``FILE: not valid YAML at line 4, column 12:
    expected ',' or '}', but got ':' (in a flow mapping that starts at line 3, column
    12)``, and as ``context`` up to three lines of the file ending at the problem, with a
    caret under its column (PyYAML's own text names "<unicode string>" and folds its
    caret into the message)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    if mark is None or problem is None:
        return YamlInputError(f"{source}: not valid YAML: {' '.join(str(e).split())}")
    head = f"{source}: not valid YAML at line {mark.line + 1}, column {mark.column + 1}: " \
        f"{problem}"
    ctx, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if ctx and cmark is not None and cmark is not mark and e.problem:
        what = ctx.removeprefix("while parsing ").removeprefix("while scanning ")
        head += f" (in {what} that starts at line {cmark.line + 1}, column {cmark.column + 1})"
    lines = text.splitlines()
    shown = [(n, lines[n] if n < len(lines) else "")
             for n in range(max(0, mark.line - 2), mark.line + 1)]
    width = len(str(mark.line + 1))
    context = tuple(f"{n + 1:>{width}} | {line}" for n, line in shown)
    context += (f"{'':>{width}} | {' ' * mark.column}^",)
    return YamlInputError(head, context)


def _expanded_size(root: Node, limit: int, source: str) -> int:
    """Values in ``root`` with aliases expanded; stops as soon as ``limit`` is passed.

    Iterative (a deeply nested document must not hit Python's recursion limit)
    and memoised per node object: an alias is the same node object as its anchor.
    """
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            total = 1
            if isinstance(node, SequenceNode):
                total += sum(size[id(c)] for c in node.value)
            elif isinstance(node, MappingNode):
                total += sum(size[id(k)] + size[id(v)] for k, v in node.value)
            if total > limit:
                raise YamlInputError(
                    f"{source}: more than {limit:,} values once its aliases (*name) are "
                    "expanded; write the values out, or split the file")
            size[key] = total
            continue
        if key in size:
            continue
        if key in open_:
            raise YamlInputError(f"{source}: an alias (*name) refers to a value that "
                                 "contains it (recursive structure)")
        open_.add(key)
        stack.append((node, True))
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [c for pair in node.value for c in pair]
        else:
            children = []
        for c in children:
            if id(c) in open_ and id(c) not in size:
                raise YamlInputError(f"{source}: an alias (*name) refers to a value that "
                                     "contains it (recursive structure)")
            stack.append((c, False))
    return size[id(root)]


def load_yaml(text: str, *, source: str = "YAML document",
              max_bytes: int = MAX_YAML_BYTES, max_values: int = MAX_YAML_VALUES) -> Any:
    """``yaml.safe_load`` of one document, refused (:class:`YamlInputError`) past the
    size and expansion bounds; ``source`` names the input in the message."""
    n = len(text.encode("utf-8", errors="surrogatepass"))
    if n > max_bytes:
        raise YamlInputError(f"{source}: {n:,} bytes, more than the {max_bytes:,} a "
                             "config or scenario file may have")
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _expanded_size(root, max_values, source)
        return loader.construct_document(root)
    except yaml.YAMLError as e:
        raise syntax_error(source, text, e) from None
    finally:
        loader.dispose()


def read_text_bounded(path: str | Path, *, max_bytes: int = MAX_YAML_BYTES) -> str:
    """A config or scenario file's text; its size is checked before it is read."""
    p = Path(path)
    size = p.stat().st_size
    if size > max_bytes:
        raise YamlInputError(f"{p}: {size:,} bytes, more than the {max_bytes:,} a "
                             "config or scenario file may have")
    return p.read_text()


def read_yaml_file(path: str | Path, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """:func:`read_text_bounded` then :func:`load_yaml`."""
    return load_yaml(read_text_bounded(path, max_bytes=max_bytes), source=str(path),
                     max_bytes=max_bytes)
