"""acbslurm/values.py: ``@frozen`` and ``@mutable`` behave as ``@dataclass(frozen=True)``
and ``@dataclass`` do, for what the project's value types use; each case is asked of
both and the answers compared, so a difference from dataclasses fails here."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, ClassVar

import pytest

from acbslurm.values import FrozenError, as_dict, field, field_names, frozen, mutable, replace


def _pair_frozen() -> tuple[type, type]:
    """One frozen class made by each: fields, a default, a factory, a ClassVar, a method."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {
                "name": "str",
                "size": "int",
                "tags": "list[str]",
                "kind": "str",
                "LIMIT": "ClassVar[int]",
            },
            "LIMIT": 3,
            "described": lambda self: f"{self.name}:{self.size}",
        }

    ours = type("Thing", (), body())
    ours.tags = field(default_factory=list)  # type: ignore[attr-defined]
    ours.kind = "plain"  # type: ignore[attr-defined]
    theirs = type("Thing", (), body())
    theirs.tags = dataclasses.field(default_factory=list)  # type: ignore[attr-defined]
    theirs.kind = "plain"  # type: ignore[attr-defined]
    return frozen(ours), dataclasses.dataclass(frozen=True)(theirs)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("a", 1), {}),
    (("a",), {"size": 2}),
    ((), {"name": "b", "size": 3, "tags": ["x"], "kind": "k"}),
    (("a", 1, ["t"], "k"), {}),
    # refused, the same way
    ((), {}),
    (("a",), {}),
    (("a", 1), {"name": "again"}),
    (("a", 1), {"colour": "red"}),
    (("a", 1, [], "k", "extra"), {}),
    # keywords alone (the call a listing makes per row): unknown and missing together
    ((), {"size": 1, "colour": "red"}),
    ((), {"name": "c", "size": 4, "kind": "k", "tags": ("t",)}),
]


def _outcome(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        obj = cls(*args, **kwargs)
    except TypeError:
        return TypeError
    return (
        [getattr(obj, n) for n in ("name", "size", "tags", "kind")],
        obj.described(),
        obj.LIMIT,
        repr(obj),
        obj == cls(obj.name, obj.size, list(obj.tags), obj.kind),
        obj == cls(obj.name, obj.size + 1, list(obj.tags), obj.kind),
    )


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_construction_equality_and_repr_match_dataclasses(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ours, theirs = _pair_frozen()
    assert _outcome(ours, args, kwargs) == _outcome(theirs, args, kwargs)


def test_frozen_refuses_assignment_and_hashes_by_its_fields() -> None:
    ours, theirs = _pair_frozen()
    for cls, error in ((ours, FrozenError), (theirs, dataclasses.FrozenInstanceError)):
        obj = cls("a", 1, (), "k")  # a tuple: hashable, as the field's value must be
        with pytest.raises(error):
            obj.size = 2
        with pytest.raises(AttributeError):
            del obj.name
        assert hash(obj) == hash(cls("a", 1, (), "k"))
        assert {obj, cls("a", 1, (), "k")} == {obj}
    assert issubclass(FrozenError, AttributeError)


def test_a_factory_gives_each_instance_its_own_value() -> None:
    ours, _ = _pair_frozen()
    one, two = ours("a", 1), ours("b", 2)
    one.tags.append("x")
    assert two.tags == []
    assert "tags" not in vars(ours)  # as dataclasses: no class attribute for a factory
    assert ours.kind == "plain"


def test_mutable_assigns_compares_and_is_unhashable() -> None:
    @mutable
    class Counter:
        name: str
        seen: dict[str, int] = field(default_factory=dict)

    @dataclasses.dataclass
    class Theirs:
        name: str
        seen: dict[str, int] = dataclasses.field(default_factory=dict)

    for cls in (Counter, Theirs):
        c = cls("a")
        c.name = "b"
        c.seen["x"] = 1
        assert c == cls("b", {"x": 1})
        with pytest.raises(TypeError):
            hash(c)


def test_different_classes_with_equal_fields_are_not_equal() -> None:
    @frozen
    class A:
        x: int

    @frozen
    class B:
        x: int

    assert A(1) != B(1)
    assert A(1) == A(1)


def test_a_subclass_has_its_bases_fields_first() -> None:
    @frozen
    class Base:
        a: int
        b: int = 2

    @frozen
    class Child(Base):
        c: int = 3

    assert field_names(Child) == ("a", "b", "c")
    assert Child(1) == Child(1, 2, 3)
    assert repr(Child(1, c=4)).endswith(".Child(a=1, b=2, c=4)")  # qualname, as dataclasses


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' without a default"):

        @frozen
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]


def test_field_takes_at_most_one_default() -> None:
    with pytest.raises(TypeError):
        field(default=1, default_factory=list)

    @frozen
    class Secret:
        name: str
        key: str = field(repr=False)  # no default: required, as with dataclasses

    assert "key" not in vars(Secret)
    assert repr(Secret("a", "k")).endswith(".Secret(name='a')")
    with pytest.raises(TypeError, match="missing required argument: 'key'"):
        Secret("a")  # type: ignore[call-arg]


@frozen
class Inner:
    uuid: str
    index: int | None = None


@frozen
class Outer:
    job: str
    gpus: tuple[Inner, ...] = ()
    env: dict[str, Any] = field(default_factory=dict)
    LABEL: ClassVar[str] = "x"


def test_replace_field_names_and_as_dict() -> None:
    o = Outer("7", (Inner("GPU-a", 0), Inner("GPU-b")), {"k": [Inner("GPU-c")]})
    assert field_names(Outer) == ("job", "gpus", "env")
    r = replace(o, job="8")
    assert (r.job, r.gpus, r.env) == ("8", o.gpus, o.env)
    assert o.job == "7"
    with pytest.raises(TypeError, match="no field 'colour'"):
        replace(o, colour="red")
    assert as_dict(o) == {
        "job": "7",
        "gpus": ({"uuid": "GPU-a", "index": 0}, {"uuid": "GPU-b", "index": None}),
        "env": {"k": [{"uuid": "GPU-c", "index": None}]},
    }


def test_values_pickle_and_match() -> None:
    o = Outer("7", (Inner("GPU-a", 0),))
    assert pickle.loads(pickle.dumps(o)) == o
    match o:
        case Outer(job, gpus):
            assert (job, gpus) == ("7", (Inner("GPU-a", 0),))
        case _:
            pytest.fail("no match")


def test_a_field_can_be_left_out_of_the_repr() -> None:
    @mutable
    class Cache:
        name: str
        _seen: set[str] | None = field(default=None, repr=False)

    @dataclasses.dataclass
    class Theirs:
        name: str
        _seen: set[str] | None = dataclasses.field(default=None, repr=False)

    assert repr(Cache("a", {"x"})).endswith(".Cache(name='a')")
    assert repr(Theirs("a", {"x"})).endswith(".Theirs(name='a')")


def test_post_init_runs_after_the_fields_are_set() -> None:
    @frozen
    class Checked:
        low: int
        high: int

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError(f"low {self.low} above high {self.high}")

    assert Checked(1, 2).high == 2
    with pytest.raises(ValueError, match="low 3 above high 2"):
        Checked(3, 2)


def test_a_field_can_be_left_out_of_equality_and_the_hash() -> None:
    @frozen
    class Seen:
        name: str
        when: float = field(default=0.0, compare=False)

    assert Seen("a", 1.0) == Seen("a", 2.0)
    assert hash(Seen("a", 1.0)) == hash(Seen("a", 2.0))
    assert Seen("a") != Seen("b")
