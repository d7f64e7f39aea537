"""compat launch --watch's per-rank agent. Never imported by compat itself.

compat puts this folder first on the PYTHONPATH of the job it watches (watch/service.py) together with
COMPAT_WATCH_DIR (the run folder). Python imports ``sitecustomize`` at start-up; this one acts only in a worker: a
process with COMPAT_WATCH_DIR set, RANK (ASCII digits) and either COMPAT_WATCH_RANK equal to RANK (set per rank by
compat's own spawn, and by each task of compat launch's srun line, launchers/srun.py) or LOCAL_RANK with TORCHELASTIC_RESTART_COUNT or TORCHELASTIC_RUN_ID (set by torchrun in its
workers only: torchrun itself is left alone, even where RANK is in compat's own environment, as in a Kubeflow pod), or,
without RANK, an MPI rank (PMI_RANK with PMI_SIZE from hydra, OMPI_COMM_WORLD_RANK/SIZE from Open MPI: mpirun itself
and its proxies run no Python);
and only in the first process of a rank: it holds an exclusive flock on its ring file for as long as it lives, so a
process that rank starts later (a spawned data loader worker inherits RANK) finds the lock taken and does nothing.
The kernel drops the lock when the rank ends, however it ends: the watcher's first sign of a death.

What it records: a daemon thread wakes every COMPAT_WATCH_INTERVAL seconds (default 0.5) and writes one heartbeat
into ``<dir>/rank-<RANK>.ring``, a ring of SLOTS fixed-size slots (the newest overwrites the oldest: the file never
grows). Once torch.distributed is initialised (read from sys.modules: the agent imports nothing of torch itself), a
heartbeat carries the progress of the rank's collectives from torch's Flight Recorder (torch >= 2.9's C++ ring, which
records gloo's collectives on CPU: ``_dump_fr_trace`` without stack traces): per process group the last collective
entered and the last completed, and the collectives entered since the previous heartbeat and those still in flight
(process group, sequence number, op, element count, time entered). Where the Flight Recorder records nothing (torch
before 2.9, or a backend that records none) the same fields come from the agent's hook (``"source": "hook"``, _Hook
below): torch.distributed's collective functions, wrapped once when the package is imported, record each call in a
bounded ring. Before either has anything the heartbeat carries the rank's liveness only. Every heartbeat also says the rank's host name,
its PID namespace and its process's CPU seconds (the watcher's view of a rank on another host). An exception that ends the rank is written as a
last record (its type and message); an interpreter exit as ``"state": "left"``. The agent records no exit status
(the watcher reads it from waitpid or the zombie). In a child the rank forks the agent writes nothing
(os.register_at_fork).

The rank's last lines: sys.stdout and sys.stderr are wrapped (_Tee: every attribute is the stream's own, each write
goes to the stream first and unchanged); each complete line written through them is written at once (one pwrite, so
a SIGKILL loses none) into a second ring after the heartbeats' slots, LINES slots of LINE bytes (the line cut to
LINE_TEXT characters): what a dead rank's finding shows. Only what goes through Python's sys.stdout / sys.stderr:
not what C code or a child process writes to the file descriptors themselves.

Standard library only, Python 3.6+; everything it does is guarded: a failure stops the agent, never the rank. A
``sitecustomize`` later on the path (the environment's own) is imported after this one, as Python would have.
The slot format is read by compatmatrix/watch/ring.py (tests/watch/test_watch.py holds the constants equal).
"""

import os
import sys
import time as _time

VARIABLE = "COMPAT_WATCH_DIR"
SLOTS = 64
SLOT = 4096
FORMAT = 1
MAX_ENTRIES = 24  # collectives per heartbeat (the newest); a slot must hold them
# the rank's last lines: a ring of LINES slots of LINE bytes after the heartbeats' (compatmatrix/watch/lines.py reads it)
LINES = 32
LINE = 512
LINE_TEXT = 240  # characters of a line kept (the rest is cut)
_AGENT = None  # this process's agent, once installed
_HOOK = None  # its hook (below), once installed


def _pg_progress(status):
    progress = {}
    for pg, values in (status or {}).items():
        try:
            progress[str(pg)] = [int(values.get("last_enqueued_collective", -1)), int(values.get("last_completed_collective", -1))]
        except (TypeError, ValueError, AttributeError):
            continue
    return progress


def _numel(sizes):
    total = 0
    for shape in sizes or ():
        count = 1
        for dim in shape:
            count *= int(dim)
        total += count
    return total


def _where():
    """(host name, this process's PID namespace): the watcher reads a rank's /proc only when both are its own; a rank on
    another host (or in another PID namespace) is judged by its heartbeats and its ring's lock."""
    import socket

    try:
        host = socket.gethostname()
    except Exception:
        host = ""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return host[:200], namespace[:64]


# The hook: where the Flight Recorder records nothing (torch before 2.9, a backend that records none), the agent's own
# record of the collectives called through torch.distributed's Python functions. Installed once, when torch.distributed
# is first imported (a sys.meta_path finder: before the script can call a collective, so every rank counts from its
# first), in every watched rank; the heartbeat reads it only while the Flight Recorder has recorded nothing.
HOOK_OPS = {  # name: (position of its group argument, of the tensor whose elements it counts, None: none)
    "all_reduce": (2, 0), "all_reduce_coalesced": (2, 0), "broadcast": (2, 0), "broadcast_object_list": (2, None), "all_gather": (2, 1),
    "all_gather_into_tensor": (2, 1), "_all_gather_base": (2, 1), "all_gather_object": (2, None), "all_gather_coalesced": (2, 1), "reduce": (3, 0),
    "reduce_scatter": (3, 1), "reduce_scatter_tensor": (3, 1), "_reduce_scatter_base": (3, 1), "gather": (3, 0), "gather_object": (3, None),
    "scatter": (3, 0), "scatter_object_list": (3, None), "all_to_all": (2, 1), "all_to_all_single": (4, 1), "barrier": (0, None),
    "monitored_barrier": (0, None), "all_gather_single": (2, 1), "reduce_scatter_single": (3, 1)}
HOOK_RING = 256  # the newest collectives the hook keeps (a bounded ring)
NO_FR_SWITCH = "COMPAT_WATCH_FIXTURE_NO_FR"  # TEST ONLY: "1" makes the agent ignore the Flight Recorder (the hook path)
_WRAPPED = "__compat_watch_hook__"


def _numel_of(value):
    """Elements of a tensor or a list of tensors (a list of lists: its first list); 0 for anything else (objects)."""
    try:
        if isinstance(value, (list, tuple)):
            if value and isinstance(value[0], (list, tuple)):
                value = value[0]
            return sum(int(item.numel()) for item in value if hasattr(item, "numel"))
        return int(value.numel()) if hasattr(value, "numel") else 0
    except Exception:
        return 0


class _Hook(object):
    """The ring of the collectives this rank entered: (pg name, seq, op, element count, time entered ns, pg description)
    in a fixed list (one tuple per call), per group the last entered and the last completed, and the async works not
    yet seen completed (bounded: the oldest is dropped)."""

    def __init__(self, size=HOOK_RING):
        import threading

        self.size = size
        self.ring = [None] * size
        self.count = 0  # collectives entered, all groups
        self.returned = 0  # calls that returned (the Flight Recorder, where it records, has their entries by then)
        self.groups = {}  # id(pg) -> (pg, name, description): the group object is kept so its id is not reused
        self.progress = {}  # name -> [last entered, last completed]
        self.pending = []  # [(work, name, seq)], at most size
        self.lock = threading.Lock()
        self.local = threading.local()  # .inside: a wrapped collective is running in this thread (one calling another:
        # broadcast_object_list calls broadcast, all_gather_into_tensor all_gather_single) and is the one recorded

    def _group(self, dist, pg):
        known = self.groups.get(id(pg))
        if known is not None and known[0] is pg:
            return known
        name = desc = ""
        try:
            target = pg if pg is not None else dist.distributed_c10d._get_default_group()
            name = str(dist.distributed_c10d._get_process_group_name(target))
            desc = str(getattr(target, "group_desc", "") or "")
        except Exception:
            name = name or "0"
        known = (pg, name, desc)
        if len(self.groups) < 64:
            self.groups[id(pg)] = known
        return known

    def enter(self, dist, op, group, tensor):
        _pg, name, desc = self._group(dist, group)
        with self.lock:
            pair = self.progress.get(name)
            if pair is None:
                pair = self.progress[name] = [0, 0]
            pair[0] += 1
            seq = pair[0]
            self.ring[self.count % self.size] = (name, seq, op, _numel_of(tensor), int(_time.time() * 1e9), desc)
            self.count += 1
        return name, seq

    def complete(self, name, seq):
        with self.lock:
            pair = self.progress.get(name)
            if pair is not None and seq > pair[1]:
                pair[1] = seq

    def waiting(self, work, name, seq):
        with self.lock:
            if len(self.pending) >= self.size:
                del self.pending[0]
            self.pending.append((work, name, seq))

    def waited(self, work):
        with self.lock:
            found = [item for item in self.pending if item[0] is work]
            self.pending = [item for item in self.pending if item[0] is not work]
        for _work, name, seq in found:
            self.complete(name, seq)

    def poll(self):
        """Async works seen completed since the last heartbeat (Work.is_completed) count as completed."""
        with self.lock:
            pending = list(self.pending)
        for work, _name, _seq in pending:
            try:
                if work.is_completed():
                    self.waited(work)
            except Exception:
                self.waited(work)

    def snapshot(self):
        """({name: [last entered, last completed]}, the ring's records oldest first)."""
        self.poll()
        with self.lock:
            progress = dict((name, list(pair)) for name, pair in self.progress.items())
            count = self.count
            if count <= self.size:
                records = self.ring[:count]
            else:
                start = count % self.size
                records = self.ring[start:] + self.ring[:start]
        return progress, [record for record in records if record is not None]


def _argument(args, kwargs, position, name):
    if name in kwargs:
        return kwargs[name]
    return args[position] if len(args) > position else None


def _wrap(dist, hook, op, function):
    """function, wrapped: entered at the call, completed at its return (async_op: when its Work's wait returns or the
    work is seen completed). What the collective returns or raises passes unchanged; the record is guarded."""
    if getattr(function, _WRAPPED, False):
        return function
    group_at, tensor_at = HOOK_OPS[op]

    local = hook.local

    def collective(*args, **kwargs):
        if getattr(local, "inside", False):
            return function(*args, **kwargs)
        record = None
        asynchronous = False
        try:
            group = kwargs["group"] if "group" in kwargs else args[group_at] if len(args) > group_at else None
            tensor = None if tensor_at is None else args[tensor_at] if len(args) > tensor_at else None
            asynchronous = kwargs["async_op"] if "async_op" in kwargs else len(args) > group_at + 1 and args[group_at + 1] is True
            record = hook.enter(dist, op, group, tensor)
        except Exception:
            record = None
        local.inside = True
        try:
            result = function(*args, **kwargs)
        finally:
            local.inside = False
        if record is not None:
            try:
                hook.returned += 1
                if asynchronous is True and result is not None and hasattr(result, "wait"):
                    hook.waiting(result, record[0], record[1])
                else:
                    hook.complete(record[0], record[1])
            except Exception:
                pass
        return result

    try:
        collective.__name__, collective.__qualname__, collective.__doc__ = function.__name__, function.__qualname__, function.__doc__
        collective.__module__, collective.__wrapped__ = function.__module__, function
    except Exception:
        pass
    setattr(collective, _WRAPPED, True)
    return collective


def _wrap_work(dist, hook):
    """Work.wait, wrapped once at the class: a wait that returns completes the collective the work belongs to."""
    try:
        work_class = dist.distributed_c10d.Work
    except Exception:
        return
    wait = getattr(work_class, "wait", None)
    if wait is None or getattr(wait, _WRAPPED, False):
        return

    def waited(self, *args, **kwargs):
        result = wait(self, *args, **kwargs)
        try:
            if hook.pending:
                hook.waited(self)
        except Exception:
            pass
        return result

    setattr(waited, _WRAPPED, True)
    try:
        work_class.wait = waited
    except Exception:
        pass


def _hook_torch_distributed(dist, hook):
    """Wrap torch.distributed's collectives (the package's names and distributed_c10d's, the same function once each)."""
    c10d = getattr(dist, "distributed_c10d", None)
    done = {}
    for module in (c10d, dist):
        if module is None:
            continue
        for op in HOOK_OPS:
            function = getattr(module, op, None)
            if function is None or not callable(function):
                continue
            wrapped = done.get(id(function))
            if wrapped is None:
                wrapped = done[id(function)] = _wrap(dist, hook, op, function)
            try:
                setattr(module, op, wrapped)
            except Exception:
                pass
    _wrap_work(dist, hook)


class _Finder(object):
    """A sys.meta_path finder that wraps torch.distributed's collectives when the package has been imported, once."""

    def __init__(self, hook):
        self.hook, self.done = hook, False

    def find_spec(self, name, path=None, target=None):
        if name != "torch.distributed" or self.done:
            return None
        self.done = True
        try:
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(name, path)
            loader = getattr(spec, "loader", None)
            exec_module = getattr(loader, "exec_module", None)
            if exec_module is None:
                return spec
            hook = self.hook

            def exec_and_hook(module):
                exec_module(module)
                try:
                    _hook_torch_distributed(module, hook)
                except Exception:
                    pass

            loader.exec_module = exec_and_hook
            return spec
        except Exception:
            return None


def _quote():
    """A string as JSON (ASCII: every other character escaped, a lone surrogate too), by the json module's own encoder."""
    import json.encoder

    return json.encoder.encode_basestring_ascii


_QUOTE = None  # set when the agent installs (json is imported only in a watched rank)


class _Lines(object):
    """The rank's last complete lines written through sys.stdout / sys.stderr, each written into the line ring at once:
    slot count % LINES at offset SLOTS * SLOT, a JSON object (count, pid, stream, time, text) padded with spaces. A
    carriage return starts the line again (a progress bar redrawn in place is one line); a partial line is kept up to
    LINE_TEXT characters (and one more, which tells the reader it was cut) until its newline."""

    def __init__(self, fd):
        import threading

        self.fd, self.pid, self.count = fd, os.getpid(), 0
        self.partial = {"o": "", "e": ""}
        self.lock = threading.Lock()

    def feed(self, stream, text):
        if self.fd < 0 or type(text) is not str:
            return
        if "\n" not in text and "\r" not in text:  # print() writes each argument and separator apart: most writes end no line
            kept = self.partial[stream]
            if len(kept) <= LINE_TEXT:
                self.partial[stream] = (kept + text)[:LINE_TEXT + 1]
            return
        with self.lock:
            pieces = text.split("\n")
            for index, piece in enumerate(pieces):
                if index < len(pieces) - 1 and piece.endswith("\r"):
                    piece = piece[:-1]  # a line ended by CR LF
                if "\r" in piece:
                    piece = piece[piece.rindex("\r") + 1:]
                    self.partial[stream] = ""
                kept = self.partial[stream]
                if len(kept) <= LINE_TEXT:  # one character more than is shown: the reader says the line was cut
                    kept = (kept + piece)[:LINE_TEXT + 1]
                if index < len(pieces) - 1:
                    self._write(stream, kept)
                    kept = ""
                self.partial[stream] = kept

    def _write(self, stream, line):
        # the slot's JSON written by hand around the C encoder of one string (json.dumps would build an encoder per call)
        head = '{"n":%d,"pid":%d,"s":"%s","t":%.3f,"l":' % (self.count, self.pid, stream, _time.time())
        text = _QUOTE(line)
        while len(head) + len(text) + 1 >= LINE and line:
            line = line[:len(line) // 2]
            text = _QUOTE(line)
        data = head + text + "}"
        if len(data) >= LINE:
            return
        os.pwrite(self.fd, (data + " " * (LINE - 1 - len(data)) + "\n").encode(), SLOTS * SLOT + (self.count % LINES) * LINE)
        self.count += 1


class _Tee(object):
    """A stream (sys.stdout, sys.stderr) that hands each write on unchanged and gives the text to the line ring. Every
    other attribute is the stream's own (fileno, buffer, isatty, encoding, flush, reconfigure...)."""

    def __init__(self, stream, letter, lines):
        object.__setattr__(self, "_compat_stream", stream)
        object.__setattr__(self, "_compat_letter", letter)
        object.__setattr__(self, "_compat_lines", lines)

    def write(self, text):
        written = self._compat_stream.write(text)
        try:
            lines = self._compat_lines
            if type(text) is str and "\n" not in text and "\r" not in text and lines.fd >= 0:  # no line ended: kept, nothing written
                kept = lines.partial[self._compat_letter]
                if len(kept) <= LINE_TEXT:
                    lines.partial[self._compat_letter] = (kept + text)[:LINE_TEXT + 1]
            else:
                lines.feed(self._compat_letter, text)
        except Exception:
            pass
        return written

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._compat_stream, name)

    def __setattr__(self, name, value):
        setattr(self._compat_stream, name, value)

    def __iter__(self):
        return iter(self._compat_stream)


def _tee_streams(lines):
    """sys.stdout and sys.stderr wrapped (a stream that is None, as under pythonw, is left alone)."""
    for name, letter in (("stdout", "o"), ("stderr", "e")):
        stream = getattr(sys, name, None)
        if stream is not None and hasattr(stream, "write"):
            setattr(sys, name, _Tee(stream, letter, lines))


class _Agent(object):
    def __init__(self, folder, rank, fd, interval, hook=None):
        self.folder, self.rank, self.fd, self.interval, self.hook = folder, rank, fd, interval, hook
        self.no_fr = os.environ.get(NO_FR_SWITCH) == "1"  # TEST ONLY (see NO_FR_SWITCH)
        self.chosen = None  # "flight-recorder" or "hook" once known for good
        self.host, self.namespace = _where()
        self.count = 0
        self.seen_ns = 0  # the newest collective reported so far (its time entered)
        self.source = None
        self.dump = None
        self.final = None  # "exception" or "left" once written: nothing is written after it
        self.lines = None  # the rank's last lines (_Lines), once its streams are wrapped
        import threading

        self.lock = threading.Lock()

    def _flight_recorder(self):
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            return None
        try:
            if not dist.is_available() or not dist.is_initialized():
                return None
        except Exception:
            return None
        if self.dump is None:
            if self.no_fr:
                self.dump, self.source = False, "none"
                return None
            try:
                from torch._C._distributed_c10d import _dump_fr_trace  # torch >= 2.9

                self.dump, self.source = _dump_fr_trace, "flight-recorder"
            except Exception:
                self.dump, self.source = False, "none"
        if not self.dump:
            return None
        import pickle

        try:
            return pickle.loads(self.dump(True, False, False))
        except Exception:
            return None

    def _from_trace(self, trace):
        progress = _pg_progress(trace.get("pg_status"))
        raw = []
        for entry in trace.get("entries") or ():
            try:
                group = entry.get("process_group") or ("", "")
                raw.append((str(group[0]), int(entry.get("collective_seq_id", 0)), str(entry.get("profiling_name", "")), _numel(entry.get("input_sizes")),
                            int(entry.get("time_created_ns") or 0), str(group[1])))
            except Exception:
                continue
        return progress, raw

    def _progress(self):
        """(per group [last entered, last completed], the collectives as (pg, seq, op, elements, entered ns, pg
        description)) from the Flight Recorder, or from the hook where the Flight Recorder records nothing: known for
        good once a collective call has returned (by then the Flight Recorder has its entry if it records this backend)
        and the Flight Recorder has none. (None, ()) before torch.distributed is initialised."""
        hook = self.hook
        returned = hook.returned if hook is not None else 0  # read before the trace: see above
        trace = self._flight_recorder()
        if trace is None and (self.dump is None or self.chosen is None and not returned):
            return None, ()  # not initialised, or nothing from either yet
        if self.chosen != "hook" and trace is not None:
            progress, raw = self._from_trace(trace)
            if raw or any(pair[0] >= 0 for pair in progress.values()):
                self.chosen = self.source = "flight-recorder"
                return progress, raw
        if hook is not None and (returned or self.chosen == "hook"):
            self.chosen = self.source = "hook"
            progress, records = hook.snapshot()
            return progress, records
        return (self._from_trace(trace) if trace is not None else (None, ()))

    def forked(self):
        """In a child forked from the rank: the agent writes nothing there (the rank's ring is the rank's), and its lock
        is new (the parent's may have been held by the agent's thread, which the child does not have)."""
        import threading

        self.final = "forked"
        self.lock = threading.Lock()
        if self.lines is not None:
            self.lines.fd = -1
            self.lines.lock = threading.Lock()
        try:
            os.close(self.fd)
        except OSError:
            pass

    def record(self, state, extra=None):
        if self.final is not None:
            return
        with self.lock:
            if self.final is not None:
                return
            if state in ("exception", "left"):
                self.final = state
            self._write(state, extra)

    def _write(self, state, extra):
        import json
        import time

        body = {"v": FORMAT, "n": self.count, "rank": self.rank, "pid": os.getpid(), "t": time.time(), "state": state,
                "source": self.source or "none", "world": os.environ.get("WORLD_SIZE", ""), "host": self.host, "ns": self.namespace,
                "cpu": round(time.process_time(), 3)}
        progress, raw = self._progress() if state == "running" else (None, ())
        if progress is not None:
            body["source"] = self.source
            body["pg"] = progress
            entries = []
            for pg, seq, op, numel, created, desc in raw:
                done = progress.get(pg, [0, -1])[1]
                if created > self.seen_ns or seq > done:
                    entries.append([pg, seq, op, numel, created, desc])
            entries = entries[-MAX_ENTRIES:]
            if entries:
                self.seen_ns = max(self.seen_ns, max(e[4] for e in entries))
            body["entries"] = entries
        if extra:
            body.update(extra)
        text = json.dumps(body, separators=(",", ":"))
        while len(text) >= SLOT and body.get("entries"):
            body["entries"] = body["entries"][len(body["entries"]) // 2 + 1:]
            text = json.dumps(body, separators=(",", ":"))
        if len(text) >= SLOT:
            return
        data = (text + " " * (SLOT - 1 - len(text)) + "\n").encode()
        os.pwrite(self.fd, data, (self.count % SLOTS) * SLOT)
        self.count += 1

    def loop(self):
        import time

        while self.final is None:
            try:
                self.record("running")
            except Exception:
                return
            time.sleep(self.interval)


def _digits(text):
    return bool(text) and all(c in "0123456789" for c in text)


def _is_worker(rank, env):
    """Whether this process is a rank's worker (see the module's text)."""
    if not _digits(rank):
        return False
    marker = env.get("COMPAT_WATCH_RANK")
    if marker is not None:
        return marker == rank
    return "LOCAL_RANK" in env and ("TORCHELASTIC_RESTART_COUNT" in env or "TORCHELASTIC_RUN_ID" in env)


def _worker_rank(env):
    """This process's rank if it is a worker, else None: RANK under torchrun, compat's spawn and srun; under mpirun the MPI's
    own rank variable (hydra's PMI_RANK with PMI_SIZE, Open MPI's OMPI_COMM_WORLD_RANK), which its ranks carry from
    their start (the script maps them to RANK itself, after this runs); mpirun and hydra's proxies run no Python."""
    rank = env.get("RANK", "")
    if _is_worker(rank, env):
        return rank
    if "COMPAT_WATCH_RANK" in env or "LOCAL_RANK" in env and ("TORCHELASTIC_RESTART_COUNT" in env or "TORCHELASTIC_RUN_ID" in env):
        return None  # a torchrun or spawn worker with a RANK that is not one: not ours to guess
    for name, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if _digits(env.get(name, "")) and _digits(env.get(size, "")):
            return env[name]
    return None


def _install():
    folder = os.environ.get(VARIABLE)
    rank = _worker_rank(os.environ) if folder else None
    if rank is None:
        return
    try:
        import fcntl
        import threading

        interval = float(os.environ.get("COMPAT_WATCH_INTERVAL") or 0.5)
        import stat

        fd = os.open(os.path.join(folder, "rank-%s.ring" % rank), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:  # a file planted there (a FIFO, a hard link): not ours to write
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # another process of this rank holds it (a child the rank started)
            return
        os.ftruncate(fd, 0)  # a ring left in a shared run folder by an earlier job: its slots are not this rank's
        os.ftruncate(fd, SLOTS * SLOT + LINES * LINE)
        global _AGENT
        global _HOOK
        _HOOK = _Hook()
        sys.meta_path.insert(0, _Finder(_HOOK))
        agent = _AGENT = _Agent(folder, int(rank), fd, max(0.05, interval), _HOOK)
        agent.record("starting")
        try:
            global _QUOTE
            _QUOTE = _quote()
            agent.lines = _Lines(fd)
            _tee_streams(agent.lines)
        except Exception:
            pass
        previous_hook = sys.excepthook

        def excepthook(kind, value, traceback):
            try:
                agent.record("exception", {"exception": ("%s: %s" % (kind.__name__, value))[:1000]})
            except Exception:
                pass
            previous_hook(kind, value, traceback)

        sys.excepthook = excepthook
        import atexit

        def left():
            try:
                agent.record("left")
            except Exception:
                pass

        atexit.register(left)
        if hasattr(os, "register_at_fork"):  # Python 3.7+
            os.register_at_fork(after_in_child=agent.forked)
        thread = threading.Thread(target=agent.loop, name="compat-watch", daemon=True)
        thread.start()
    except Exception:
        return


def _chain():
    """Import the next ``sitecustomize`` on the path (the one this module shadows), if there is one, as Python would
    have: what it adds to sys.path stays (this folder's entry is taken out, not put back: it holds only this module),
    it stays sys.modules["sitecustomize"], and an ImportError of anything but a missing sitecustomize is raised."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_module = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the environment's own)
    except ImportError as exc:
        if getattr(exc, "name", None) != "sitecustomize":
            raise
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module
    except BaseException:
        if saved_module is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = saved_module
        raise


if __name__ == "sitecustomize":  # at start-up (a test may import this file under another name, without side effects)
    _install()
    _chain()
