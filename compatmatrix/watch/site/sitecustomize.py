"""compat launch --watch's per-rank agent. Never imported by compat itself.

compat puts this folder first on the PYTHONPATH of the job it watches (watch/service.py) together with
COMPAT_WATCH_DIR (the run folder). Python imports ``sitecustomize`` at start-up; this one acts only in a worker: a
process with COMPAT_WATCH_DIR set, RANK (ASCII digits) and either COMPAT_WATCH_RANK equal to RANK (set per rank by
compat's own spawn) or LOCAL_RANK with TORCHELASTIC_RESTART_COUNT or TORCHELASTIC_RUN_ID (set by torchrun in its
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
(process group, sequence number, op, element count, time entered). Where there is no Flight Recorder the heartbeat
says so (``"source": "none"``) and carries the rank's liveness only. Every heartbeat also says the rank's host name,
its PID namespace and its process's CPU seconds (the watcher's view of a rank on another host). An exception that ends the rank is written as a
last record (its type and message); an interpreter exit as ``"state": "left"``. The agent records no exit status
(the watcher reads it from waitpid or the zombie). In a child the rank forks the agent writes nothing
(os.register_at_fork).

Standard library only, Python 3.6+; everything it does is guarded: a failure stops the agent, never the rank. A
``sitecustomize`` later on the path (the environment's own) is imported after this one, as Python would have.
The slot format is read by compatmatrix/watch/ring.py (tests/watch/test_watch.py holds the constants equal).
"""

import os
import sys

VARIABLE = "COMPAT_WATCH_DIR"
SLOTS = 64
SLOT = 4096
FORMAT = 1
MAX_ENTRIES = 24  # collectives per heartbeat (the newest); a slot must hold them
_AGENT = None  # this process's agent, once installed


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


class _Agent(object):
    def __init__(self, folder, rank, fd, interval):
        self.folder, self.rank, self.fd, self.interval = folder, rank, fd, interval
        self.host, self.namespace = _where()
        self.count = 0
        self.seen_ns = 0  # the newest collective reported so far (its time entered)
        self.source = None
        self.dump = None
        self.final = None  # "exception" or "left" once written: nothing is written after it
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

    def forked(self):
        """In a child forked from the rank: the agent writes nothing there (the rank's ring is the rank's), and its lock
        is new (the parent's may have been held by the agent's thread, which the child does not have)."""
        import threading

        self.final = "forked"
        self.lock = threading.Lock()
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
        trace = self._flight_recorder() if state == "running" else None
        if trace is not None:
            progress = _pg_progress(trace.get("pg_status"))
            body["pg"] = progress
            entries = []
            for entry in trace.get("entries") or ():
                try:
                    group = entry.get("process_group") or ("", "")
                    pg, seq = str(group[0]), int(entry.get("collective_seq_id", 0))
                    created = int(entry.get("time_created_ns") or 0)
                    done = progress.get(pg, [0, -1])[1]
                    if created > self.seen_ns or seq > done:
                        entries.append([pg, seq, str(entry.get("profiling_name", "")), _numel(entry.get("input_sizes")), created, str(group[1])])
                except Exception:
                    continue
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
    """This process's rank if it is a worker, else None: RANK under torchrun and compat's spawn; under mpirun the MPI's
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
        os.ftruncate(fd, SLOTS * SLOT)
        global _AGENT
        agent = _AGENT = _Agent(folder, int(rank), fd, max(0.05, interval))
        agent.record("starting")
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
