"""The records a rank of compat doctor --live writes and compat reads: one typed, versioned protocol for both sides.

Standard library only, and no import of compatmatrix: compat copies this file into the run folder (as
``compat_live_protocol.py``) beside the worker, which imports it in the *target* interpreter (Python 3.6 to 3.13: the
IPEX 1.8-1.10 stacks run on 3.6). So: no ``from __future__ import annotations`` (3.7+), typing's 3.6 spellings
(``Optional``, ``Tuple``, ``Dict``), and frozen dataclasses where ``dataclasses`` exists (3.7+); on 3.6 a small
stand-in (``_frozen``, as ``dataclass``) gives the same constructor, equality and refusal to change a field.

A rank writes one document, ``proc-<host>-<pid>.json`` (``RankStatus``), rewritten after every stage; the progress
fields in it (``stage``, ``fabric_case``, ``pairs_round``) are what compat's terminal line reads. Beside it its exit
watcher writes ``proc-<host>-<pid>.gone`` (``Gone``). The sweep of --fabric is ``Sweep``, the pairs of hosts
``Pairs``. ``from_json`` is the only way in: a rank record is outside input (a broken rank, a shared --run-dir,
another compat's worker), so every value is checked against its field's type, sizes are bounded, and a record of
another protocol version or of the wrong shape is refused with one ``ProtocolError`` that says where.

No side effects.
"""

import json
import math
import sys
import typing
from typing import Any, Dict, Optional, Tuple

PROTOCOL_VERSION = 1  # raise on any change a reader of the previous version would misread; add fields with defaults
MAX_RECORD_BYTES = 32 << 20  # a status file larger than this is not a rank's record
MAX_TEXT = 1 << 20  # characters in one string
MAX_ITEMS = 1 << 17  # items in one list or mapping


class ProtocolError(ValueError):
    """A rank record that is not of this protocol: its version, a field's type, its size."""


try:
    from dataclasses import dataclass
except ImportError:  # Python 3.6: the same constructor, equality and immutability, from the class's annotations

    def dataclass(frozen=True):  # type: ignore[no-redef]  # noqa: ARG001 -- frozen always, as every record here
        return _frozen


def _frozen(cls):
    """Python 3.6's stand-in for dataclass(frozen=True): __init__ (positional or by name, defaults from the class),
    __eq__, __hash__, __repr__, and a __setattr__ that refuses."""
    names = list(cls.__dict__.get("__annotations__", {}))
    defaults = {name: cls.__dict__[name] for name in names if name in cls.__dict__}

    def __init__(self, *args, **kwargs):
        values = _bind_fields(cls.__name__, names, defaults, args, kwargs)
        for name in names:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name, value):
        raise AttributeError("%s is frozen" % cls.__name__)

    def __eq__(self, other):
        return other.__class__ is self.__class__ and all(getattr(self, n) == getattr(other, n) for n in names)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in names))

    def __repr__(self):
        return "%s(%s)" % (cls.__name__, ", ".join("%s=%r" % (n, getattr(self, n)) for n in names))

    for name, value in (("__init__", __init__), ("__setattr__", __setattr__), ("__eq__", __eq__), ("__hash__", __hash__), ("__repr__", __repr__)):
        setattr(cls, name, value)
    cls.__dataclass_fields__ = dict.fromkeys(names)
    return cls


def _bind_fields(kind, names, defaults, args, kwargs):
    """Every field's value for the 3.6 stand-in's __init__: positional, then by name, then the class's defaults;
    TypeError for too many, unknown, repeated or missing fields."""
    if len(args) > len(names):
        raise TypeError("%s takes %d fields" % (kind, len(names)))
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in values:
            raise TypeError("%s: unexpected or repeated field %r" % (kind, key))
        values[key] = value
    missing = [name for name in names if name not in values and name not in defaults]
    if missing:
        raise TypeError("%s: missing field %r" % (kind, missing[0]))
    return dict((name, values[name] if name in values else defaults[name]) for name in names)


def field_names(cls):
    """The fields of a record class, in order (dataclasses.fields, or the 3.6 stand-in's)."""
    return list(cls.__dataclass_fields__)


class Record:
    """A record of the protocol: ``from_json`` (checked) and ``to_json`` (what the worker writes)."""

    __slots__ = ()

    @classmethod
    def from_json(cls, value, where=None):
        """The record from a decoded JSON value; ProtocolError naming the field when it is not of this shape."""
        return _decode(cls, value, where or cls.__name__)

    def to_json(self):
        """The record as a JSON value (dicts, lists, numbers, strings, None), every field."""
        return _encode(self)


# ---- the records, innermost first ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StageMark(Record):
    name: str
    seconds: float  # since the rank started


@dataclass(frozen=True)
class RankError(Record):
    type: str
    message: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class ImportEntry(Record):
    ok: bool
    module: Optional[str] = None  # the importable name (torch's entry has none)
    version: Optional[str] = None
    error: Optional[str] = None
    cwd: Optional[str] = None  # the oneCCL bindings' own folder, when they say
    fixture: Optional[str] = None  # COMPAT_TEST_FIXTURE of the test suite's fake bindings
    registered: Optional[bool] = None  # the bindings registered the ccl backend


@dataclass(frozen=True)
class Imports(Record):
    torch: Optional[ImportEntry] = None
    ipex: Optional[ImportEntry] = None
    ccl: Optional[ImportEntry] = None


@dataclass(frozen=True)
class HostAddress(Record):
    address: str
    loopback: Optional[bool] = None
    local: Optional[bool] = None  # this host can bind it


@dataclass(frozen=True)
class NetworkFacts(Record):
    host: str
    interfaces: Tuple[str, ...] = ()
    iface_variables: Optional[Dict[str, str]] = None
    host_resolves: Tuple[HostAddress, ...] = ()
    host_error: Optional[str] = None
    master_addr: Optional[str] = None
    master_resolves: Tuple[HostAddress, ...] = ()
    master_error: Optional[str] = None


@dataclass(frozen=True)
class AllreduceCheck(Record):
    ok: Optional[bool] = None  # None: not supported by the backend
    elements: Optional[int] = None
    wrong: Optional[int] = None
    unsupported: Optional[bool] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Allreduce(Record):
    fp32: Optional[AllreduceCheck] = None
    bf16: Optional[AllreduceCheck] = None


@dataclass(frozen=True)
class BandwidthRow(Record):
    mib: int
    seconds: float
    algbw: float
    busbw: float
    iterations: int


@dataclass(frozen=True)
class Memcpy(Record):
    mib: int
    per_rank: float
    all_ranks: float


@dataclass(frozen=True)
class SweepRow(Record):
    collective: str
    dtype: str
    bytes: int
    iterations: int
    seconds: float
    wrong: int = 0
    ranks_wrong: int = 0


@dataclass(frozen=True)
class SweepError(Record):
    collective: str
    dtype: str
    bytes: int
    iteration: int
    iterations_wrong: int
    iterations: int
    wrong: int
    elements: int
    index: Optional[int] = None
    got: Optional[float] = None
    expected: Optional[float] = None


@dataclass(frozen=True)
class Unsupported(Record):
    collective: str
    dtype: str
    error: str


@dataclass(frozen=True)
class Cut(Record):
    collective: str
    dtype: str
    after: int
    seconds: float
    limit: float
    sizes: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Skipped(Record):
    collective: str
    dtype: str
    sizes: Tuple[int, ...]
    why: str


@dataclass(frozen=True)
class SlowLink(Record):
    """The link a sweep was sized to: two host names and its bytes/s (written as a three-item list)."""
    a: str
    b: str
    bandwidth: float


@dataclass(frozen=True)
class SweepDeadline(Record):
    seconds: float
    timed: float
    began: float = 0.0
    budget: Optional[float] = None
    link: Optional[SlowLink] = None
    planned: Optional[bool] = None
    estimate: Optional[float] = None
    spent: Optional[float] = None


@dataclass(frozen=True)
class Sweep(Record):
    """One backend's --fabric sweep; another backend that could not form its group has only ``error``."""
    sizes: Tuple[int, ...] = ()
    bound: Optional[int] = None
    dropped: Tuple[int, ...] = ()
    rows: Tuple[SweepRow, ...] = ()
    errors: Tuple[SweepError, ...] = ()
    unsupported: Tuple[Unsupported, ...] = ()
    cut: Tuple[Cut, ...] = ()
    deadline: Optional[SweepDeadline] = None
    skipped: Tuple[Skipped, ...] = ()
    error: Optional[str] = None


@dataclass(frozen=True)
class PairAllreduce(Record):
    busbw: float
    bytes: int
    wrong: int


@dataclass(frozen=True)
class PairLink(Record):
    a: int  # host indices into Pairs.hosts
    b: int
    round: Optional[int] = None  # None: a slow link measured again
    latency: Optional[float] = None
    out: Optional[float] = None  # bytes/s from a to b
    back: Optional[float] = None
    allreduce: Optional[PairAllreduce] = None
    allreduce_skipped: Optional[str] = None
    error: Optional[str] = None  # the pair did not answer within its deadline
    seconds: Optional[float] = None
    sent: Optional[int] = None  # TCP segments both ends sent and retransmitted during the pair's test
    retransmitted: Optional[int] = None
    spurious: Optional[int] = None  # of the retransmitted, those the other end reported as duplicates (D-SACK): not lost
    tcp_source: Optional[str] = None  # "connections" (the pair's own sockets) or "host" (/proc/net/snmp)
    measured: Optional[int] = None  # times measured (a slow link is measured again)
    dsack_unknown: Optional[bool] = None  # True: an end's kernel does not count D-SACKs (tcpi_dsack_dups, Linux 4.19+): spurious None


@dataclass(frozen=True)
class HostTcp(Record):
    out: int
    retrans: int
    spurious: int = 0  # retransmitted segments the peers reported as duplicates (TcpExt TCPDSACKRecvSegs)
    dsack_unknown: Optional[bool] = None  # True: no TcpExt D-SACK counter could be read; spurious then 0


@dataclass(frozen=True)
class InterfaceFacts(Record):
    interface: Optional[str] = None
    address: Optional[str] = None
    mtu: Optional[int] = None
    speed: Optional[int] = None
    gloo_ifname: Optional[str] = None


@dataclass(frozen=True)
class Pairs(Record):
    hosts: Tuple[str, ...]
    mode: Optional[str] = None
    rounds: Optional[int] = None
    deadline: Optional[float] = None
    links: Tuple[PairLink, ...] = ()
    seconds: Optional[float] = None
    asked_deadline: Optional[float] = None
    error: Optional[str] = None
    skipped: Tuple[str, ...] = ()
    memcpy: Tuple[Optional[float], ...] = ()  # per host, in the order of hosts
    tcp: Tuple[Optional[HostTcp], ...] = ()
    interfaces: Tuple[Optional[InterfaceFacts], ...] = ()


@dataclass(frozen=True)
class TrainerGroup(Record):
    made_by: Optional[str] = None  # "compat" or "trainer"
    adopted: Optional[bool] = None
    created_by_trainer: Optional[int] = None
    ddp_on_it: Optional[bool] = None
    created: Optional[int] = None


@dataclass(frozen=True)
class TrainerInfo(Record):
    transformers: Optional[str] = None
    steps_wanted: Optional[int] = None
    per_device_batch: Optional[int] = None
    accelerate: Optional[str] = None
    loss_kwargs: Optional[bool] = None
    flags: Optional[Dict[str, Any]] = None
    dropped: Tuple[str, ...] = ()
    ipex: Optional[str] = None
    group: Optional[TrainerGroup] = None
    world_size: Optional[int] = None
    process_index: Optional[int] = None
    parallel_mode: Optional[str] = None
    train_seconds: Optional[float] = None
    steps_done: Optional[int] = None  # None until the steps finished
    step_seconds: Tuple[float, ...] = ()
    losses: Tuple[float, ...] = ()
    rows_per_step: Tuple[Tuple[int, ...], ...] = ()
    train_batch_size: Optional[int] = None
    wrapped_in: Optional[str] = None
    params_sha256: Optional[str] = None
    ipex_optimized: Optional[bool] = None


@dataclass(frozen=True)
class FabricCase(Record):
    """Progress: the sweep's case under way (written as [collective, dtype, bytes, cases begun])."""
    collective: str
    dtype: str
    bytes: int
    begun: int


@dataclass(frozen=True)
class RankStatus(Record):
    """Everything one rank writes, rewritten after every stage: a rank that dies still leaves its last stage."""
    protocol: int = PROTOCOL_VERSION
    pid: Optional[int] = None
    host: Optional[str] = None
    python: Optional[str] = None
    started: Optional[float] = None  # epoch seconds
    updated: Optional[float] = None
    rank: Optional[int] = None
    world_size_env: Optional[int] = None
    local_rank: Optional[int] = None
    rank_source: Optional[str] = None
    master: Optional[str] = None
    stage: Optional[str] = None
    stages: Tuple[StageMark, ...] = ()
    fixture_fault: Optional[str] = None
    network: Optional[NetworkFacts] = None
    imports: Optional[Imports] = None
    torch: Optional[str] = None
    backend: Optional[str] = None  # None with a backend_reason: no backend could be had
    backend_reason: Optional[str] = None
    groups_created: Optional[int] = None
    world_size: Optional[int] = None
    group_rank: Optional[int] = None
    group_backend: Optional[str] = None
    group_made_by: Optional[str] = None
    allreduce: Optional[Allreduce] = None
    bandwidth: Optional[Tuple[BandwidthRow, ...]] = None
    memcpy: Optional[Memcpy] = None
    pairs_round: Optional[int] = None
    pairs_rounds: Optional[int] = None
    pairs: Optional[Pairs] = None
    fabric_case: Optional[FabricCase] = None
    fabric_backend: Optional[str] = None
    fabric_comparing: Optional[str] = None
    fabric: Optional[Sweep] = None
    fabric_others: Optional[Dict[str, Sweep]] = None
    trainer: Optional[TrainerInfo] = None
    error: Optional[RankError] = None

    @property
    def chose_backend(self):
        """The rank got as far as choosing a backend (``backend`` may still be None: none could be had)."""
        return self.backend is not None or self.backend_reason is not None


@dataclass(frozen=True)
class Gone(Record):
    """<record>.gone: when the rank's process ended (its exit watcher writes it, runs across hosts)."""
    at: float


# ---- the edge: decoding and encoding -----------------------------------------------------------------------------

_AS_LIST = {StageMark: True, SlowLink: True, FabricCase: True}  # records the worker writes as lists, their fields in order
_HINTS = {}  # type: dict


def _hints(cls):
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


def _origin(tp):
    origin = getattr(tp, "__origin__", None)
    return {typing.Tuple: tuple, typing.Dict: dict, typing.List: list}.get(origin, origin)


def _decode(tp, value, where):
    if tp is Any:
        return _plain(value, where)
    origin = _origin(tp)
    if origin is typing.Union:  # Optional[X]: None, or an X
        options = [t for t in tp.__args__ if t is not type(None)]
        return None if value is None else _decode(options[0], value, where)
    if origin is None and isinstance(tp, type) and issubclass(tp, Record):  # origin first: 3.6's generics are classes too
        return _decode_record(tp, value, where)
    if origin is tuple:
        return _decode_tuple(tp.__args__[0], value, where)
    if origin is dict:
        return _decode_dict(tp.__args__[1], value, where)
    scalar = _SCALARS.get(tp) if origin is None else None
    if scalar is None:
        raise TypeError("protocol: no decoder for %r" % (tp,))  # a protocol bug, not a record's
    return scalar(value, where)


def _decode_tuple(item, value, where):
    if not isinstance(value, list):
        raise ProtocolError("%s: a list was expected, not %s" % (where, _kind(value)))
    if len(value) > MAX_ITEMS:
        raise ProtocolError("%s: %d items, more than %d" % (where, len(value), MAX_ITEMS))
    return tuple(_decode(item, v, "%s[%d]" % (where, i)) for i, v in enumerate(value))


def _decode_dict(item, value, where):
    if not isinstance(value, dict):
        raise ProtocolError("%s: a mapping was expected, not %s" % (where, _kind(value)))
    if len(value) > MAX_ITEMS:
        raise ProtocolError("%s: %d entries, more than %d" % (where, len(value), MAX_ITEMS))
    return {_decode(str, k, where): _decode(item, v, "%s[%r]" % (where, k)) for k, v in value.items()}


def _decode_bool(value, where):
    if not isinstance(value, bool):
        raise ProtocolError("%s: true or false was expected, not %s" % (where, _kind(value)))
    return value


def _decode_int(value, where):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError("%s: a whole number was expected, not %s" % (where, _kind(value)))
    return value


def _decode_float(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError("%s: a number was expected, not %s" % (where, _kind(value)))
    return float(value)


def _decode_str(value, where):
    if not isinstance(value, str):
        raise ProtocolError("%s: a string was expected, not %s" % (where, _kind(value)))
    if len(value) > MAX_TEXT:
        raise ProtocolError("%s: %d characters, more than %d" % (where, len(value), MAX_TEXT))
    return value


_SCALARS = {bool: _decode_bool, int: _decode_int, float: _decode_float, str: _decode_str}  # a field's type -> its decoder


def _decode_record(cls, value, where):
    names = field_names(cls)
    if cls in _AS_LIST and _AS_LIST[cls] and isinstance(value, list):
        if len(value) != len(names):
            raise ProtocolError("%s: %d items were expected, not %d" % (where, len(names), len(value)))
        value = dict(zip(names, value))
    if not isinstance(value, dict):
        raise ProtocolError("%s: a mapping was expected, not %s" % (where, _kind(value)))
    unknown = sorted(str(k) for k in value if k not in names)
    if unknown:
        raise ProtocolError("%s: unknown field%s %s" % (where, "s" if len(unknown) > 1 else "", ", ".join(unknown[:5])))
    hints = _hints(cls)
    given = {}
    for name in names:
        if name in value:
            given[name] = _decode(hints[name], value[name], "%s.%s" % (where, name))
    try:
        return cls(**given)
    except TypeError:
        missing = [n for n in names if n not in given]
        raise ProtocolError("%s: missing field%s %s" % (where, "s" if len(missing) > 1 else "", ", ".join(missing))) from None


def _plain(value, where, depth=0):
    """Any JSON value (a Trainer flag), bounded in depth and size."""
    if depth > 8:
        raise ProtocolError("%s: nested deeper than 8" % where)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _decode(str, value, where)
    if isinstance(value, list) and len(value) <= MAX_ITEMS:
        return [_plain(v, where, depth + 1) for v in value]
    if isinstance(value, dict) and len(value) <= MAX_ITEMS:
        return {str(k): _plain(v, where, depth + 1) for k, v in value.items()}
    raise ProtocolError("%s: not a JSON value of bounded size (%s)" % (where, _kind(value)))


def _kind(value):
    return "null" if value is None else "%s %s" % (type(value).__name__, _short(value))


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _encode(value):
    if isinstance(value, Record):
        names = field_names(type(value))
        shape = _AS_LIST.get(type(value))
        if shape:
            return [_encode(getattr(value, n)) for n in names]
        return {n: _encode(getattr(value, n)) for n in names}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def check_version(value):
    """Refuse a record of another protocol version before reading its fields: a newer compat's worker (or an older
    one's, before the protocol had a version) may mean something else by the same field."""
    if not isinstance(value, dict):
        raise ProtocolError("the record is %s, not a mapping" % _kind(value))
    version = value.get("protocol")
    if version is None:
        raise ProtocolError("the record has no protocol version (written by an older compat's worker)")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProtocolError("the record's protocol version is %s, not a whole number" % _kind(version))
    if version != PROTOCOL_VERSION:
        newer = "a newer" if version > PROTOCOL_VERSION else "an older"
        raise ProtocolError("the record is of protocol version %d, written by %s compat; this compat reads version %d"
                            % (version, newer, PROTOCOL_VERSION))


def read_parts(cls, value, where=None):
    """(record, {field: why}): the record from a mapping whose fields are decoded one by one, a field not of its type
    left at its default and named with why, so that a reader can say which part of a rank's record it could not
    read and still read the rest. A ``value`` that is no mapping, or an unknown field, is refused as a whole."""
    where = where or cls.__name__
    if not isinstance(value, dict):
        raise ProtocolError("%s: a mapping was expected, not %s" % (where, _kind(value)))
    names = field_names(cls)
    unknown = sorted(str(k) for k in value if k not in names)
    if unknown:
        raise ProtocolError("%s: unknown field%s %s" % (where, "s" if len(unknown) > 1 else "", ", ".join(unknown[:5])))
    hints = _hints(cls)
    given, refused = {}, {}
    for name in names:
        if name in value:
            try:
                given[name] = _decode(hints[name], value[name], "%s.%s" % (where, name))
            except ProtocolError as exc:
                refused[name] = str(exc)
    try:
        return cls(**given), refused
    except TypeError:
        missing = [n for n in names if n not in given]
        raise ProtocolError("%s: missing field%s %s" % (where, "s" if len(missing) > 1 else "", ", ".join(missing))) from None


def _status_value(text):
    if len(text) > MAX_RECORD_BYTES:
        raise ProtocolError("the record is %d bytes, more than %d" % (len(text), MAX_RECORD_BYTES))
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ProtocolError("the record is not JSON (%s)" % exc) from None
    except RecursionError:
        raise ProtocolError("the record is nested too deeply") from None
    check_version(value)
    return value


def loads_status(text):
    """A status file's text -> RankStatus, or ProtocolError (not JSON, too large, another version, the wrong shape)."""
    return RankStatus.from_json(_status_value(text), "record")


def read_status(text):
    """A status file's text -> (RankStatus, {field: why}) as compat's report reads it: a part not of the protocol's
    shape is left out and named (read_parts), so that the finding that needs it says so and the others still read
    the rest. ProtocolError for a record that cannot be read at all (not JSON, too large, another version, not a
    mapping, an unknown field)."""
    return read_parts(RankStatus, _status_value(text), "record")


def dumps(record):
    """What the worker writes: the record as JSON (NaN as JSON's NaN, as json.dumps writes a diverged loss)."""
    return json.dumps(record.to_json())


def finite(value):
    """A loss as --json shows it: the number, or its text when it is not finite."""
    return value if math.isfinite(value) else str(value)


if sys.version_info < (3, 6):  # pragma: no cover -- the worker's own floor
    raise ImportError("compat's live protocol needs Python 3.6 or newer")


def read_record_text(path, limit=MAX_RECORD_BYTES):
    """A rank's file of the run folder as text, read without reading more than ``limit`` + 1 bytes: a record larger
    than ``limit`` is a ProtocolError (a broken rank or another program may have written anything there), as is one
    that is not a regular file (a FIFO, a device: opened without blocking, never read). Bytes that are not UTF-8 are
    replaced. OSError as os.open raises it."""
    import os
    import stat

    handle = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ProtocolError("%s is not a regular file" % os.path.basename(str(path)))
        if info.st_size > limit:
            raise ProtocolError("the record is %d bytes, more than %d" % (info.st_size, limit))
        data = _read_at_most(handle, limit + 1)
    finally:
        os.close(handle)
    if len(data) > limit:
        raise ProtocolError("the record grew past %d bytes while it was read" % limit)
    return data.decode("utf-8", errors="replace")


def read_tail_text(path, limit):
    """The last ``limit`` bytes of a rank's output file as text (not UTF-8: replaced), whatever its size; "" for a file
    that is not a regular one. OSError as os.open raises it."""
    import os
    import stat

    handle = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return ""
        if info.st_size > limit:
            os.lseek(handle, info.st_size - limit, os.SEEK_SET)
        return _read_at_most(handle, limit).decode("utf-8", errors="replace")
    finally:
        os.close(handle)


def _read_at_most(handle, most):
    import os

    chunks, left = [], most
    while left > 0:
        chunk = os.read(handle, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
