"""`@record` behaves as `@dataclass(frozen=True)` does (each case is checked against a dataclass
declared the same way), and is a real dataclass to whoever asks."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import pytest

from bertconv import records
from bertconv.records import field, record


def declare(decorator, field_of=field):
    """The same class body, made by `decorator` with fields declared by `field_of`: a base with a
    required field and one whose default is made per instance, and a subclass adding defaults,
    one left out of `==` and `repr`, and a post-init check."""
    @decorator
    class Base:
        """A base."""
        name: str
        tags: list[str] = field_of(default_factory=list)

    @decorator
    class Child(Base):
        """A child."""
        size: int = 0
        note: str = field_of(default="", compare=False, repr=False)

        def __post_init__(self) -> None:
            if self.size < 0:
                raise ValueError("size < 0")
    return Base, Child


@pytest.fixture(params=[True, False], ids=["frozen", "mutable"])
def both(request):
    """(frozen, our classes, the dataclasses declared the same way)"""
    frozen = request.param
    return (frozen, declare(record(frozen=frozen)),
            declare(dataclasses.dataclass(frozen=frozen), dataclasses.field))


def test_construction_repr_and_equality_are_the_dataclass_ones(both):
    _, (_, child), (_, expected) = both
    for args, kwargs in [(("a",), {}), (("a", ["x"], 3), {}), (("a",), {"size": 2, "note": "n"}),
                         ((), {"name": "b", "tags": ["y"]}), (("a", ["x"]), {}), (("a", ["x"]), {"note": "n"}),
                         (("a", ["x"]), {"note": "n", "size": 4})]:
        ours, theirs = child(*args, **kwargs), expected(*args, **kwargs)
        assert repr(ours).replace("Child", "X") == repr(theirs).replace("Child", "X")
        assert list(vars(ours).items()) == list(vars(theirs).items())  # every field, in field order
        assert ours == child(*args, **kwargs) and ours != child("other")
        assert ours == child(*args, **{**kwargs, "note": "ignored by =="})
        assert (ours == theirs) is False  # another class, as between two dataclasses
    assert child("a").tags is not child("a").tags  # the factory runs per instance
    every = child("a", ["x"], 3, "n")  # every field given in order: the short way in
    assert repr(every).replace("Child", "X") == repr(expected("a", ["x"], 3, "n")).replace("Child", "X")
    assert every == child("a", ["x"], size=3, note="n") and vars(every) == vars(expected("a", ["x"], 3, "n"))


def test_hash_follows_frozen_and_eq(both):
    frozen, (_, child), (_, expected) = both
    if frozen:
        assert hash(child("a", (), 1)) == hash(child("a", (), 1, note="x"))
    else:
        assert child.__hash__ is None and expected.__hash__ is None


@pytest.mark.parametrize("call", [lambda c: c(), lambda c: c("a", name="b"), lambda c: c("a", extra=1),
                                  lambda c: c("a", [], 1, "", 5)])
def test_bad_arguments_are_type_errors(call, both):
    _, (_, child), (_, expected) = both
    with pytest.raises(TypeError):
        call(expected)
    with pytest.raises(TypeError):
        call(child)


def test_post_init_runs(both):
    _, (_, child), _ = both
    with pytest.raises(ValueError, match="size < 0"):
        child("a", size=-1)
    with pytest.raises(ValueError, match="size < 0"):  # every field given in order: the short way in
        child("a", [], -1, "")


def test_a_frozen_record_refuses_assignment_as_a_dataclass_does():
    _, child = declare(record)
    value = child("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.size = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del value.name


def test_a_record_is_a_dataclass_to_whoever_asks(both):
    _, (base, child), (_, expected) = both
    value = child("a", ["t"], 2, "n")
    assert dataclasses.is_dataclass(value)
    assert [f.name for f in dataclasses.fields(child)] == [f.name for f in dataclasses.fields(expected)]
    assert [f.name for f in dataclasses.fields(base)] == ["name", "tags"]
    assert dataclasses.asdict(value) == {"name": "a", "tags": ["t"], "size": 2, "note": "n"}
    assert dataclasses.replace(value, size=5) == child("a", ["t"], 5)
    assert records.replace(value, size=5) == dataclasses.replace(value, size=5)
    assert child("a").tags == [] and value.tags == ["t"]  # the fields' defaults kept after the processing


@record
class Point:
    """Module level, so that pickle finds it."""
    x: int
    ys: list[int] = field(default_factory=list)


def test_copies_pickles_and_patterns():
    value = Point(1, [2])
    assert pickle.loads(pickle.dumps(value)) == value == copy.copy(value) == copy.deepcopy(value)
    assert copy.deepcopy(value).ys is not value.ys
    match value:
        case Point(x, ys):
            assert (x, ys) == (1, [2])


def test_declarations_a_dataclass_refuses_are_refused():
    with pytest.raises(TypeError, match="has no default but follows one"):
        @record
        class Late:
            a: int = 0
            b: int
    with pytest.raises(ValueError, match="mutable default"):
        @record
        class Shared:
            a: list[int] = []  # noqa: RUF012
    with pytest.raises(TypeError, match="records.field"):
        @record
        class Mixed:
            a: list[int] = dataclasses.field(default_factory=list)


def test_replace_names_an_unknown_field():
    _, child = declare(record)
    with pytest.raises(TypeError, match="no field 'colour'"):
        records.replace(child("a"), colour="red")


def test_declaring_records_imports_no_dataclasses():
    code = ("import sys; from bertconv.records import record, field\n"
            "@record\nclass A:\n    x: int\n    y: list = field(default_factory=list)\n"
            "a = A(1); assert a == A(1) and repr(a) == 'A(x=1, y=[])'\n"
            "print(sorted(m for m in ('dataclasses', 'inspect') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_no_module_of_the_package_declares_a_dataclass():
    """Value types are records: a `@dataclass` would compile its methods again at import (only
    records.py itself imports dataclasses, and only when a record is first asked for as one)."""
    from pathlib import Path

    package = Path(records.__file__).parent
    declaring = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if path.name != "records.py" and ("@dataclass" in (text := path.read_text(encoding="utf-8"))
                                                   or "from dataclasses import" in text)]
    assert declaring == []


def test_a_mutable_records_own_setattr_sees_every_field():
    """The fields go into the instance's dict in one update, unless a mutable record's class sets
    attributes its own way: then each goes through its `__setattr__`, as in a dataclass."""
    seen: list[str] = []

    @record(frozen=False)
    class Watched:
        name: str
        size: int = 0

        def __setattr__(self, name: str, value: object) -> None:
            seen.append(name)
            object.__setattr__(self, name, value)

    Watched("a", 1)
    Watched("b")
    Watched(name="c", size=2)
    assert seen == ["name", "size"] * 3
