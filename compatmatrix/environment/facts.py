"""What is known of one environment while a command looks at it: its snapshot, the matrix it is judged against, and a
memo of the facts that cost a child or a file system walk (the setvars diff, the loader's search, the interfaces up),
each computed once, on demand. The oneCCL environment (environment/setvars.py, launchers/environment.py) reads from it;
the checks' Context (checks/registry.py) is one, with the options of a check run. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..matrix.model import Matrix
from ..record import Record
from .snapshot import EnvSnapshot


class Facts(Record):
    """The environment's facts, and ``cache``: the memo ``once`` keeps, the one mutable part. A bare Facts keeps its memo
    to itself; a subclass that declares a ``cache`` field (Context) shares it with the copies replace() makes."""

    matrix: Matrix
    snapshot: EnvSnapshot

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.__dict__.get("cache") is None:
            self.__dict__["cache"] = {}

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        cache = self.__dict__["cache"]
        if key not in cache:
            cache[key] = compute()
        return cache[key]
