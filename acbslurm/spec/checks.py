"""The checks of a job spec's values that its parts share: one-line text, numbers,
paths, commands, environments. Each takes the value, its key path and the ``Errors``
that collect every problem with its place; it returns the value as the spec keeps it,
or None (an empty tuple for a list) when it was refused.
"""

from __future__ import annotations

import re
from typing import Any

from acbslurm import units
from acbslurm.envrules import env_problem
from acbslurm.spec.yamlpos import Errors

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the longest one argument or environment
# string, its NUL included, that execve takes. The command reaches the node as one
# argument (`bash -c TEXT`, `acbslurm run ... sh -c TEXT`, the container's `sh -c`):
# longer, every exec fails there (E2BIG, "Argument list too long", exit 126) after the
# job waited in the queue.
MAX_ARG_STRLEN = 32 * 4096


def one_line(value: Any, path: tuple[str, ...], e: Errors, *, what: str = "a string") -> str | None:
    """A one-line string value (it ends up on an #SBATCH line or in a path)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        e.add(path, f"must be {what}, got {value!r}")
        return None
    text = str(value)
    if not text:
        e.add(path, "must not be empty (leave the key out instead)")
        return None
    if CONTROL.search(text):
        e.add(path, f"must be one line without control characters, got {text!r}")
        return None
    return text


def positive_int(value: Any, path: tuple[str, ...], e: Errors) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        e.add(path, f"must be a positive integer, got {value!r}")
        return None
    text = str(value).strip()
    if not units.is_ascii_int(text) or int(text) <= 0:
        e.add(path, f"must be a positive integer, got {value!r}")
        return None
    return int(text)


def pattern(
    value: Any, rx: re.Pattern[str], path: tuple[str, ...], e: Errors, hint: str
) -> str | None:
    text = one_line(value, path, e)
    if text is not None and not rx.match(text):
        e.add(path, f"{text!r} is not {hint}")
        return None
    return text


def unit(value: Any, parse: Any, path: tuple[str, ...], e: Errors) -> str | None:
    if value is None:
        return None
    try:
        return str(parse(value))
    except ValueError as exc:
        e.add(path, str(exc))
        return None


def env(
    value: Any, path: tuple[str, ...], e: Errors, *, container: bool = True
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        e.add(path, f"must be a mapping of NAME: value, got {value!r}")
        return ()
    out: list[tuple[str, str]] = []
    for key, raw in value.items():
        kpath = (*path, str(key))
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            e.add(kpath, "is not a valid variable name (letters, digits, _; not first a digit)")
            continue
        if problem := env_problem(key, container=container):
            e.add(kpath, problem)
            continue
        text = _env_text(raw, kpath, e)
        if text is not None and _fits_exec(f"{key}={text}", kpath, e, "is, with its name,"):
            out.append((key, text))
    return tuple(out)


def _env_text(raw: Any, kpath: tuple[str, ...], e: Errors) -> str | None:
    """An env value as text (booleans as true/false, None as ""); None if refused."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return ""
    if isinstance(raw, str | int | float):
        text = str(raw)
        if "\x00" in text:
            e.add(kpath, "must not contain a NUL character")
            return None
        return text
    e.add(kpath, f"must be a string or number, got {raw!r}")
    return None


def _fits_exec(text: str, path: tuple[str, ...], e: Errors, what: str = "") -> bool:
    size = len(text.encode("utf-8", "surrogateescape")) + 1
    if size <= MAX_ARG_STRLEN:
        return True
    e.add(
        path,
        f"{what or 'is'} {size - 1} bytes, over Linux's {MAX_ARG_STRLEN - 1} for one "
        "argument (MAX_ARG_STRLEN): the job would fail at its start (exit 126, Argument "
        "list too long); put it in a file the job runs or reads",
    )
    return False


def command(value: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...] | str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            e.add(path, "must not be empty")
            return None
        if "\x00" in value:
            e.add(path, "must not contain a NUL character")
            return None
        return value if _fits_exec(value, path, e) else None
    if isinstance(value, list):
        return _words(value, path, e)
    e.add(path, f"must be a list of arguments or a shell command string, got {value!r}")
    return None


def _words(value: list[Any], path: tuple[str, ...], e: Errors) -> tuple[str, ...] | None:
    """A command as a list of arguments (strings or numbers, no NUL)."""
    if not value:
        e.add(path, "must not be an empty list")
        return None
    words: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            e.add((*path, str(i)), f"must be a string or number, got {item!r}")
            return None
        if "\x00" in str(item):
            e.add((*path, str(i)), "must not contain a NUL character")
            return None
        if not _fits_exec(str(item), (*path, str(i)), e):
            return None
        words.append(str(item))
    return tuple(words)


def path_value(
    value: Any, path: tuple[str, ...], e: Errors, *, absolute: bool = False
) -> str | None:
    text = one_line(value, path, e, what="a path")
    if text is not None and absolute and not text.startswith("/"):
        e.add(path, f"{text!r} must be an absolute path")
        return None
    return text


def boolean(value: Any, path: tuple[str, ...], e: Errors) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    e.add(path, f"must be true or false, got {value!r}")
    return None


def ruled(value: Any, rule: Any, path: tuple[str, ...], e: Errors) -> str | None:
    """A text or whole-number value that ``rule`` accepts, as text (``user: 1000`` is
    a UID, ``shm_size: 1073741824`` bytes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        e.add(path, f"must be text or a whole number, got {value!r}")
        return None
    text = str(value).strip()
    try:
        rule(text)
    except ValueError as exc:
        e.add(path, str(exc))
        return None
    return text


def each(value: Any, rule: Any, path: tuple[str, ...], e: Errors) -> tuple[str, ...]:
    """One value or a list of them (``publish: [8888, "18888:8888"]``), each checked by
    ``rule`` as `acbslurm run` checks its option."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for i, item in enumerate(items):
        ipath = (*path, str(i)) if isinstance(value, list) else path
        text = ruled(item, rule, ipath, e)
        if text is not None:
            out.append(text)
    return tuple(out)
