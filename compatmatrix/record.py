"""Frozen value records that cost next to nothing to define.

``@dataclass(frozen=True)`` writes its methods with ``exec()`` when the class is created: about 0.4 ms a
class, 15 ms for the forty-odd rejection and explanation records every ``compat resolve`` imports.  A
:class:`Record` subclass declares its fields as annotations, as a dataclass does (``ClassVar`` ones are
class constants, not fields); the methods below are shared and read ``_fields``.  Records are frozen,
compare and hash by type and values (``_uncompared`` names fields left out, as ``field(compare=False)``), and
print like dataclasses; :func:`replace` copies one with changes, and dataclasses.replace() / fields() /
asdict() take them too (their ``__dataclass_fields__`` is made on first use).  The matrix model, the resolver's
results, the targets and the environment snapshot are records: start-up defines ~60 classes.  Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # type checkers read Record subclasses as frozen dataclasses
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any):
        return lambda cls: cls


class _DataclassFields:
    """``__dataclass_fields__`` of a Record class, made on first use, so that dataclasses.replace(), fields() and
    asdict() take records as the frozen dataclasses they stand in for (dataclasses is imported only then)."""

    def __get__(self, instance: Any, owner: type) -> dict[str, Any]:
        made = owner.__dict__.get("_dataclass_fields_made")
        if made is None:
            import dataclasses

            made = {}
            for name in owner._fields:  # type: ignore[attr-defined]
                field = dataclasses.field(default=owner._defaults[name]) if name in owner._defaults else dataclasses.field()  # type: ignore[attr-defined]
                field.name, field.type = name, Any
                field._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
                made[name] = field
            type.__setattr__(owner, "_dataclass_fields_made", made)
        return made


@dataclass_transform(frozen_default=True, eq_default=True)
class Record:
    """Base of a frozen record: ``class Yanked(Record): yank: Yank``; ``Yanked(yank)`` or ``Yanked(yank=...)``.

    A field named in the class's ``_uncompared`` takes no part in equality and hashing (a dataclass's
    ``field(compare=False)``)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_set: ClassVar[frozenset[str]] = frozenset()
    _compared: ClassVar[tuple[str, ...]] = ()
    _uncompared: ClassVar[frozenset[str]] = frozenset()
    _defaults: ClassVar[dict[str, Any]] = {}  # fields declared with a value (``fact: Optional[X] = None``), as in a dataclass
    __dataclass_fields__: ClassVar[dict[str, Any]] = _DataclassFields()  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [name for name, kind in cls.__dict__.get("__annotations__", {}).items() if not str(kind).startswith(("ClassVar", "typing.ClassVar"))]
        cls._fields = cls._fields + tuple(own)
        cls._field_set = frozenset(cls._fields)
        cls._compared = tuple(name for name in cls._fields if name not in cls._uncompared)
        cls._defaults = {**cls._defaults, **{name: cls.__dict__[name] for name in own if name in cls.__dict__}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) == len(fields) and not kwargs:  # the common case, kept fast: the resolver makes thousands
            self.__dict__.update(zip(fields, args))
            return
        if not args and kwargs.keys() == self._field_set:  # every field by name (the loader): as fast
            self.__dict__.update(kwargs)
            return
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} values, {len(args)} given")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated field {name!r}")
            values[name] = value
        missing = [name for name in fields if name not in values and name not in self._defaults]
        if missing:
            raise TypeError(f"{type(self).__name__} is missing {', '.join(missing)}")
        self.__dict__.update((name, values[name] if name in values else self._defaults[name]) for name in fields)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._compared)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self._fields)})"


def replace(record: Any, **changes: Any) -> Any:
    """A copy of ``record`` with some fields changed (dataclasses.replace without importing dataclasses)."""
    values = {name: record.__dict__[name] for name in record._fields}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(record).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(record)(**values)
