"""Frozen value records that cost next to nothing to define.

``@dataclass(frozen=True)`` writes its methods with ``exec()`` when the class is created: about 0.4 ms a
class, 15 ms for the forty-odd rejection and explanation records every ``compat resolve`` imports.  A
:class:`Record` subclass declares its fields as annotations, as a dataclass does (``ClassVar`` ones are
class constants, not fields); the methods below are shared and read ``_fields``.  Records are frozen,
compare and hash by type and values, and print like dataclasses.  Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # type checkers read Record subclasses as frozen dataclasses
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any):
        return lambda cls: cls


@dataclass_transform(frozen_default=True, eq_default=True)
class Record:
    """Base of a frozen record: ``class Yanked(Record): yank: Yank``; ``Yanked(yank)`` or ``Yanked(yank=...)``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}  # fields declared with a value (``fact: Optional[X] = None``), as in a dataclass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [name for name, kind in cls.__dict__.get("__annotations__", {}).items() if not str(kind).startswith(("ClassVar", "typing.ClassVar"))]
        cls._fields = cls._fields + tuple(own)
        cls._defaults = {**cls._defaults, **{name: cls.__dict__[name] for name in own if name in cls.__dict__}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) == len(fields) and not kwargs:  # the common case, kept fast: the resolver makes thousands
            self.__dict__.update(zip(fields, args))
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
        return tuple(getattr(self, name) for name in self._fields)

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
