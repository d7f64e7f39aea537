"""One rank of compat doctor --live. Run by the *target* interpreter, never imported by compat.

Standard library only at module level (Python 3.6+); torch, IPEX, the oneCCL bindings and transformers are
imported inside the stages. Each process writes what it did to ``<run-dir>/proc-<pid>.json``, a RankStatus of compat's
live/protocol.py (loaded from beside this file: ``compat_live_protocol.py`` in the run folder) (rewritten
atomically after every stage, so a rank that dies or hangs still leaves its last stage behind) and sends its
own stdout/stderr to ``<run-dir>/proc-<pid>.log``. compat reads those files; nothing is parsed from the
launcher's output. SIGUSR1 dumps every thread's stack into the log (compat sends it before killing a hung run).

Test hook: COMPAT_LIVE_FIXTURE_FAULT=KIND:RANK makes that rank misbehave on purpose -- ``sleep`` (never joins),
``exit`` (exits with status 3 before joining), ``stall`` (joins, then never enters the collective), ``segv``
(SIGSEGV at the Trainer stage), ``exit0`` (exit status 0 at the Trainer stage) or ``wrongsum`` (with --fabric: that
rank's all_reduce result is off by one in one element at every size, as a broken reduction would be). Only the test
suite sets it.
"""

import argparse
import faulthandler
import functools
import gc
import hashlib
import json
import os
import signal
import sys
import time
import traceback

STATUS = {}  # type: dict
_STATUS_PATH = None
PROTOCOL = None  # compat's live/protocol.py, loaded from beside this file (load_protocol)
PROTOCOL_NAME = "compat_live_protocol"  # live/protocol.py, copied beside this file by compat (in the package: protocol.py)


def load_protocol():
    """The records this rank writes (compat's live/protocol.py), loaded by path from beside this file: the run folder's
    copy, or the package's own file where the worker is run from there. By path, so that no module of the target's
    environment can stand in for it."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for name in (PROTOCOL_NAME + ".py", "protocol.py"):
        path = os.path.join(here, name)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location(PROTOCOL_NAME, path)
            module = importlib.util.module_from_spec(spec)
            # in sys.modules before it runs, as an import would: typing.get_type_hints looks a record's module up there
            # (Python 3.6-3.9 raise KeyError without it)
            sys.modules[PROTOCOL_NAME] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError("compat's live protocol (%s.py) is not beside %s" % (PROTOCOL_NAME, __file__))


def record_text(status):
    """The status as the protocol's RankStatus writes it, checked against the protocol; where it does not fit (a
    worker out of step with its protocol) the raw status, which compat then refuses with the reason, said here too."""
    try:
        return PROTOCOL.dumps(PROTOCOL.RankStatus.from_json(status, "record"))
    except PROTOCOL.ProtocolError as exc:
        sys.stderr.write("compat-live: this rank's record does not fit the protocol: %s\n" % exc)
        return json.dumps(status)


def save(**fields):
    STATUS.update(fields)
    STATUS["updated"] = time.time()
    tmp = _STATUS_PATH + ".tmp"
    text = record_text(STATUS)
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, _STATUS_PATH)


def stage(name):
    STATUS.setdefault("stages", []).append([name, round(time.time() - STATUS["started"], 3)])
    save(stage=name)
    sys.stderr.write("compat-live: stage %s\n" % name)
    sys.stderr.flush()


def rank_variables(map_mpi, launcher_variables=()):
    """RANK / WORLD_SIZE / LOCAL_RANK as the launcher gave them; with --map-mpi, from the launcher's own variables (they
    win): ``launcher_variables`` are its (rank, world size, local rank) names (--rank-variables, from compat's launcher)."""
    source = "RANK/WORLD_SIZE" if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None
    if map_mpi:
        for rank_var, size_var, local_var in launcher_variables:
            if rank_var in os.environ and size_var in os.environ:
                os.environ["RANK"] = os.environ[rank_var]
                os.environ["WORLD_SIZE"] = os.environ[size_var]
                os.environ["LOCAL_RANK"] = os.environ.get(local_var, os.environ[rank_var])
                source = "%s/%s" % (rank_var, size_var)
                break
    if source is None:
        return None, None, None, None
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    os.environ.setdefault("LOCAL_RANK", str(local))
    return rank, world, local, source


FIXTURE_FAULTS = {  # (kind, where) -> what the rank does; test hook only (COMPAT_LIVE_FIXTURE_FAULT=KIND:RANK)
    ("sleep", "before-init"): "sleep before joining",
    ("exit", "before-init"): "exit 3 before joining",
    ("stall", "before-collective"): "stall before the first collective",
    ("segv", "trainer"): "SIGSEGV at the Trainer stage",
    ("exit0", "trainer"): "os._exit(0) at the Trainer stage",
    ("wrongsum", "fabric"): "a wrong all_reduce result in the fabric sweep",
    ("stallpair", "pairs"): "no answer in its pair tests until the pair's deadline has passed",
}


def fixture_asks(rank, kind):
    """Whether the test hook asks this rank for the non-fatal fault ``kind`` (wrongsum, stallpair); the hook's value
    may list several KIND:RANK items, comma-separated."""
    for item in os.environ.get("COMPAT_LIVE_FIXTURE_FAULT", "").split(","):
        wanted, _, who = item.partition(":")
        if rank is not None and wanted == kind and who == str(rank):
            return True
    return False


def fixture_fault(rank, when):
    if rank is None:
        return
    for item in os.environ.get("COMPAT_LIVE_FIXTURE_FAULT", "").split(","):
        kind, _, who = item.partition(":")
        what = FIXTURE_FAULTS.get((kind, when))
        if who == str(rank) and what is not None:
            break
    else:
        return
    save(fixture_fault=what)
    sys.stderr.flush()
    if kind in ("exit", "exit0"):
        os._exit(3 if kind == "exit" else 0)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:  # sleep, stall: never join / never enter the collective
        time.sleep(3600)


def import_stack(args):
    import torch

    imports = {"torch": {"version": torch.__version__, "ok": True}}
    save(imports=imports, torch=torch.__version__)
    if args.ipex:
        stage("import:intel_extension_for_pytorch")
        try:
            import intel_extension_for_pytorch as ipex

            imports["ipex"] = {"module": "intel_extension_for_pytorch", "version": str(getattr(ipex, "__version__", "?")), "ok": True}
        except Exception as exc:  # a Python-level failure; a hard exit ends the process and compat classifies the log
            imports["ipex"] = {"module": "intel_extension_for_pytorch", "ok": False, "error": "%s: %s" % (exc.__class__.__name__, exc)}
        save(imports=imports)
    ccl = None
    if args.backend in ("auto", "ccl"):
        for module in ("oneccl_bindings_for_pytorch", "torch_ccl"):
            stage("import:" + module)
            try:
                bindings = __import__(module)
            except ImportError as exc:
                if getattr(exc, "name", None) == module:  # simply not installed
                    continue
                imports["ccl"] = {"module": module, "ok": False, "error": "%s: %s" % (exc.__class__.__name__, exc)}
                break
            except Exception as exc:
                imports["ccl"] = {"module": module, "ok": False, "error": "%s: %s" % (exc.__class__.__name__, exc)}
                break
            ccl = {
                "module": module,
                "ok": True,
                "version": text_or_none(getattr(bindings, "__version__", None)),  # the protocol's type: a string
                "cwd": getattr(bindings, "cwd", None),
                "fixture": getattr(bindings, "COMPAT_TEST_FIXTURE", None),
                "registered": backend_registered("ccl"),
            }
            imports["ccl"] = ccl
            break
        save(imports=imports)
    return imports


def text_or_none(value):
    return None if value is None else str(value)


def backend_registered(name):
    import torch.distributed as dist

    try:
        return bool(dist.is_backend_available(name))
    except Exception:  # torch < 2.0: torch_ccl registers Backend._plugins["CCL"] and Backend.CCL
        backend = getattr(dist, "Backend", None)
        plugins = getattr(backend, "_plugins", {})
        return (name in getattr(backend, "backend_list", []) or name in plugins or name.upper() in plugins
                or hasattr(backend, name.upper()))


def choose_backend(args, imports):
    ccl = imports.get("ccl")
    if args.backend == "gloo":
        return "gloo", "asked for gloo"
    if ccl and ccl.get("ok") and ccl.get("registered"):
        why = "%s imports and registers the ccl backend" % ccl["module"]
        if ccl.get("fixture"):
            why += " (a TEST FIXTURE on top of gloo, not oneCCL)"
        return "ccl", why
    if args.backend == "ccl":
        return None, "ccl was asked for but no oneCCL bindings import and register it"
    if ccl and not ccl.get("ok"):
        return "gloo", "%s failed to import (%s), so gloo" % (ccl["module"], ccl.get("error"))
    if ccl:
        return "gloo", "%s imports but does not register ccl, so gloo" % ccl["module"]
    return "gloo", "no oneCCL bindings are installed, so gloo"


def allreduce_checks(dist, torch, world):
    results = {}
    n = 1 << 16
    base = torch.arange(n, dtype=torch.float32) % 1024
    tensor = base * (dist.get_rank() + 1)
    dist.all_reduce(tensor)
    expected = base * (world * (world + 1) // 2)
    wrong = int((tensor != expected).sum())
    results["fp32"] = {"ok": wrong == 0, "elements": n, "wrong": wrong}
    try:
        # 0/1 per rank, so every partial sum is an integer <= world: exact in bf16 (8 bits) in any reduction order
        index = torch.arange(n)
        tensor16 = ((index + dist.get_rank()) % 2).to(torch.bfloat16)
        dist.all_reduce(tensor16)
        expected16 = sum(((index + r) % 2) for r in range(world)).to(torch.bfloat16)
        wrong16 = int((tensor16 != expected16).sum())
        results["bf16"] = {"ok": wrong16 == 0, "elements": n, "wrong": wrong16}
    except (RuntimeError, TypeError, ValueError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        results["bf16"] = {"ok": None, "unsupported": True, "error": text[:300]}
        dist.barrier()  # a backend that refused bf16 must still work for the rest; if not, this raises here
    return results


def bandwidth(dist, torch, world, sizes_mib):
    rows = []
    for mib in sizes_mib:
        count = mib * (1 << 20) // 4
        tensor = torch.ones(count, dtype=torch.float32)
        dist.all_reduce(tensor)  # warm up this size
        iterations = 10 if mib <= 1 else 5 if mib <= 16 else 3
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(tensor)
        elapsed = torch.tensor([(time.perf_counter() - start) / iterations], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        seconds = float(elapsed[0])
        algbw = count * 4 / seconds
        rows.append({"mib": mib, "seconds": seconds, "algbw": algbw, "busbw": algbw * 2 * (world - 1) / world, "iterations": iterations})
        del tensor
    return rows


def memcpy_bandwidth(dist, torch, mib=64):
    """Every rank copies at once, one thread each: the memory bandwidth the ranks share."""
    count = mib * (1 << 20) // 4
    src = torch.ones(count, dtype=torch.float32)
    dst = torch.empty_like(src)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dst.copy_(src)
        dist.barrier()
        best = None
        for _ in range(5):
            start = time.perf_counter()
            dst.copy_(src)
            spent = time.perf_counter() - start
            best = spent if best is None else min(best, spent)
    finally:
        torch.set_num_threads(threads)
    total = torch.tensor([count * 4 / best], dtype=torch.float64)
    dist.all_reduce(total)
    return {"mib": mib, "per_rank": count * 4 / best, "all_ranks": float(total[0])}


FABRIC_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
FABRIC_ERRORS_KEPT = 20


def memory_bound(cap, local_ranks):
    """The largest sweep size (bytes) this host affords: 1/16 of MemAvailable per local rank, at most ``cap``."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return max(1024, min(cap, int(line.split()[1]) * 1024 // (16 * max(1, local_ranks))))
    except (OSError, ValueError, IndexError):
        pass
    return cap


SWEEP_CASE_SECONDS = 1.0  # a case runs as many timed calls as fit in this (at least one), up to sweep_iterations(size)
SWEEP_STOP_SECONDS = 2.0  # one call slower than this: the larger sizes of that collective and type are not run (a slow link)
GUARD_RESERVE = 0.05  # of --fabric-deadline, kept free by the guard: an estimate may still be short by that much
SWEEP_MARGIN = 0.85  # under --fabric-deadline the sweep plans to fill this share of what is left (live/fabric.py SWEEP_MARGIN)


def sweep_iterations(size):
    return 20 if size <= 64 << 10 else 10 if size <= 1 << 20 else 5 if size <= 16 << 20 else 3


def fabric_case(torch, dist, name, dtype, size, rank, world, group=None):
    """Inputs whose exact result is known, for one collective at one size: small integers (partial sums stay integers
    far below 2**8, exact in bf16 and fp32 whatever the reduction order). Returns (bytes, prepare, run, wrong)
    where wrong() gives (count, elements, first index, got, expected) for this rank's result."""
    mod = 8 if 7 * world <= 256 else 2
    itemsize = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size // itemsize)
    chunk = max(1, count // world)

    def pattern(n, shift):
        return ((torch.arange(n) + shift) % mod).to(dtype)

    def summed(n, shift):  # sum over ranks r of pattern(n, r + shift), exact, in float64
        index = torch.arange(n)
        return sum(((index + r + shift) % mod).to(torch.float64) for r in range(world))

    if name == "all_reduce":
        source, out, expected = pattern(count, rank), torch.empty(count, dtype=dtype), summed(count, 0)
        prepare = lambda: out.copy_(source)  # noqa: E731
        run = lambda: dist.all_reduce(out, group=group)  # noqa: E731
        result = lambda: out  # noqa: E731
        moved = count * itemsize
    elif name == "all_gather":
        source = pattern(chunk, rank)
        outs = [torch.empty(chunk, dtype=dtype) for _ in range(world)]
        expected = torch.cat([pattern(chunk, j) for j in range(world)]).to(torch.float64)
        prepare = lambda: [o.fill_(-1) for o in outs]  # noqa: E731
        run = lambda: dist.all_gather(outs, source, group=group)  # noqa: E731
        result = lambda: torch.cat(outs)  # noqa: E731
        moved = chunk * world * itemsize
    elif name == "reduce_scatter":
        inputs = [pattern(chunk, rank + j) for j in range(world)]
        out = torch.empty(chunk, dtype=dtype)
        expected = summed(chunk, rank)
        prepare = lambda: out.fill_(-1)  # noqa: E731
        run = lambda: dist.reduce_scatter(out, inputs, group=group)  # noqa: E731
        result = lambda: out  # noqa: E731
        moved = chunk * world * itemsize
    elif name == "broadcast":
        truth = pattern(count, 1) + 1
        out = torch.empty(count, dtype=dtype)
        expected = truth.to(torch.float64)
        prepare = lambda: out.copy_(truth) if rank == 0 else out.fill_(0)  # noqa: E731
        run = lambda: dist.broadcast(out, 0, group=group)  # noqa: E731
        result = lambda: out  # noqa: E731
        moved = count * itemsize
    else:  # all_to_all: chunk j of rank s goes to rank j; rank r then holds pattern(chunk, s + 2r) from each s
        source = torch.cat([pattern(chunk, rank + 2 * j) for j in range(world)])
        out = torch.empty(chunk * world, dtype=dtype)
        expected = torch.cat([pattern(chunk, s + 2 * rank) for s in range(world)]).to(torch.float64)
        prepare = lambda: out.fill_(-1)  # noqa: E731
        run = lambda: dist.all_to_all_single(out, source, group=group)  # noqa: E731
        result = lambda: out  # noqa: E731
        moved = chunk * world * itemsize

    def wrong():
        got = result().to(torch.float64)
        bad = got != expected
        count_bad = int(bad.sum())
        if not count_bad:
            return 0, int(got.numel()), None, None, None
        first = int(bad.nonzero()[0][0])
        return count_bad, int(got.numel()), first, float(got[first]), float(expected[first])

    return moved, prepare, run, result, wrong


PLAN_MODULE = "compat_fabric_plan"  # live/fabric.py, copied beside this file by compat: the pure planning of the deadline


def plan_core():
    """compat's live/fabric.py (copied into the run folder as PLAN_MODULE), or None where it cannot be imported."""
    try:
        return __import__(PLAN_MODULE)
    except Exception:  # an older interpreter than the module's syntax: the sweep runs with the deadline's guard only
        return None


class FabricClock:
    """--fabric-deadline: one clock for the pairs and the sweep, started together on every rank (a barrier), read as
    the slowest rank's elapsed seconds (a MAX over the world) wherever a decision depends on it, so every rank decides
    the same."""

    def __init__(self, dist, torch, deadline):
        self.dist, self.torch, self.deadline = dist, torch, float(deadline or 0.0)
        dist.barrier()
        self.began = time.perf_counter()
        self.agreed = 0.0  # the last elapsed time every rank agreed on

    def mine(self):
        return time.perf_counter() - self.began

    def agree(self, group=None):
        value = self.torch.tensor([self.mine()], dtype=self.torch.float64)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX, group=group)
        self.agreed = float(value[0])
        return self.agreed

    def left(self):
        return self.deadline - self.agreed if self.deadline else float("inf")


def sweep_plan_for(chosen, world, labels, budget, link):
    """The sizes and timed seconds of the sweep under the deadline (live/fabric.py plan_sweep), or None without one."""
    core = plan_core()
    if core is None or budget is None:
        return None
    return core.plan_sweep(chosen, world, max(0.0, budget), link, collectives=FABRIC_COLLECTIVES, dtypes=labels,
                           timed=SWEEP_CASE_SECONDS, stop=SWEEP_STOP_SECONDS)


def fabric_sweep(dist, torch, rank, world, sizes, cap, group=None, backend=None, clock=None, budget=None, link=None, rate=None):
    """compat doctor --live --fabric: every collective at every size, fp32 and bf16, each iteration's result checked
    exactly on this rank; the time of each is the slowest rank's (mean of its timed iterations). Under --fabric-deadline
    (``clock``): the sizes and timed calls are planned to fit ``budget`` seconds over the slowest link measured (``link``:
    (a, b, bytes/s) or None), and a case whose estimate no longer fits before the deadline is not run; both are in
    ``skipped``. ``rate``: the bytes/s to plan with where no link was measured (one host: its memory copy)."""
    bound = torch.tensor([memory_bound(cap, int(os.environ.get("LOCAL_WORLD_SIZE") or world))], dtype=torch.float64)
    dist.all_reduce(bound, op=dist.ReduceOp.MIN)  # one bound for the whole world: every rank runs the same sizes
    bound = int(bound[0])
    chosen = [s for s in sizes if s <= bound]
    record = {"sizes": chosen, "bound": bound, "dropped": [s for s in sizes if s > bound], "rows": [], "errors": [], "unsupported": [], "cut": []}
    dtypes = [("fp32", torch.float32)] + ([("bf16", torch.bfloat16)] if hasattr(torch, "bfloat16") else [])
    deadline = clock is not None and clock.deadline
    plan = sweep_plan_for(chosen, world, [label for label, _ in dtypes], budget, link[2] if link else rate) if deadline else None
    if deadline:
        record["deadline"] = {"seconds": clock.deadline, "began": clock.agreed, "budget": budget, "link": list(link) if link else None,
                              "planned": plan is not None, "timed": plan.timed if plan else SWEEP_CASE_SECONDS,
                              "estimate": plan.estimate if plan else None, "spent": None}
        record["skipped"] = [{"collective": k.collective, "dtype": k.dtype, "sizes": list(k.sizes), "why": k.why} for k in plan.skipped] if plan else []
    sweep = _Sweep(dist, torch, rank, world, group, backend, clock, chosen, plan, record)
    for name in FABRIC_COLLECTIVES:
        for label, dtype in dtypes:
            sweep.run_sizes(name, label, dtype)
            if deadline:
                record["deadline"]["spent"] = clock.agreed
            if backend is None:
                save(fabric=record)
            else:
                OTHER_SWEEPS[backend] = record
                save(fabric_others=OTHER_SWEEPS)
    return record


class _Sweep:
    """One backend's sweep in progress (fabric_sweep): what each case needs, and the record the cases add to. Every
    decision that ends a collective's sizes early is made from values every rank agreed on, so all ranks make it."""

    def __init__(self, dist, torch, rank, world, group, backend, clock, chosen, plan, record):
        self.dist, self.torch, self.rank, self.world, self.group, self.backend = dist, torch, rank, world, group, backend
        self.clock, self.chosen, self.plan, self.record = clock, chosen, plan, record
        self.timed_seconds = plan.timed if plan is not None else SWEEP_CASE_SECONDS
        self.estimates = {(c.collective, c.dtype, c.size): c.seconds for c in plan.cases} if plan else {}
        self.wrong_fixture = fixture_asks(rank, "wrongsum")
        self.cases_begun = 0
        self.slower = 1.0  # how much slower than its estimate the last case ran (the model knows no TCP stall): later estimates scaled by it

    def run_sizes(self, name, label, dtype):
        """Every size of one collective and type, until the deadline, a refusal or a slow call stops them."""
        sizes_here = self.plan.sizes(name, label) if self.plan is not None else self.chosen
        for size in sizes_here:
            guess = self.estimates.get((name, label, size), 0.0) * self.slower
            if self.past_deadline(guess):
                # every rank holds the same agreed time and estimate: all skip the rest of this collective and type
                rest = [s for s in sizes_here if s >= size]
                self.record["skipped"].append({"collective": name, "dtype": label, "sizes": rest, "why": "deadline"})
                return
            if not self.run_case(name, label, dtype, size):
                return

    def past_deadline(self, guess):
        clock = self.clock
        return bool(clock is not None and clock.deadline and (clock.agreed + guess > clock.deadline * (1 - GUARD_RESERVE) or clock.left() <= 0))

    def run_case(self, name, label, dtype, size):
        """One case: its iterations, then the slowest rank's time and how many ranks saw a wrong value. False when the
        rest of this collective's sizes are not to be run (the backend refused it, or one call took too long)."""
        dist, torch, clock = self.dist, self.torch, self.clock
        before = clock.agreed if clock is not None else 0.0
        moved, prepare, run, result, wrong = fabric_case(torch, dist, name, dtype, size, self.rank, self.world, self.group)
        self.cases_begun += 1
        save(fabric_case=[name, label, moved, self.cases_begun], fabric_backend=self.backend)  # compat's progress line on a terminal
        try:
            iterations, spent, wrong_total = self.iterate(name, label, moved, sweep_iterations(size), prepare, run, result, wrong)
        except (RuntimeError, TypeError, ValueError) as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            self.record["unsupported"].append({"collective": name, "dtype": label, "error": text[:300]})
            dist.barrier(group=self.group)  # a backend that refused it must still work for the rest; if not, this raises here
            return False
        slowest = torch.tensor([spent / iterations, clock.mine() if clock is not None else 0.0], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest rank's time, and the clock every rank agrees on
        if clock is not None:
            clock.agreed = float(slowest[1])
            if self.estimates.get((name, label, size)):
                self.slower = max(1.0, (clock.agreed - before) / self.estimates[(name, label, size)])
        ranks_wrong = torch.tensor([1.0 if wrong_total else 0.0], dtype=torch.float64)
        dist.all_reduce(ranks_wrong)  # across hosts each compat reads only its own ranks' records: every rank learns the count
        self.record["rows"].append({"collective": name, "dtype": label, "bytes": moved, "iterations": iterations,
                                    "seconds": float(slowest[0]), "wrong": wrong_total, "ranks_wrong": int(ranks_wrong[0])})
        if float(slowest[0]) > SWEEP_STOP_SECONDS and size != self.chosen[-1]:  # every rank sees the same slowest time
            self.record["cut"].append({"collective": name, "dtype": label, "after": moved, "seconds": float(slowest[0]), "limit": SWEEP_STOP_SECONDS,
                                       "sizes": [s for s in self.chosen if s > size]})
            return False
        return True

    def iterate(self, name, label, moved, iterations, prepare, run, result, wrong):
        """(timed iterations, seconds they took on this rank, wrong elements seen): a warm-up (checked, not timed),
        then as many timed calls as fit in the case's seconds, each checked exactly; the first wrong one kept."""
        dist, torch = self.dist, self.torch
        spent = 0.0
        wrong_total = 0
        case_error = None
        iteration = 0
        while iteration <= iterations:  # the first is a warm-up: checked, not timed
            prepare()
            dist.barrier(group=self.group)
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
            if iteration:
                spent += took
            else:  # as many timed calls as fit in SWEEP_CASE_SECONDS (fewer under a deadline), from the slowest rank's warm-up: the same on every rank
                warm = torch.tensor([took], dtype=torch.float64)
                dist.all_reduce(warm, op=dist.ReduceOp.MAX)
                iterations = max(1, min(iterations, int(self.timed_seconds / max(float(warm[0]), 1e-9))))
            if self.wrong_fixture and name == "all_reduce":
                result()[0] += 1
            bad, elements, first, got, expected = wrong()
            if bad:
                wrong_total += bad
                case_error = self.note_wrong(case_error, {"collective": name, "dtype": label, "bytes": moved, "iteration": iteration, "iterations_wrong": 1,
                                                          "iterations": iterations + 1, "wrong": bad, "elements": elements, "index": first, "got": got,
                                                          "expected": expected})
            iteration += 1
        if case_error is not None:
            case_error["iterations"] = iterations + 1
        return iterations, spent, wrong_total

    def note_wrong(self, case_error, this):
        """The case's first wrong iteration (kept in the record while it holds fewer than FABRIC_ERRORS_KEPT), counting later ones."""
        if case_error is not None:
            case_error["iterations_wrong"] += 1
            return case_error
        if len(self.record["errors"]) < FABRIC_ERRORS_KEPT:
            self.record["errors"].append(this)
            return this
        return None


OTHER_SWEEPS = {}  # backend -> its sweep, for --fabric's comparison


def comparison_backends(dist, torch, main):
    """The other backends this torch has on every rank (gloo; mpi where torch was built with it and the ranks were
    started by an MPI launcher; ccl where the bindings registered it), to sweep on the same ranks after the run's own:
    a list every rank agrees on (a bit per backend, a MIN over the world)."""
    names = ("gloo", "ccl", "mpi")
    under_mpi = any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
    mine = []
    for name in names:
        try:
            have = (name == "gloo" and dist.is_gloo_available()) or (name == "mpi" and under_mpi and dist.is_mpi_available()) or (
                name == "ccl" and ("oneccl_bindings_for_pytorch" in sys.modules or "torch_ccl" in sys.modules) and backend_registered("ccl"))
        except (AttributeError, RuntimeError):
            have = False
        mine.append(1.0 if have and name != main else 0.0)
    agreed = torch.tensor(mine, dtype=torch.float64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return [name for name, flag in zip(names, agreed.tolist()) if flag == 1.0]


def fabric_compare(dist, torch, rank, world, sizes, cap, main, names=None, clock=None, link=None):
    """--fabric: the same sweep on each other backend, on a group of all the ranks; a backend that cannot form the
    group is recorded with why. Under a deadline each gets an equal share of what is left."""
    names = comparison_backends(dist, torch, main) if names is None else names
    for index, name in enumerate(names):
        save(fabric_comparing=name)
        group, why = None, None
        try:
            group = dist.new_group(backend=name)
        except (RuntimeError, ValueError, TypeError) as exc:
            why = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:300]
        formed = torch.tensor([0.0 if why else 1.0], dtype=torch.float64)
        dist.all_reduce(formed, op=dist.ReduceOp.MIN)  # every rank sweeps it, or none does
        if float(formed[0]) < 1.0:
            OTHER_SWEEPS[name] = {"error": why or "the group could not be formed on another rank"}
            save(fabric_others=OTHER_SWEEPS)
            continue
        budget = None
        if clock is not None and clock.deadline:
            budget = clock.left() * SWEEP_MARGIN / (len(names) - index) if clock.agree() < clock.deadline else 0.0
        fabric_sweep(dist, torch, rank, world, sizes, cap, group=group, backend=name, clock=clock, budget=budget, link=link)


PAIR_MESSAGE_BYTES = 256 << 10  # one point-to-point message of the pair test
PAIR_MIN_MESSAGES = 3  # timed per direction, after one warm-up; the fastest counts (a busy CPU slows some down, never speeds one up)
PAIR_MAX_MESSAGES = 64
PAIR_DIRECTION_SECONDS = 0.25  # more messages while the direction has taken less than this: a fast link gets many tries
PAIR_PINGS = 10  # latency round trips


PAIR_LARGE_BYTES = 4 << 20  # once a 256 KiB message crossed in under PAIR_LARGE_AFTER, the timed ones are 4 MiB: on a busy
PAIR_LARGE_AFTER = 0.02      # CPU a thread's wake-up (~1 ms) would dominate a 256 KiB message (0.2 ms at 1.5 GB/s), not a 4 MiB one


def pair_direction(dist, torch, sending, peer, big, tick, group=None, large=None):
    """Bytes per second from the sending side to ``peer``: each message is announced (a one-element tensor: 1 = a
    256 KiB message follows, 2 = a 4 MiB one, 0 = done) and acknowledged, and the fastest message counts. The first
    (a warm-up, 256 KiB) decides the size of the rest: 4 MiB where the link moved it in under PAIR_LARGE_AFTER.
    Both sides call it; the sender returns the rate, the receiver None."""
    best = None
    began = time.perf_counter()
    index = 0
    size = 1.0
    while True:
        if sending:
            more = index <= PAIR_MIN_MESSAGES or (index <= PAIR_MAX_MESSAGES and time.perf_counter() - began < PAIR_DIRECTION_SECONDS)
            tick.fill_(size if more else 0.0)
            dist.send(tick, peer, group=group)
            if not more:
                return best
            message = large if size == 2.0 else big
            start = time.perf_counter()
            dist.send(message, peer, group=group)
            dist.recv(tick, peer, group=group)
            spent = time.perf_counter() - start
            if index:  # the first is a warm-up
                rate = message.numel() * message.element_size() / spent
                best = rate if best is None else max(best, rate)
            elif large is not None and spent < PAIR_LARGE_AFTER:
                size = 2.0
        else:
            dist.recv(tick, peer, group=group)
            if float(tick[0]) == 0.0:
                return None
            dist.recv(large if float(tick[0]) == 2.0 else big, peer, group=group)
            dist.send(tick, peer, group=group)
        index += 1


PAIR_ALLREDUCE_BYTES = PAIR_MESSAGE_BYTES  # the two-rank all_reduce of each pair: 256 KiB of fp32
PAIR_ALLREDUCE_TIMES = 5  # timed after one warm-up, fewer where the link is slow (within PAIR_DIRECTION_SECONDS); the fastest counts


def pair_allreduce_times(rate):
    """How many timed all_reduce iterations a pair runs, from the slower direction's rate (bytes/s), which both sides
    know: as many as fit in PAIR_DIRECTION_SECONDS (a 2-rank all_reduce moves about its size each way), 1 to 5."""
    if not rate or rate <= 0:
        return 1
    return max(1, min(PAIR_ALLREDUCE_TIMES, int(PAIR_DIRECTION_SECONDS * rate / PAIR_ALLREDUCE_BYTES)))


def pair_measure(dist, torch, first, peer, group=None):
    """One pair of hosts, leader to leader: latency (half the median round trip of a one-element message), the bandwidth
    each way and, on the pair's own group, a two-rank all_reduce (its bus bandwidth, nccl-tests' factor 2(n-1)/n = 1
    for two ranks, and whether every iteration's sum was exact). ``first``: this side starts (the pair's lower host)."""
    tick = torch.zeros(1, dtype=torch.float32)
    big = torch.zeros(PAIR_MESSAGE_BYTES // 4, dtype=torch.float32)
    trips = []
    for _ in range(PAIR_PINGS):
        if first:
            start = time.perf_counter()
            dist.send(tick, peer, group=group)
            dist.recv(tick, peer, group=group)
            trips.append(time.perf_counter() - start)
        else:
            dist.recv(tick, peer, group=group)
            dist.send(tick, peer, group=group)
    large = torch.zeros(PAIR_LARGE_BYTES // 4, dtype=torch.float32)
    out = pair_direction(dist, torch, first, peer, big, tick, group, large)  # the first side's rate to its peer (None on the peer)
    back = pair_direction(dist, torch, not first, peer, big, tick, group, large)  # the peer's rate back (None on the first side)
    rates = torch.tensor([out or 0.0, back or 0.0], dtype=torch.float64)  # each side tells the other the rate it timed
    other = torch.zeros(2, dtype=torch.float64)
    if first:
        dist.send(rates, peer, group=group)
        dist.recv(other, peer, group=group)
        back = float(other[1])
    else:
        dist.recv(other, peer, group=group)
        dist.send(rates, peer, group=group)
        out = float(other[0])
    allreduce = None
    if group is not None:  # the pair's own group: a collective of these two ranks only
        count = PAIR_ALLREDUCE_BYTES // 4
        mine = (torch.arange(count, dtype=torch.float32) % 7) + (0.0 if first else 1.0)
        expected = (torch.arange(count, dtype=torch.float32) % 7) * 2 + 1
        buffer = torch.empty(count, dtype=torch.float32)
        best, wrong = None, 0
        for iteration in range(pair_allreduce_times(min(out, back)) + 1):
            buffer.copy_(mine)
            start = time.perf_counter()
            dist.all_reduce(buffer, group=group)
            took = time.perf_counter() - start
            wrong += int((buffer != expected).sum())
            if iteration:
                best = took if best is None else min(best, took)
        theirs = torch.tensor([float(wrong)], dtype=torch.float64)
        dist.all_reduce(theirs, group=group)  # the wrong values of both sides
        allreduce = {"busbw": PAIR_ALLREDUCE_BYTES / best, "bytes": PAIR_ALLREDUCE_BYTES, "wrong": int(theirs[0])}
    trips.sort()
    return {"latency": trips[len(trips) // 2] / 2 if trips else None, "out": out if first else None, "back": back if first else None,
            "allreduce": allreduce}


def round_groups(dist, torch, pairs, leaders, deadline):
    """The process groups of one round's pairs (each pair's two leaders), with the pair's own deadline: every operation
    of a pair test runs on its group, so a link that never answers costs ``deadline`` seconds, not the run. Every rank
    forms every group of the round, in the same order (torch names a group by how many it formed before: a group formed
    by its two members alone gets a different name on each side once they have formed different numbers), each call
    on its own so that one that fails on one rank does not change the count; then every rank learns whether all
    formed (a MIN over the world), and if any did not, no rank uses the round's groups. The groups are destroyed
    after the round. ({}, why) where they could not be formed."""
    import datetime

    groups, why = {}, None
    for a, b in pairs:
        try:
            groups[(a, b)] = dist.new_group(sorted({leaders[a], leaders[b]}), timeout=datetime.timedelta(seconds=deadline))
        except (RuntimeError, ValueError, TypeError) as exc:
            why = why or ("the backend formed no group of two ranks: " + (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:200])
    formed = torch.tensor([0.0 if why else 1.0], dtype=torch.float64)
    dist.all_reduce(formed, op=dist.ReduceOp.MIN)
    if float(formed[0]) < 1.0:
        return {}, why or "a pair's group could not be formed on another rank"
    return groups, None


def end_round_groups(dist, groups, rank, leaders):
    for (a, b), group in groups.items():
        if rank in (leaders[a], leaders[b]):
            try:
                dist.destroy_process_group(group)
            except (RuntimeError, ValueError, AssertionError):  # a group closed by a timeout: nothing left to release
                pass


def socket_fds():
    """This process's open socket descriptors (/proc/self/fd), by number."""
    found = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            if os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                found.add(int(name))
        except (OSError, ValueError):
            continue
    return found


TCP_INFO_SENT, TCP_INFO_RETRANSMITTED, TCP_INFO_DSACK_DUPS = 136, 100, 216  # byte offsets in struct tcp_info (include/uapi/linux/tcp.h)


def tcp_info_counts(fds, size=232):
    """[segments sent, segments retransmitted, retransmissions proven spurious] over the TCP connections ``fds`` (the
    kernel's own per-connection counters, getsockopt TCP_INFO: tcpi_segs_out, tcpi_total_retrans since Linux 4.2;
    tcpi_dsack_dups, "RFC4898 tcpEStatsStackDSACKDups", since 4.19: an older kernel's struct ends before it, and the
    spurious count is then None, unknown, never a silent 0). ``size``: the bytes asked for (the kernel answers with at
    most its own struct's). tcpi_dsack_dups counts the segments the
    peer reported back as duplicates with a D-SACK (RFC 2883; net/ipv4/tcp_input.c tcp_dsack_seen adds each D-SACK's
    segments and ignores one that names more than were retransmitted): a retransmission whose original arrived after
    all, late (a receiver starved of CPU answering after the loss-probe or RTO timer fired) or out of order (a veth
    delivers through the per-CPU backlog of whichever CPU the sender ran on). None when none of the sockets answers
    (not TCP, an older kernel)."""
    import socket
    import struct

    sent = again = spurious = 0
    answered = counted = uncounted = False
    for fd in fds:
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, size)
        except (OSError, AttributeError):
            continue
        finally:
            sock.close()
        if len(info) >= 144:
            retransmitted = struct.unpack_from("I", info, TCP_INFO_RETRANSMITTED)[0]
            again += retransmitted
            sent += struct.unpack_from("I", info, TCP_INFO_SENT)[0]
            if len(info) >= TCP_INFO_DSACK_DUPS + 4:
                spurious += min(retransmitted, struct.unpack_from("I", info, TCP_INFO_DSACK_DUPS)[0])
                counted = True
            else:
                uncounted = True
            answered = True
    return [sent, again, spurious if counted and not uncounted else None] if answered else None


def pair_test(dist, torch, first, peer, deadline, stalled, group, why, own_sockets=()):
    """One pair measured from this side on its ``group`` (None: the world's group, without a deadline of its own, for
    the reason ``why``): the result (or the error that ended it) and this host's TCP segments sent and retransmitted
    meanwhile, which the peer sends to the first side."""
    began = time.perf_counter()
    before = tcp_counters()
    try:
        if stalled:  # FIXTURE fault stallpair: this side does not answer until the pair's deadline has passed
            time.sleep(deadline + 1)
            raise RuntimeError("FIXTURE stallpair: this side did not answer")
        result = pair_measure(dist, torch, first, peer, group)
    except RuntimeError as exc:  # gloo: "Timed out waiting ... for recv operation to complete", a peer gone from the pair's group
        if group is None and not stalled:
            raise  # the world's group itself failed: the run's own deadline and live.hang say so
        text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:300]
        result = {"latency": None, "out": None, "back": None, "allreduce": None, "error": f"no answer within {deadline:g} s ({text})"}
    if why and result.get("allreduce") is None:
        result["allreduce_skipped"] = why
    # the pair group's own connections were opened for this pair alone: their counters are this pair's traffic, and
    # nothing else's (a host's /proc/net/snmp also counts late retransmissions on its earlier pairs' connections)
    own = tcp_info_counts(own_sockets) if own_sockets else None
    after = tcp_counters()
    result["tcp"] = own if own is not None else tcp_difference(before, after)
    result["tcp_source"] = "connections" if own is not None else "host"
    result["seconds"] = time.perf_counter() - began
    return result


def pair_counters(dist, torch, first, peer, result):
    """The peer's TCP counters of the pair test, sent to the first side over the default group (the pair's own may have
    timed out): the first side's result then holds the segments both ends sent, retransmitted, and of those the
    retransmissions the other end reported as duplicates (D-SACK: not lost)."""
    mine = result.get("tcp")
    source = 1.0 if result.get("tcp_source") == "connections" else 0.0
    # -1: not counted (no counters at all; or, third, a kernel that does not count D-SACKs)
    tensor = torch.tensor([-1.0 if v is None else v for v in mine] + [source] if mine else [-1.0, -1.0, -1.0, source], dtype=torch.float64)
    if first:
        dist.recv(tensor, peer)
        result.update(pair_sum(mine, [int(v) for v in tensor.tolist()], source == 1.0))
    else:
        dist.send(tensor, peer)


def pair_sum(mine, theirs, own_connections):
    """The pair's counts from this side's [sent, retransmitted, spurious] (``mine``, None: not counted; its spurious None:
    D-SACKs not counted) and the peer's as it sent them ([sent, retransmitted, spurious, source], -1 not counted, source 1
    for its own connections): both ends' sums, spurious None with dsack_unknown where either end's kernel did not count
    D-SACKs (every retransmission then counts as lost), and where the counts came from."""
    both = mine is not None and min(theirs[:2]) >= 0
    dsacks = both and mine[2] is not None and theirs[2] >= 0
    summed = {"sent": mine[0] + theirs[0] if both else None, "retransmitted": mine[1] + theirs[1] if both else None,
              "spurious": mine[2] + theirs[2] if dsacks else None,
              "tcp_source": ("connections" if theirs[3] == 1 and own_connections else "host") if both else None}
    if both and not dsacks:
        summed["dsack_unknown"] = True
    return summed


def tcp_counters():
    """This host's TCP segments sent and retransmitted so far (/proc/net/snmp, per network namespace) and the
    retransmitted segments its peers reported as duplicates (/proc/net/netstat TcpExt TCPDSACKRecvSegs, Linux 5.10+;
    TCPDSACKRecv, one per D-SACK block, before; None, unknown, when neither can be read); None if unreadable."""
    try:
        with open("/proc/net/snmp") as handle:
            rows = [line.split() for line in handle if line.startswith("Tcp:")]
        values = dict(zip(rows[0][1:], rows[1][1:]))
        counts = {"out": int(values["OutSegs"]), "retrans": int(values["RetransSegs"]), "spurious": None}
    except (OSError, IndexError, KeyError, ValueError):
        return None
    try:
        with open("/proc/net/netstat") as handle:
            rows = [line.split() for line in handle if line.startswith("TcpExt:")]
        extended = dict(zip(rows[0][1:], rows[1][1:]))
        counts["spurious"] = int(extended.get("TCPDSACKRecvSegs", extended["TCPDSACKRecv"]))
    except (OSError, IndexError, KeyError, ValueError):
        pass
    return counts


def tcp_difference(before, after):
    """[sent, retransmitted, spurious] between two tcp_counters() readings (spurious never above retransmitted, None
    when either reading could not count D-SACKs); None when either is missing."""
    if not before or not after:
        return None
    again = after["retrans"] - before["retrans"]
    if after.get("spurious") is None or before.get("spurious") is None:
        return [after["out"] - before["out"], again, None]
    return [after["out"] - before["out"], again, max(0, min(again, after["spurious"] - before["spurious"]))]


def slow_link_rounds(links):
    """The links the judgement would call slow (live/fabric.py: below SLOW_FRACTION of healthy_reference, the median
    over hosts of each host's fastest link), in rounds where no host is in two pairs at once (greedy, in the links'
    order): every rank computes the same rounds from the same table."""
    answered = [link for link in links if link.get("error") is None]  # a pair that ran out its deadline is not tried again
    if len(answered) < 3:
        return []
    fastest = {}
    for link in answered:
        rate = min(link["out"], link["back"])
        for host in (link["a"], link["b"]):
            fastest[host] = max(fastest.get(host, rate), rate)
    bests = sorted(fastest.values())
    middle = len(bests) // 2
    reference = bests[middle] if len(bests) % 2 else (bests[middle - 1] + bests[middle]) / 2
    slow = [(link["a"], link["b"]) for link in answered if min(link["out"], link["back"]) < 0.5 * reference]
    rounds = []
    for a, b in slow:
        for pairs in rounds:
            if all(a not in pair and b not in pair for pair in pairs):
                pairs.append((a, b))
                break
        else:
            rounds.append([(a, b)])
    return rounds


def interface_facts():
    """This host's interface toward the master (the one holding the local address the kernel's route to MASTER_ADDR
    leaves from: a UDP socket connected to it sends nothing), its MTU and link speed (/sys/class/net; a virtual
    interface has none), and GLOO_SOCKET_IFNAME as set. Standard library only; every field None where unknown."""
    import socket

    facts = {"interface": None, "address": None, "mtu": None, "speed": None, "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME") or None}
    master = os.environ.get("MASTER_ADDR")
    try:
        family, _, _, _, target = socket.getaddrinfo(master, 9, 0, socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(target)
            facts["address"] = str(sock.getsockname()[0]).split("%", 1)[0]
    except (OSError, TypeError, UnicodeError, IndexError):
        return facts
    if facts["address"].startswith("127.") or facts["address"] in ("::1", "::ffff:127.0.0.1"):
        return facts  # the master's name resolves to loopback here (Debian's 127.0.1.1): no interface of the job's to judge
    facts["interface"] = owner_of(facts["address"])
    for key in ("mtu", "speed"):
        try:
            with open("/sys/class/net/%s/%s" % (facts["interface"], key)) as handle:
                value = int(handle.read().strip())
            facts[key] = value if value > 0 else None
        except (OSError, ValueError, TypeError):
            pass
    return facts


def owner_of(address):
    """The interface that holds ``address`` (IPv4: each interface's address by SIOCGIFADDR; IPv6: /proc/net/if_inet6)."""
    import socket

    if ":" in address:
        try:
            wanted = socket.inet_pton(socket.AF_INET6, address).hex()
            with open("/proc/net/if_inet6") as handle:
                for line in handle:
                    words = line.split()
                    if len(words) >= 6 and words[0].lower() == wanted:
                        return words[5]
        except (OSError, ValueError):
            return None
        return None
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return None


PAIR_RETRIES = 2  # times a slow link is measured again (each time only the links still slow)


def merge_again(links, again):
    """Each slow link measured again: the faster of the measurements, each way (load only ever slows one down), the
    segments summed (a pair that did not answer is never measured again: slow_link_rounds)."""
    retried = {(link["a"], link["b"]): link for link in again}
    for link in links:
        second = retried.get((link["a"], link["b"]))
        if second is None:
            continue
        if second.get("error") is None:  # a repeat that ran out its deadline keeps the first measurement
            link.update(out=max(link["out"], second["out"]), back=max(link["back"], second["back"]))
            if link.get("allreduce") and second.get("allreduce"):
                link["allreduce"] = {**second["allreduce"], "busbw": max(link["allreduce"]["busbw"], second["allreduce"]["busbw"]),
                                     "wrong": link["allreduce"]["wrong"] + second["allreduce"]["wrong"]}
        if link.get("sent") is not None and second.get("sent") is not None:
            link.update(sent=link["sent"] + second["sent"], retransmitted=link["retransmitted"] + second["retransmitted"],
                        spurious=(link.get("spurious") or 0) + (second.get("spurious") or 0))
            if link.get("dsack_unknown") or second.get("dsack_unknown"):  # a part not counted: the sum is not known either
                link.update(spurious=None, dsack_unknown=True)
        link["measured"] = link.get("measured", 1) + 1


def fabric_pairs(dist, torch, rank, world, plan_path, memcpy, clock=None):
    """compat doctor --live --fabric across hosts: the pairs of hosts compat scheduled (live/fabric.py), measured
    round by round between each host's first rank, no host in two pairs at once, each pair on its own group with its
    own deadline; every rank gets the whole table."""
    with open(plan_path) as handle:
        plan = json.load(handle)
    deadline = float(plan.get("deadline") or 30)
    names = [None] * world
    dist.all_gather_object(names, os.uname()[1])
    hosts = list(dict.fromkeys(names))  # in the order of their first rank
    leaders = [names.index(h) for h in hosts]
    record = {"hosts": hosts, "mode": plan["mode"], "rounds": len(plan["rounds"]), "deadline": deadline, "links": [], "seconds": 0.0}
    if plan.get("asked_deadline") is not None:  # --fabric-deadline lowered --pair-deadline: said with both numbers
        record["asked_deadline"] = float(plan["asked_deadline"])
    share = float(plan.get("budget") or 0.0)  # the seconds the pairs may take under --fabric-deadline (0: no bound)
    if len(hosts) != plan["hosts"]:
        record["error"] = "the schedule is for %d hosts but the ranks run on %d (%s)" % (plan["hosts"], len(hosts), ", ".join(hosts))
        save(pairs=record)
        return record
    measure_round = functools.partial(_measure_round, dist, torch, rank, leaders, deadline, fixture_asks(rank, "stallpair"))
    started = time.perf_counter()
    before = tcp_counters()
    mine = []
    for number, pairs in enumerate(plan["rounds"]):
        save(pairs_round=number, pairs_rounds=len(plan["rounds"]))
        measure_round(pairs, number, mine)
    found = [None] * world
    dist.all_gather_object(found, mine)
    links = sorted((link for part in found for link in part), key=lambda link: (link["a"], link["b"]))
    skipped = _measure_slow_again(measure_round, dist, world, links, deadline, share, clock)
    if skipped:
        record["skipped"] = [skipped]
    record["seconds"] = time.perf_counter() - started
    after = tcp_counters()
    difference = tcp_difference(before, after)
    tcp = None
    if difference:
        tcp = {"out": difference[0], "retrans": difference[1], "spurious": difference[2] or 0}
        if difference[2] is None:  # no TcpExt D-SACK counter here: every retransmission counted as lost
            tcp["dsack_unknown"] = True
    gathered = [None] * world
    dist.all_gather_object(gathered, {"memcpy": memcpy.get("per_rank"), "tcp": tcp, "interface": interface_facts() if rank in leaders else None})
    record["links"] = links
    record["memcpy"] = [gathered[leader]["memcpy"] for leader in leaders]
    record["tcp"] = [gathered[leader]["tcp"] for leader in leaders]  # segments sent, retransmitted, spurious by each host during the pairs
    record["interfaces"] = [gathered[leader]["interface"] for leader in leaders]  # each host's interface toward the master
    save(pairs=record)
    return record


def _measure_round(dist, torch, rank, leaders, deadline, stalled, pairs, number, kept):
    """One round of fabric_pairs: each pair (of host indexes) on its own group, measured by the hosts' first ranks;
    the first host's rank keeps the result in ``kept``. Every rank takes part (the groups and the closing barrier)."""
    earlier = socket_fds()
    groups, why = round_groups(dist, torch, pairs, leaders, deadline)
    opened = socket_fds() - earlier  # this rank's connections of its pair's group (a rank is in one pair a round)
    for a, b in pairs:
        if rank not in (leaders[a], leaders[b]):
            continue
        first = rank == leaders[a]
        peer = leaders[b] if first else leaders[a]
        result = pair_test(dist, torch, first, peer, deadline, stalled, groups.get((a, b)), why, opened)
        pair_counters(dist, torch, first, peer, result)
        if first:
            result.update({"a": a, "b": b, "round": number})
            result.pop("tcp", None)
            kept.append(result)
    dist.barrier()  # the round ends for everyone: the next round's pairs start together
    end_round_groups(dist, groups, rank, leaders)


def _measure_slow_again(measure_round, dist, world, links, deadline, share, clock):
    """Measure again (up to PAIR_RETRIES times) the links below half the median, merged into ``links``: a busy machine
    slows a link for a while, a rate limit or a bad cable does every time. Under --fabric-deadline only while the
    slowest such round still fits in the pairs' share: else the sentence saying what was not measured again (else None)."""
    for _attempt in range(PAIR_RETRIES):
        rounds = slow_link_rounds(links)
        if not rounds:
            return None
        if share and clock is not None:
            took = {(link["a"], link["b"]): float(link.get("seconds") or deadline) for link in links}
            need = sum(max(took.get(tuple(pair), deadline) for pair in pairs) for pairs in rounds)
            if clock.agree() + need > share:
                return ("measuring again %d slow link(s) (%.1f s more would pass the %.0f s the pairs may take under --fabric-deadline)"
                        % (sum(len(p) for p in rounds), need, share))
        again = []
        for pairs in rounds:
            measure_round(pairs, None, again)
        parts = [None] * world
        dist.all_gather_object(parts, again)
        merge_again(links, [link for part in parts for link in part])
    return None


def digest(torch, model):
    sha = hashlib.sha256()
    for _name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        data = param.detach().to(torch.float32).contiguous().reshape(-1)
        try:
            sha.update(data.numpy().tobytes())
        except Exception:  # torch without numpy
            sha.update(repr(data.tolist()).encode())
    return sha.hexdigest()


def trainer_makes_group(TrainingArguments):
    """Whether this transformers' TrainingArguments calls init_process_group itself, unconditionally (the releases
    before accelerate's PartialState, ~4.10-4.28): then the one group of the process must be the one it makes.
    Later ones go through PartialState, which adopts a group that is already initialised."""
    import inspect

    member = TrainingArguments.__dict__.get("_setup_devices")
    function = getattr(member, "func", None) or getattr(member, "fget", None) or member
    try:
        source = inspect.getsource(inspect.unwrap(function))
    except (TypeError, OSError, ValueError):
        return False
    return "init_process_group" in source and "PartialState(" not in source


def transformers_makes_group():
    try:
        from transformers import TrainingArguments
    except Exception:  # reported at the Trainer stage, where it is imported again
        return False
    return trainer_makes_group(TrainingArguments)


def prepare_trainer(args, torch, backend, grouped, in_init=False):
    """The model, the TrainingArguments (which set up the distributed state: adopting the group compat formed, or,
    for transformers that make their own, forming the one group of this process) and what the step records."""
    import transformers
    from transformers import GPT2Config, Trainer, TrainerCallback, TrainingArguments

    info = {"transformers": transformers.__version__, "steps_wanted": args.steps, "per_device_batch": args.batch}
    try:
        import accelerate

        info["accelerate"] = accelerate.__version__
    except Exception:
        info["accelerate"] = None
    save(trainer=info)

    seen_rows = []
    ProbeModel, info["loss_kwargs"] = probe_model_class(seen_rows)
    step_times = []
    losses = []
    callbacks = trainer_callbacks(TrainerCallback, step_times, losses)

    torch.manual_seed(1234)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2)
    model = ProbeModel(config)
    kwargs, info["flags"], info["dropped"] = training_kwargs(args, TrainingArguments, backend, grouped)
    model, optimizers = apply_ipex(args, torch, model, info)
    save(trainer=info)
    if not in_init:
        stage("trainer:arguments")
    training_args = trainer_group(TrainingArguments, kwargs, info, in_init)
    info["world_size"] = int(training_args.world_size)
    info["process_index"] = int(getattr(training_args, "process_index", 0))
    info["parallel_mode"] = str(getattr(training_args, "parallel_mode", ""))
    save(trainer=info)
    return {"info": info, "model": model, "training_args": training_args, "optimizers": optimizers, "Trainer": Trainer,
            "dataset": probe_samples(torch, 64, 16), "callbacks": callbacks, "step_times": step_times, "losses": losses, "seen_rows": seen_rows}


def probe_model_class(seen_rows):
    """(the probe's GPT-2 model class, whether its forward takes the Trainer's loss kwargs): a GPT2LMHeadModel that
    appends, in training, the samples of each batch (their first token) to ``seen_rows``."""
    import inspect

    from transformers import GPT2LMHeadModel

    parent_takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(GPT2LMHeadModel.forward).parameters.values())

    class ProbeModel(GPT2LMHeadModel):
        def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
            if self.training:
                seen_rows.append([int(v) for v in input_ids[:, 0].tolist()])
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)

    if not parent_takes_kwargs:  # keep the Trainer from passing loss kwargs (num_items_in_batch) the model cannot take
        ProbeModel.forward.__signature__ = inspect.Signature(list(inspect.signature(ProbeModel.forward).parameters.values())[:4])
    return ProbeModel, parent_takes_kwargs


def probe_samples(torch, count, length):
    """The probe's dataset: ``count`` fixed random rows of ``length`` tokens, the first token naming the sample."""

    class Samples(torch.utils.data.Dataset):
        def __init__(self, count, length):
            generator = torch.Generator().manual_seed(7)
            self.rows = torch.randint(64, 128, (count, length), generator=generator)
            self.rows[:, 0] = torch.arange(count)  # the first token names the sample

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, index):
            row = self.rows[index]
            return {"input_ids": row, "attention_mask": torch.ones_like(row), "labels": row.clone()}

    return Samples(count, length)


def trainer_callbacks(TrainerCallback, step_times, losses):
    """The Trainer callbacks that record each step's seconds in ``step_times`` and each logged loss in ``losses``."""

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.start)

    class Losses(TrainerCallback):
        def on_log(self, _args, _state, _control, logs=None, **k):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    return [Timer(), Losses()]


def training_kwargs(args, TrainingArguments, backend, grouped):
    """(TrainingArguments' keyword arguments, the flags compat translated, the probe's settings this transformers
    does not take): the probe's settings, then compat's flags, the backend flag set to the backend this run proved."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    wanted = {
        "output_dir": os.path.join(args.run_dir, "trainer-%d" % os.getpid()),
        "per_device_train_batch_size": args.batch,
        "max_steps": args.steps,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "seed": 1234,
        "dataloader_num_workers": 0,
        "remove_unused_columns": False,
        "ddp_find_unused_parameters": False,  # set explicitly: DDP warns on every rank otherwise
        "ddp_timeout": int(args.init_timeout),  # the Trainer's own rendezvous may not wait 30 minutes for a dead rank
        "average_tokens_across_devices": False,  # transformers 5.x: otherwise the loss scales with the world size
    }
    kwargs = {k: v for k, v in wanted.items() if k in fields}
    flags = json.loads(args.trainer_flags)
    backend_flag = flags.pop("__backend_flag__", None)
    ccl_blocked = flags.pop("__ccl_blocked__", False)
    if backend_flag and grouped:
        # the backend this run proved; when this transformers/accelerate cannot take ccl, the step runs on gloo.
        # A process that formed no group (no rank variables) passes no backend: it trains as the script would, alone.
        flags[backend_flag] = "gloo" if (backend != "gloo" and ccl_blocked) else (backend or "gloo")
    kwargs.update(flags)
    return kwargs, flags, sorted(k for k in wanted if k not in fields)


def apply_ipex(args, torch, model, info):
    """(the model, the Trainer's optimizers): under --ipex direct, both from ipex.optimize; how IPEX is applied goes in ``info``."""
    if args.ipex_mode == "trainer":
        info["ipex"] = "applied by the Trainer (use_ipex=True)"
    if args.ipex_mode != "direct":
        return model, (None, None)
    import intel_extension_for_pytorch as ipex

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    model, optimizer = ipex.optimize(model, optimizer=optimizer, dtype=torch.bfloat16 if info["flags"].get("bf16") else torch.float32)
    info["ipex"] = "applied with ipex.optimize(model, optimizer) before the Trainer"
    return model, (optimizer, None)


def trainer_group(TrainingArguments, kwargs, info, in_init):
    """The TrainingArguments, made so that the distributed state is set up now; who formed the process group and
    whether the Trainer adopted compat's goes in ``info["group"]``."""
    import torch.distributed as dist

    before = default_group(dist)
    created_before = GROUPS["created"]
    training_args = TrainingArguments(**kwargs)
    if in_init or not dist.is_initialized():
        training_args.device  # noqa: B018 -- sets up the distributed state now, as the Trainer would on first use
    after = default_group(dist)
    info["group"] = {
        "made_by": "trainer" if in_init else ("compat" if before is not None else ("trainer" if after is not None else None)),
        "adopted": before is not None and after is before,  # the Trainer found the group initialised and used it
        "created_by_trainer": GROUPS["created"] - created_before,
    }
    return training_args


def run_trainer(args, torch, prepared):
    """The Trainer's steps on the process group there is; what they did, for the report."""
    import torch.distributed as dist

    info = prepared["info"]
    stage("trainer:train")
    trainer = prepared["Trainer"](model=prepared["model"], args=prepared["training_args"], train_dataset=prepared["dataset"],
                                  callbacks=prepared["callbacks"], optimizers=prepared["optimizers"])
    started = time.perf_counter()
    trainer.train()
    info["train_seconds"] = time.perf_counter() - started
    info["steps_done"] = int(trainer.state.global_step)
    info["step_seconds"] = prepared["step_times"]
    info["losses"] = prepared["losses"]
    info["rows_per_step"] = prepared["seen_rows"]
    info["train_batch_size"] = int(getattr(trainer, "_train_batch_size", args.batch) or args.batch)
    unwrapped = trainer.model.module if hasattr(trainer.model, "module") else trainer.model
    info["wrapped_in"] = type(trainer.model_wrapped).__name__ if hasattr(trainer, "model_wrapped") else None
    ddp_group = getattr(getattr(trainer, "model_wrapped", None), "process_group", None)
    if ddp_group is not None and info.get("group"):
        info["group"]["ddp_on_it"] = ddp_group is default_group(dist)  # DDP reduced the gradients on that one group
    if info.get("group") is not None:
        info["group"]["created"] = GROUPS["created"]
    info["params_sha256"] = digest(torch, unwrapped)
    if args.ipex_mode != "none":
        # ipex.optimize leaves params_attr on the module it optimized (in place under the Trainer)
        wrapped = getattr(trainer, "model_wrapped", None)
        inner = getattr(wrapped, "module", wrapped)
        info["ipex_optimized"] = any(hasattr(m, "params_attr") for m in (unwrapped, inner, trainer.model) if m is not None)
    save(trainer=info)
    # The shutdown trick: drop the trainer and model, collect, barrier, then destroy the group. Without it gloo's
    # background thread can abort the interpreter at exit ("terminate called without an active exception").
    prepared.clear()
    del trainer, unwrapped
    gc.collect()


GROUPS = {"created": 0}  # init_process_group calls in this process, whoever made them (compat, the Trainer, accelerate)


def count_groups(dist):
    """Count every init_process_group of this process: one group per process is the rule (oneCCL's MPI transport
    does not survive a second one)."""
    from torch.distributed import distributed_c10d

    original = distributed_c10d.init_process_group
    if getattr(original, "_compat_counted", False):
        return

    def counted(*a, **k):
        GROUPS["created"] += 1
        save(groups_created=GROUPS["created"])
        return original(*a, **k)

    counted._compat_counted = True
    counted.__wrapped__ = original
    distributed_c10d.init_process_group = counted
    dist.init_process_group = counted


def default_group(dist):
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._get_default_group()
    except Exception:
        return getattr(dist.group, "WORLD", None)


IFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "FI_TCP_IFACE", "CCL_KVS_IFACE", "I_MPI_HYDRA_IFACE")


def resolve(name, limit=5.0):
    """The addresses ``name`` resolves to here ([] when it does not), within ``limit`` seconds (a DNS that never answers)."""
    import socket
    import threading

    found = {}

    def lookup():
        try:
            found["addresses"] = sorted({info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})
        except (OSError, UnicodeError) as exc:
            found["error"] = str(exc)

    thread = threading.Thread(target=lookup, name="compat-live-resolve")
    thread.daemon = True
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        return {"addresses": [], "error": "no answer within %gs" % limit}
    return found


def bindable(address):
    """Whether this host owns ``address`` (gloo's own test: it binds to the address its host name resolves to)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


def network_facts():
    """What decides where this rank listens and whom it reaches: its host name and what it resolves to, MASTER_ADDR and
    what it resolves to here, the interfaces, the interface variables. Read before any group forms."""
    import socket

    host = socket.gethostname()
    facts = {"host": host, "interfaces": sorted(name for _, name in socket.if_nameindex()),
             "iface_variables": {name: os.environ[name] for name in IFACE_VARIABLES if os.environ.get(name)}}
    own = resolve(host)
    facts["host_resolves"] = [{"address": a, "loopback": a.startswith("127."), "local": bindable(a)} for a in own.get("addresses", [])]
    if own.get("error"):
        facts["host_error"] = own["error"]
    master = os.environ.get("MASTER_ADDR")
    if master:
        found = resolve(master)
        facts["master_addr"] = master
        facts["master_resolves"] = [{"address": a, "local": bindable(a)} for a in found.get("addresses", [])]
        if found.get("error"):
            facts["master_error"] = found["error"]
    return facts


def watch_own_exit(status_path):
    """Across hosts compat cannot see a rank's process (another host's /proc) nor, under hydra, its exit status: a small
    forked process waits for this rank to be gone (a pipe only this rank holds reaches EOF) and writes the time into
    <status>.gone beside the record, on the shared run folder. Forked first thing, before torch is imported."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(write_end)
            while os.read(read_end, 4096):
                pass
            gone = status_path[: -len(".json")] + ".gone"
            with open(gone + ".tmp", "w") as handle:
                handle.write(PROTOCOL.dumps(PROTOCOL.Gone(at=time.time())))
            os.replace(gone + ".tmp", gone)
        finally:
            os._exit(0)
    os.close(read_end)
    return write_end  # kept open (and out of exec'd children: pipes are close-on-exec) until this rank ends


def die_with_parent():
    """SIGKILL this rank when its parent (compat, torchrun's agent, MPI's proxy) dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def self_deadline(deadline):
    """Whatever happens to compat, a rank does not outlive the run's hard limit (plus compat's own cleanup time).
    SIGALRM with the default action: the kernel ends the process even if it is stuck in C holding the GIL."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(deadline - time.time()) + 1))


def process_start(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[19].decode()
    except (OSError, IndexError):
        return None


def watch_compat(spec):
    """End this rank soon after compat is gone (SIGKILL, OOM) even when a launcher sits between them (Intel's mpirun
    is a shell script, so PR_SET_PDEATHSIG reaches only it). Only on compat's own host."""
    import threading

    host, _, rest = spec.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != os.uname()[1] or not pid_text.isdigit():
        return
    pid = int(pid_text)

    def watch():
        while process_start(pid) == start:
            time.sleep(1.0)
        sys.stderr.write("compat-live: compat (pid %d) is gone; this rank ends itself\n" % pid)
        sys.stderr.flush()
        os._exit(125)

    thread = threading.Thread(target=watch, name="compat-live-watch")
    thread.daemon = True
    thread.start()


def main():
    args = worker_parser().parse_args()
    rank = start_rank(args)
    stage("start")
    try:
        run_rank(args, rank)
    except SystemExit as exc:
        if "error" not in STATUS:  # not one of ours (those record their error first): something called exit() mid-stage
            save(error={"type": "SystemExit", "message": "exit(%r) was called at stage %s" % (exc.code, STATUS.get("stage")), "traceback": traceback.format_exc()[-6000:]})
        raise
    except BaseException as exc:
        save(error={"type": exc.__class__.__name__, "message": str(exc)[:2000], "traceback": traceback.format_exc()[-6000:]})
        traceback.print_exc()
        sys.stderr.flush()
        raise SystemExit(1) from None


def worker_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--expect-world", type=int, required=True)
    parser.add_argument("--backend", choices=["auto", "ccl", "gloo"], default="auto")
    parser.add_argument("--map-mpi", action="store_true")
    parser.add_argument("--rank-variables", type=json.loads, default=[], help="JSON: the launcher's [rank, world size, local rank] names")
    parser.add_argument("--init-timeout", type=float, default=30.0)
    parser.add_argument("--sizes-mib", default="1,16,64")
    parser.add_argument("--fabric", action="store_true", help="sweep every collective over sizes (compat doctor --live --fabric)")
    parser.add_argument("--fabric-sizes", default="", help="comma-separated bytes (default: 1 KiB up by powers of 4 to --fabric-max)")
    parser.add_argument("--fabric-max", type=int, default=16 << 20, help="the largest size in bytes, further bounded by memory")
    parser.add_argument("--fabric-pairs", default="", help="JSON file: the rounds of host pairs compat scheduled (runs across hosts)")
    parser.add_argument("--fabric-deadline", type=float, default=0.0, help="seconds the pairs and the sweep may take in all (0: no bound)")
    parser.add_argument("--ipex", action="store_true")
    parser.add_argument("--ipex-mode", choices=["none", "trainer", "direct"], default="none")
    parser.add_argument("--trainer", action="store_true")
    parser.add_argument("--trainer-flags", default="{}")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: the rank ends itself after this")
    parser.add_argument("--watch", default="", help="HOST:PID:STARTTIME of compat: the rank ends itself when it is gone")
    parser.add_argument("--watch-exit", action="store_true", help="write <record>.gone when this rank ends (runs across hosts)")
    return parser


def start_rank(args):
    """Before the first stage: the protocol, the watchers that end this rank, its status and log files (stdout and
    stderr go to the log), stack dumps on SIGUSR1, and the rank variables in its status. The rank (None: no group)."""
    global _STATUS_PATH, PROTOCOL
    PROTOCOL = load_protocol()
    die_with_parent()
    if args.deadline:
        self_deadline(args.deadline)
    if args.watch:
        watch_compat(args.watch)
    pid = os.getpid()
    host = os.uname()[1]
    _STATUS_PATH = os.path.join(args.run_dir, "proc-%s-%d.json" % (host, pid))
    if args.watch_exit:
        watch_own_exit(_STATUS_PATH)
    log = os.open(os.path.join(args.run_dir, "proc-%s-%d.log" % (host, pid)), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    STATUS.update({"protocol": PROTOCOL.PROTOCOL_VERSION, "pid": pid, "started": time.time(), "host": host, "python": sys.version.split()[0]})
    rank, world, local, source = rank_variables(args.map_mpi, args.rank_variables)
    STATUS.update({"rank": rank, "world_size_env": world, "local_rank": local, "rank_source": source,
                   "master": "%s:%s" % (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))})
    return rank


def run_rank(args, rank):
    """Every stage of this rank, in order: imports, backend, the group and its checks, the Trainer step, shutdown."""
    save(network=network_facts())
    stage("import:torch")
    imports = import_stack(args)
    import torch
    import torch.distributed as dist

    if imports.get("ipex") and not imports["ipex"]["ok"]:
        save(error={"type": "ImportError", "message": imports["ipex"]["error"], "traceback": ""})
        raise SystemExit(4)
    backend, why = choose_backend(args, imports)
    save(backend=backend, backend_reason=why)
    stage("backend")
    if backend is None:
        save(error={"type": "BackendUnavailable", "message": why, "traceback": ""})
        raise SystemExit(5)
    count_groups(dist)
    prepared = None
    if rank is not None:
        prepared = group_stages(args, torch, dist, rank, backend)
    else:
        save(world_size=None)
    if args.trainer:
        stage("trainer")
        fixture_fault(rank, "trainer")
        if prepared is None:
            prepared = prepare_trainer(args, torch, backend, grouped=rank is not None)
        run_trainer(args, torch, prepared)
        prepared = None
    if dist.is_available() and dist.is_initialized():
        stage("shutdown")
        dist.barrier()
        dist.destroy_process_group()
    stage("done")


def group_stages(args, torch, dist, rank, backend):
    """Form the process group, then its checks: allreduce, bandwidth (or the --fabric stages), memory copy. The
    Trainer's prepared step when the Trainer formed the group (else None)."""
    fixture_fault(rank, "before-init")
    stage("init")
    import datetime

    # ONE process group per process, as in a training script: compat forms it and the Trainer (accelerate's
    # PartialState) adopts it; a transformers that forms its own unconditionally forms it here instead, and the
    # collectives below run on that one. Never destroyed and formed again: oneCCL's MPI transport does not
    # survive a second initialisation in one process.
    prepared = None
    if args.trainer and transformers_makes_group():
        prepared = prepare_trainer(args, torch, backend, grouped=True, in_init=True)
    else:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.init_timeout))
    save(world_size=dist.get_world_size(), group_rank=dist.get_rank(), group_backend=str(dist.get_backend()),
         group_made_by="trainer" if prepared is not None else "compat")
    stage("joined")
    fixture_fault(rank, "before-collective")
    stage("allreduce")
    save(allreduce=allreduce_checks(dist, torch, dist.get_world_size()))
    stage("bandwidth")
    sizes = [int(s) for s in args.sizes_mib.split(",") if s]
    if not args.fabric:  # the sweep measures all_reduce (and the rest) at its own sizes instead
        save(bandwidth=bandwidth(dist, torch, dist.get_world_size(), sizes))
    memcpy = memcpy_bandwidth(dist, torch)
    save(memcpy=memcpy)
    fabric_stages(args, torch, dist, memcpy)
    dist.barrier()
    return prepared


def fabric_stages(args, torch, dist, memcpy):
    """--fabric-pairs and --fabric: the pairs of hosts, then the sweep and its comparison with the other backends,
    on one clock under --fabric-deadline."""
    clock = FabricClock(dist, torch, args.fabric_deadline) if args.fabric and args.fabric_deadline else None
    pairs = None
    if args.fabric_pairs:
        stage("pairs")
        pairs = fabric_pairs(dist, torch, dist.get_rank(), dist.get_world_size(), args.fabric_pairs, memcpy, clock)
    if not args.fabric:
        return
    stage("fabric")
    wanted = fabric_sizes(args)
    main_backend = str(dist.get_backend())
    others = comparison_backends(dist, torch, main_backend)
    link, budget = sweep_budget(clock, pairs, others)
    rate = (memcpy or {}).get("per_rank") if link is None else None
    fabric_sweep(dist, torch, dist.get_rank(), dist.get_world_size(), wanted, max(args.fabric_max, max(wanted)),
                 clock=clock, budget=budget, link=link, rate=rate)
    fabric_compare(dist, torch, dist.get_rank(), dist.get_world_size(), wanted, max(args.fabric_max, max(wanted)), main_backend,
                   names=others, clock=clock, link=link)


def fabric_sizes(args):
    """The sweep's sizes in bytes: --fabric-sizes, else 1 KiB up by powers of 4 to --fabric-max."""
    wanted = [int(s) for s in args.fabric_sizes.split(",") if s]
    if wanted:
        return wanted
    size = 1024
    while size <= args.fabric_max:
        wanted.append(size)
        size *= 4
    return wanted


def sweep_budget(clock, pairs, others):
    """(the slowest link the pairs measured, named by its hosts, the seconds the sweep may take) under
    --fabric-deadline; (None, None) without one."""
    if clock is None:
        return None, None
    core = plan_core()
    found = core.slowest_link((pairs or {}).get("links") or []) if core is not None else None
    link = (pairs["hosts"][found[0]], pairs["hosts"][found[1]], found[2]) if found is not None else None  # every rank has the same table
    return link, max(0.0, clock.deadline - clock.agree()) * SWEEP_MARGIN / (1 + len(others))


if __name__ == "__main__":
    main()
