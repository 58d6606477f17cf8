"""YAML that remembers where each value came from (file and line).

The document is composed into nodes and built by hand so every key keeps the line
of its value; validation errors can then say ``spec.yaml:7: mem: ...``.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from acbslurm.errors import SpecError, clip, short_repr
from acbslurm.values import field, mutable

try:  # the C parser is several times faster; fall back to pure Python
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


@mutable
class Located:
    """A loaded document: plain values plus ``origins[(key, ...)] = "file:line"``."""

    value: Any
    source: str
    origins: dict[tuple[str, ...], str] = field(default_factory=dict)
    values_built: int = field(default=0, compare=False, repr=False)
    # ids of the nodes built: one built twice came through an alias (*name)
    nodes_seen: set[int] = field(default_factory=set, compare=False, repr=False)
    aliased: bool = field(default=False, compare=False, repr=False)

    def where(self, path: tuple[str, ...]) -> str:
        """Where ``path`` was set (``file:line``, ``--set key``), else its closest parent."""
        return nearest_origin(self.origins, path) or self.origins.get((), self.source)


def nearest_origin(origins: dict[tuple[str, ...], str], path: tuple[str, ...]) -> str | None:
    """``origins`` of ``path``, else of its closest parent below the root; None if none."""
    p = path
    while p:
        if p in origins:
            return origins[p]
        p = p[:-1]
    return None


class DuplicateKeyError(SpecError):
    pass


# YAML aliases share nodes, so a few hundred bytes of nested aliases expand to billions
# of values ("billion laughs"). A job spec has dozens; this bound leaves room for any
# real one and stops a bomb after milliseconds.
MAX_VALUES = 10_000
# libyaml reads 1000 levels of nesting; building them recursively here would reach
# Python's recursion limit first. A job spec nests four levels.
MAX_DEPTH = 100


def load_located(text: str, source: str) -> Located:
    """Parse ``text`` (one YAML document); raises yaml.YAMLError or DuplicateKeyError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        doc = Located(None, source)
        if node is not None:
            doc.value = _build(loader, node, (), doc)
        return doc
    finally:
        loader.dispose()


def _build(loader: Any, node: yaml.Node, path: tuple[str, ...], doc: Located) -> Any:
    doc.values_built += 1
    if id(node) in doc.nodes_seen:
        doc.aliased = True
    doc.nodes_seen.add(id(node))
    if doc.values_built > MAX_VALUES:
        raise SpecError(f"{source_line(doc, node)}: {_too_many(doc)}")
    if len(path) > MAX_DEPTH:
        raise SpecError(
            f"{source_line(doc, node)}: the document nests more than {MAX_DEPTH} levels deep"
        )
    doc.origins[path] = source_line(doc, node)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _key(loader, key_node, doc)
            skey = str(key)
            if key in out:
                where = source_line(doc, key_node)
                raise DuplicateKeyError(f"{where}: key {short_repr(skey)} appears twice")
            out[key] = _build(loader, value_node, (*path, skey), doc)
            # the key's own line is the most useful place to point at
            doc.origins[(*path, skey)] = source_line(doc, key_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, n, (*path, str(i)), doc) for i, n in enumerate(node.value)]
    if _sexagesimal(node):
        return node.value
    return loader.construct_object(node, deep=True)


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _sexagesimal(node: yaml.Node) -> bool:
    """A YAML 1.1 base-60 number (``1:30`` is 90, ``1000:50`` is 60050), kept as its
    text: in a spec it is a Slurm time (``time: 1:30``, a minute and a half) or a
    ``UID:GID`` (``container.user: 1000:50``), never a count of seconds."""
    return node.tag in _NUMBER_TAGS and ":" in str(node.value)


def _too_many(doc: Located) -> str:
    """Which limit a document broke: its own size, or aliases that multiply it."""
    if doc.aliased:
        return (
            f"the document expands to more than {MAX_VALUES} values through YAML aliases "
            "(*name); a job spec or pool file is refused past that"
        )
    return (
        f"the document has more than {MAX_VALUES} values (each list item and mapping "
        "value counts, env: entries included); a job spec or pool file may have at most "
        "that many"
    )


def _key(loader: Any, node: yaml.Node, doc: Located) -> Any:
    """A mapping key: only a scalar. A list or mapping as key (``? [a]``) is no name a
    spec or pool file has, and building it would bypass MAX_VALUES (aliases in a key
    expand to billions of values before anything could count them)."""
    if not isinstance(node, yaml.ScalarNode):
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
        raise SpecError(
            f"{source_line(doc, node)}: a key must be a plain value (a name or a number), "
            f"not {kind}"
        )
    return loader.construct_object(node, deep=True)


def source_line(doc: Located, node: yaml.Node) -> str:
    return f"{doc.source}:{node.start_mark.line + 1}"


class Errors:
    """Every problem of one document, each with where it came from (``file:line: key:``),
    so a user sees them all at once (job specs, pool files)."""

    def __init__(self, doc: Located) -> None:
        self.doc = doc
        self.items: list[str] = []

    def add(self, path: tuple[str, ...], message: str) -> None:
        key = f"{'.'.join(path)}: " if path else ""
        self.items.append(clip(f"{self.doc.where(path)}: {key}{message}"))

    def check_keys(self, raw: dict[Any, Any], valid: tuple[str, ...], at: tuple[str, ...]) -> None:
        """An error per unknown key, with the closest valid one (or the list)."""
        for key in raw:
            if str(key) not in valid:
                hint = suggest(str(key), valid) or f"; valid keys: {', '.join(valid)}"
                self.add((*at, str(key)), f"unknown key{hint}")


def suggest(key: str, valid: tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for a key close to a valid one (``-`` read as ``_``)."""
    candidates = difflib.get_close_matches(key.replace("-", "_"), valid, n=1, cutoff=0.6)
    return f" (did you mean {candidates[0]!r}?)" if candidates else ""
