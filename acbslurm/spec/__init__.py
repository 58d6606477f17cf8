"""Job specs: load a YAML spec (keeping file:line), apply ``--set`` overrides, validate.

spec = load_spec("job.yaml", ["container.image=busybox:latest", "gpus=2"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from acbslurm.errors import SpecError, short_repr
from acbslurm.mountrules import Mount
from acbslurm.spec.container import CONTAINER_KEYS, ContainerSpec
from acbslurm.spec.model import JOB_KEYS, JobSpec, ServeJob, validate
from acbslurm.spec.yamlpos import DuplicateKeyError, Located, load_located
from acbslurm.userfiles import SPEC_LIMIT, read_user_text

__all__ = [
    "CONTAINER_KEYS",
    "JOB_KEYS",
    "ContainerSpec",
    "JobSpec",
    "Mount",
    "ServeJob",
    "apply_overrides",
    "load_spec",
    "parse_spec",
]


def parse_spec(text: str, source: str, overrides: Sequence[str] = ()) -> JobSpec:
    """Validate spec ``text`` (named ``source`` in messages) with ``--set`` overrides."""
    try:
        doc = load_located(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{where}: not valid YAML: {problem}") from None
    if doc.value is None:
        doc.value = {}
    apply_overrides(doc, overrides)
    return validate(doc)


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read and validate the spec file at ``path``."""
    p = Path(path)
    try:
        text = read_user_text(p, "job spec", limit=SPEC_LIMIT, error=SpecError)
    except FileNotFoundError:
        raise SpecError(f"job spec {str(p)!r} does not exist") from None
    return parse_spec(text, str(p), overrides)


def _override_value(raw: str, key: str) -> Any:
    """A ``--set`` value: YAML scalars and flow lists (``2``, ``[a, b]``); else the text.

    Read by the file's loader, so its bound on aliases (and on keys) holds here too.
    """
    try:
        value = load_located(raw, f"--set {key}").value
    except (yaml.YAMLError, DuplicateKeyError):
        return raw
    # "a: b" would become a mapping; a value given on the command line is text then.
    if isinstance(value, dict) or (value is None and raw.strip() not in ("", "null", "~")):
        return raw
    return value


def _parent_of(root: dict[Any, Any], parts: tuple[str, ...], item: str) -> dict[Any, Any]:
    """The mapping that holds key ``parts`` (made where missing)."""
    node = root
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise SpecError(f"--set {short_repr(item)}: {short_repr(where)} is not a mapping")
        node = child
    return node


def apply_overrides(doc: Located, overrides: Sequence[str]) -> None:
    """Apply ``key=value`` / ``a.b=value`` items onto the loaded document, in order."""
    if not isinstance(doc.value, dict):
        return
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {short_repr(item)}: expected KEY=VALUE (e.g. --set mem=4G)")
        parts = tuple(key.split("."))
        if any(not p for p in parts):
            raise SpecError(
                f"--set {short_repr(item)}: {short_repr(key)} is not a key (use dots between names)"
            )
        node = _parent_of(doc.value, parts, item)
        node[parts[-1]] = _override_value(raw, key)
        # the value (and anything below it) now comes from the command line
        for p in [p for p in doc.origins if p[: len(parts)] == parts]:
            del doc.origins[p]
        doc.origins[parts] = f"--set {key}"
