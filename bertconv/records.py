"""Dataclasses whose methods are written once, here, instead of compiled per class at import.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and frozen
`__setattr__`/`__delattr__` as source text and compiles it with `exec` when the module is
imported (about 0.3 ms a class), and `import dataclasses` brings `inspect`, `ast` and `dis`
(about 5 ms). `audit` of a safetensors file runs in tens of milliseconds and its modules declare
some thirty value types. `@record` declares them as `@dataclass(frozen=True)` does, with the
methods below shared by every record, and without importing `dataclasses`: a record becomes a
real dataclass the first time anyone asks (`dataclasses.fields`, `replace`, `asdict`,
`is_dataclass` all work). Type checkers read `@record` as `@dataclass` (`dataclass_transform`),
frozen unless told otherwise, and `field` as `dataclasses.field`.

    @record
    class Span:
        start: int
        stop: int = 0
        notes: list[str] = field(default_factory=list, compare=False)
"""

from __future__ import annotations

#: typing.TYPE_CHECKING without importing typing at run time (`audit` does not otherwise need it).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar, dataclass_transform, overload

    _Class = TypeVar("_Class", bound=type)
    _Value = TypeVar("_Value")
    _Method = Callable[..., Any]
else:
    def overload(function):
        return function

    def dataclass_transform(**_options):
        return lambda decorator: decorator


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: A field's default when it has none (`dataclasses.MISSING` is the same idea, in a module
#: this one does not import).
MISSING: Any = _Missing()


class Field:
    """One field of a record: its name, default (or default factory), and whether `__eq__`,
    `__hash__` and `__repr__` look at it."""

    __slots__ = ("name", "default", "default_factory", "compare", "repr")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True,
                 repr: bool = True):
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field cannot have both a default and a default_factory")
        self.name = ""
        self.default, self.default_factory, self.compare, self.repr = default, default_factory, compare, repr

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.default_factory is MISSING

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


@overload
def field(*, default: _Value, compare: bool = True, repr: bool = True) -> _Value: ...
@overload
def field(*, default_factory: Callable[[], _Value], compare: bool = True, repr: bool = True) -> _Value: ...
@overload
def field(*, compare: bool = True, repr: bool = True) -> Any: ...


def field(*, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True, repr: bool = True) -> Any:
    """A field with a default, a default factory (called for each instance), or neither; left out
    of `__eq__`/`__hash__` with `compare=False`, of `__repr__` with `repr=False`."""
    return Field(default, default_factory, compare, repr)


@overload
def record(cls: _Class, /) -> _Class: ...
@overload
def record(*, frozen: bool = True, eq: bool = True) -> Callable[[_Class], _Class]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: _Class | None = None, /, *, frozen: bool = True, eq: bool = True) -> Any:
    """Make `cls` a record: a dataclass, frozen and compared and hashed by its fields unless told
    otherwise."""
    def build(cls: _Class) -> _Class:
        return _build(cls, frozen=frozen, eq=eq)
    return build if cls is None else build(cls)


def fields(record_or_class: object) -> tuple[Field, ...]:
    """The fields of a record (or of its class), in declaration order, inherited ones first."""
    cls = record_or_class if isinstance(record_or_class, type) else type(record_or_class)
    try:
        return cls.__dict__["__record_fields__"]  # type: ignore[no-any-return]
    except KeyError:
        raise TypeError(f"{cls.__qualname__} is not a record") from None


def replace(obj: _Value, /, **changes: Any) -> _Value:
    """A copy of `obj` with `changes` (a record or any dataclass), built by its `__init__`."""
    if "__record_fields__" not in type(obj).__dict__:
        import dataclasses
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    names = {f.name for f in fields(obj)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {unknown[0]!r}")
    return type(obj)(**{name: changes.get(name, getattr(obj, name)) for name in names})


def _build(cls: _Class, *, frozen: bool, eq: bool) -> _Class:
    own = set(vars(cls))
    declared = _declared_fields(cls)
    cls.__record_fields__ = declared  # type: ignore[attr-defined]
    setattr(cls, "__match_args__", tuple(f.name for f in declared))
    cls.__dataclass_fields__ = _AsDataclass(cls)  # type: ignore[attr-defined]
    if not cls.__doc__:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in declared)})"
    methods: dict[str, _Method | None] = {
        "__init__": _init(cls, declared, frozen=frozen),
        "__repr__": _repr(tuple(f.name for f in declared if f.repr)),
    }
    if eq:
        compared = tuple(f.name for f in declared if f.compare)
        methods["__eq__"] = _eq(compared)
        methods["__hash__"] = _hash(compared) if frozen else None
    if frozen:
        methods["__setattr__"] = _refuse_assignment
        methods["__delattr__"] = _refuse_deletion
    for name, method in methods.items():
        if name not in own:
            if method is not None:
                method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)
    return cls


def _declared_fields(cls: type) -> tuple[Field, ...]:
    """The fields of `cls`: its bases' records' first, then its own annotations in order (a
    `ClassVar` is not a field); the class attribute is the default, as for a dataclass."""
    by_name: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for inherited in base.__dict__.get("__record_fields__", ()):
            by_name[inherited.name] = inherited
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, MISSING)
        if type(value).__module__ == "dataclasses":
            raise TypeError(f"{cls.__qualname__}.{name}: a record's fields are declared with records.field")
        declared = value if isinstance(value, Field) else Field(default=value)
        if type(declared.default).__hash__ is None:
            raise ValueError(f"{cls.__qualname__}.{name}: a mutable default is shared by every instance; "
                             "use field(default_factory=...)")
        declared.name = name
        if declared.default is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, declared.default)
        by_name[name] = declared  # a field declared again keeps its place, as in a dataclass
    ordered = tuple(by_name.values())
    required = [f.required for f in ordered]
    if False in required and True in required[required.index(False):]:
        late = ordered[required.index(True, required.index(False))].name
        raise TypeError(f"{cls.__qualname__}: field {late!r} has no default but follows one that has")
    return ordered


class _AsDataclass:
    """`__dataclass_fields__` of a record until first asked for: then `dataclasses` processes
    the class (no method compiled) and the answer is its real field dictionary."""

    def __init__(self, cls: type):
        self.cls = cls

    def __get__(self, instance: object, owner: type) -> Any:
        import dataclasses

        cls = self.cls
        if "__dataclass_fields__" in cls.__dict__ and cls.__dict__["__dataclass_fields__"] is self:
            del cls.__dataclass_fields__  # type: ignore[attr-defined]
            own = cls.__dict__.get("__annotations__", {})
            for declared in cls.__record_fields__:  # type: ignore[attr-defined]
                if declared.name in own:
                    defaults = {option: getattr(declared, option) for option in ("default", "default_factory")
                                if getattr(declared, option) is not MISSING}
                    setattr(cls, declared.name, dataclasses.field(**defaults, compare=declared.compare,
                                                                  repr=declared.repr))
            dataclasses.dataclass(init=False, repr=False, eq=False, match_args=False)(cls)
        return cls.__dict__["__dataclass_fields__"]


def _init(cls: type, declared: tuple[Field, ...], *, frozen: bool) -> _Method:
    """`cls.__init__(self, *values, **named)`: each field from its value, else from its default.

    The fields go into the instance's dict in one update, in field order, as `object.__setattr__`
    would put them one call at a time (a BERT-large checkpoint's headers make thousands of
    records: 3,000 took 6.5-12.4 ms one field at a time, 3.1 ms so); a mutable record whose class
    sets attributes its own way gets each through its `__setattr__`."""
    names = tuple(f.name for f in declared)
    defaults = tuple((f.default, f.default_factory) for f in declared)
    post_init = getattr(cls, "__post_init__", None)
    own_setattr = not frozen and cls.__setattr__ is not object.__setattr__
    # For each count of leading values, the plain defaults of the fields after them (None where one
    # of those has a factory or none), which the names given replace: most records are made so (a
    # table's `Row` from its canonical name and name, 3.5 -> 2.0 us; with its legacy names 3.8-4.1 -> 3.3-3.7).
    tails = [None if any(default is MISSING for default, _ in defaults[given:])
             else dict(zip(names[given:], (default for default, _ in defaults[given:]))) for given in range(len(names))]

    def fill(fields: dict[str, object], given: int, named: dict[str, object]) -> None:
        """The fields after the `given` leading values: from `named`, else their defaults."""
        if given > len(names):
            raise TypeError(f"{cls.__qualname__}() takes {len(names)} positional arguments but {given} were given")
        for name in fields:
            if name in named:
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
        for name, (default, factory) in zip(names[given:], defaults[given:]):
            if name in named:
                fields[name] = named.pop(name)
            elif default is not MISSING:
                fields[name] = default
            elif factory is not MISSING:
                fields[name] = factory()
            else:
                raise TypeError(f"{cls.__qualname__}() missing required argument: {name!r}")
        if named:
            raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {next(iter(named))!r}")

    def __init__(self: object, *values: object, **named: object) -> None:
        fields = dict(zip(names, values))
        if named or len(values) != len(names):
            tail = tails[len(values)] if len(values) < len(names) else None
            if tail is not None and named.keys() <= tail.keys():
                fields.update(tail)
                fields.update(named)
            else:
                fill(fields, len(values), named)
        if own_setattr:
            for name, value in fields.items():
                setattr(self, name, value)
        else:
            self.__dict__.update(fields)
        if post_init is not None:
            post_init(self)
    return __init__


def _repr(shown: tuple[str, ...]) -> _Method:
    def __repr__(self: object) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({values})"
    return __repr__


def _eq(compared: tuple[str, ...]) -> _Method:
    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        # as tuples, as dataclasses compare: an element is equal to itself before `==` is asked
        return tuple(getattr(self, name) for name in compared) == tuple(getattr(other, name) for name in compared)
    return __eq__


def _hash(compared: tuple[str, ...]) -> _Method:
    def __hash__(self: object) -> int:
        return hash(tuple(getattr(self, name) for name in compared))
    return __hash__


def _refuse_assignment(self: object, name: str, value: object) -> None:
    from dataclasses import FrozenInstanceError
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_deletion(self: object, name: str) -> None:
    from dataclasses import FrozenInstanceError
    raise FrozenInstanceError(f"cannot delete field {name!r}")
