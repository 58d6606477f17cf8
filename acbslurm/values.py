"""The package's value types: ``@frozen`` and ``@mutable`` classes, with ``field``,
``replace``, ``field_names`` and ``as_dict``. The one way to write a value type in
acbslurm (ruff's banned-api refuses ``dataclasses``; CONTRIBUTING.md, "Lean imports").

What a class gets is what ``@dataclass`` (``frozen=True`` for ``@frozen``) gives it:
fields from its annotations in order (a base's first), defaults and
``field(default_factory=...)``, keyword or positional arguments, equality between
instances of the same class over its compared fields, a hash for frozen ones, a repr
naming each shown field, assignment refused on frozen ones, and a call of the class's
``__post_init__`` if it has one. Type checkers read both decorators as dataclasses
(PEP 681's ``dataclass_transform``).

Why not ``dataclasses``: it writes each class's methods as source text and compiles them,
and it imports ``inspect``; the hooks and `acbslurm run`, which every job waits for, load
these classes. Here the methods are written once, generic over the class's fields, so a
class costs what reading its annotations costs (docs/benchmarks.md, "Where the client's
time went").
"""

from __future__ import annotations

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
    C = TypeVar("C", bound=type)
else:

    def dataclass_transform(**_kw: object) -> Callable[[T], T]:
        return lambda f: f


_FIELDS = "__value_fields__"  # the class's fields: a tuple of _Field
_MISSING: Any = object()


class FrozenError(AttributeError):
    """An assignment to a field of a frozen value (dataclasses' FrozenInstanceError)."""


class _Field:
    __slots__ = ("compared", "default", "factory", "name", "shown")

    def __init__(
        self, name: str, default: Any, factory: Any, shown: bool = True, compared: bool = True
    ) -> None:
        self.name = name
        self.default = default
        self.factory = factory
        self.shown = shown  # in the repr
        self.compared = compared  # in equality and the hash


class _Spec:
    """What ``field(...)`` returns until the decorator reads it."""

    __slots__ = ("compared", "default", "factory", "shown")

    def __init__(self, default: Any, factory: Any, shown: bool, compared: bool) -> None:
        self.default = default
        self.factory = factory
        self.shown = shown
        self.compared = compared


def field(
    *,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field's default, or the callable that makes a fresh one per instance (neither:
    a required field); ``repr=False`` leaves it out of the repr, ``compare=False`` out of
    equality and the hash."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise TypeError("field() takes default or default_factory, not both")
    return _Spec(default, default_factory, repr, compare)


def _fields_of(cls: type) -> tuple[_Field, ...]:
    """The fields of ``cls``: its bases' (nearest last), then its own annotations."""
    found: dict[str, _Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get(_FIELDS, ()):
            found[f.name] = f
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect is not lean)
    for name, annotation in own.items():
        if not str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            found[name] = _own_field(cls, name)
    out = tuple(found.values())
    _check_order(cls, out)
    return out


def _own_field(cls: type, name: str) -> _Field:
    """Field ``name`` as ``cls``'s body gives it; its class attribute as dataclasses
    leaves it (the default; none for a factory or a required field)."""
    given = cls.__dict__.get(name, _MISSING)
    if not isinstance(given, _Spec):
        return _Field(name, given, _MISSING)
    if given.default is _MISSING:
        delattr(cls, name)
    else:
        setattr(cls, name, given.default)
    return _Field(name, given.default, given.factory, given.shown, given.compared)


def _check_order(cls: type, fields: tuple[_Field, ...]) -> None:
    """No field without a default after one with a default (as dataclasses)."""
    seen_default = False
    for f in fields:
        has_default = f.default is not _MISSING or f.factory is not _MISSING
        if seen_default and not has_default:
            raise TypeError(
                f"{cls.__qualname__}: field {f.name!r} without a default follows one with a default"
            )
        seen_default = seen_default or has_default


class _Plan:
    """How a class's ``__init__`` fills an instance from keywords alone (the usual
    call), worked out once per class: a job listing builds one record per row."""

    __slots__ = ("defaults", "factories", "names", "required")

    def __init__(self, fields: tuple[_Field, ...]) -> None:
        self.names = frozenset(f.name for f in fields)
        self.defaults = {
            f.name: f.default for f in fields if f.factory is _MISSING and f.default is not _MISSING
        }
        self.factories = tuple((f.name, f.factory) for f in fields if f.factory is not _MISSING)
        self.required = tuple(
            f.name for f in fields if f.factory is _MISSING and f.default is _MISSING
        )


_PLAN = "__value_plan__"


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    if args:
        _init_positional(self, args, kwargs)
        return
    cls = type(self)
    plan: _Plan = getattr(cls, _PLAN)
    if not plan.names.issuperset(kwargs):
        unknown = min(set(kwargs) - plan.names)
        raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {unknown!r}")
    for name in plan.required:
        if name not in kwargs:
            raise TypeError(f"{cls.__qualname__}() missing required argument: {name!r}")
    values = {**plan.defaults, **kwargs}
    for name, factory in plan.factories:
        if name not in kwargs:
            values[name] = factory()
    try:
        self.__dict__.update(values)  # past a frozen class's __setattr__, as dataclasses
    except AttributeError:  # a class with __slots__ has no __dict__
        for name, value in values.items():
            object.__setattr__(self, name, value)
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _init_positional(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    cls = type(self)
    fields: tuple[_Field, ...] = getattr(cls, _FIELDS)
    if len(args) > len(fields):
        raise TypeError(
            f"{cls.__qualname__}() takes {len(fields)} positional arguments but "
            f"{len(args)} were given"
        )
    put = object.__setattr__
    for f, arg in zip(fields, args, strict=False):  # fewer args: the rest below
        if f.name in kwargs:
            raise TypeError(f"{cls.__qualname__}() got multiple values for argument {f.name!r}")
        put(self, f.name, arg)
    for f in fields[len(args) :]:
        if f.name in kwargs:
            put(self, f.name, kwargs.pop(f.name))
        elif f.factory is not _MISSING:
            put(self, f.name, f.factory())
        elif f.default is not _MISSING:
            put(self, f.name, f.default)
        else:
            raise TypeError(f"{cls.__qualname__}() missing required argument: {f.name!r}")
    if kwargs:
        raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {min(kwargs)!r}")
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in getattr(type(self), _FIELDS) if f.compared)


def _repr(self: Any) -> str:
    fields: tuple[_Field, ...] = getattr(type(self), _FIELDS)
    inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields if f.shown)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_setattr(_self: Any, name: str, _value: object) -> None:
    raise FrozenError(f"cannot assign to field {name!r}")


def _frozen_delattr(_self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r}")


def _make(cls: C, is_frozen: bool) -> C:
    fields = _fields_of(cls)
    setattr(cls, _FIELDS, fields)
    setattr(cls, _PLAN, _Plan(fields))
    own = cls.__dict__
    methods: dict[str, Any] = {
        "__init__": _init,
        "__repr__": _repr,
        "__eq__": _eq,
        "__match_args__": tuple(f.name for f in fields),
    }
    if is_frozen:
        methods.update(__hash__=_hash, __setattr__=_frozen_setattr, __delattr__=_frozen_delattr)
    else:
        methods["__hash__"] = None  # as dataclasses: mutable and compared by value
    for name, method in methods.items():
        if name not in own or (name == "__hash__" and own.get(name) is None):
            setattr(cls, name, method)
    return cls


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: C) -> C:
    """A frozen value type: ``@dataclass(frozen=True)``."""
    return _make(cls, is_frozen=True)


@dataclass_transform(field_specifiers=(field,))
def mutable(cls: C) -> C:
    """A mutable one: ``@dataclass``."""
    return _make(cls, is_frozen=False)


def field_names(cls: type) -> tuple[str, ...]:
    """The names of the fields of a ``@frozen`` or ``@mutable`` class, in order."""
    return tuple(f.name for f in getattr(cls, _FIELDS))


def replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes`` (``dataclasses.replace``)."""
    kwargs = {name: getattr(obj, name) for name in field_names(type(obj))}
    unknown = set(changes) - set(kwargs)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    kwargs.update(changes)
    return type(obj)(**kwargs)


def as_dict(obj: Any) -> Any:
    """``obj`` as plain data: values and records as dicts, recursively, through lists,
    tuples and dicts (``dataclasses.asdict``)."""
    fields = getattr(type(obj), _FIELDS, None)
    if fields is not None:
        return {f.name: as_dict(getattr(obj, f.name)) for f in fields}
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_dict(v) for v in obj)
    if isinstance(obj, dict):
        return {k: as_dict(v) for k, v in obj.items()}
    return obj
