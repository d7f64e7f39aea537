"""Import the stack in a child process with a timeout, and classify how it ended.

The doctor never imports torch, IPEX or the bindings itself: a broken stack can abort, hang or
hit an illegal instruction, and the doctor has to survive that to report it.

One probe child imports the parts in the order a training script does (torch, then IPEX, then the oneCCL bindings;
only the installed parts whose checks run), so torch is imported once. Before each part it writes the part's name
("started") into its answer file, after it the answers of every part done so far. How the child ended is charged to
the part in progress (the first part without an answer); the parts before it pass on their answers. The parts after
it were not tried: after torch they cannot be (each needs torch: they fail, naming torch's failure); after another
part each is imported again in a child of its own (torch, then that part), so a crashing IPEX does not hide the
bindings' state. A child that ended badly after every part had answered (it hung or crashed at exit) cannot be
charged to one part: torch is imported alone first; when that child ends badly too, it is torch's ending and the
other parts are not tried; otherwise the other part (or each of them, in a child of its own) is charged.

Output: before each part the child writes a marker line, with a random token compat passes on the command line, to
stdout and stderr; a part's ending is classified, and quoted, from what the child wrote after that part's marker
only, so a warning an earlier part printed is not taken for the later part's error. run_child keeps the last
OUTPUT_LIMIT bytes of each stream, and the findings quote at most a few hundred characters of it.

Timeouts: each part may take ``--import-timeout`` seconds from the moment it starts (torch's clock starts with the
child, interpreter start-up included), watched through the answer file; the child as a whole gets that much per part
(and a second), so one slow part cannot borrow another's time and a hang is charged to the part that hangs.
Side effects: child processes (environment/child.py: own process group, die with compat, killed as a group), a
private temp folder per child.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Optional

from ..environment.child import MAX_TIMEOUT_S, ChildResult, run_child
from ..errors import shown
from ..findings import Finding, Status
from ..matrix.model import COMPONENTS, Component, ComponentInfo
from ..record import Record
from .crash import Verdict, classify
from .packages import CCL_NAMES, IPEX_NAMES
from .registry import COMPANION_RECORDS, Context, check, import_check_id

# Every probe starts like this: `python -c` puts the working directory ('') first on sys.path, so a torch.py or
# json.py waiting there would be imported instead of the real module. The probe also runs in a private, empty
# folder; it drops '' (and that folder) from sys.path before importing anything else. No -I/-P: PYTHONPATH, the
# user site and .pth files are part of the environment being checked (and -P needs 3.11).
# The answer goes into the file named by the first argument (written whole, then renamed), never to stdout, which
# a sitecustomize, an atexit hook or the package itself may write anything to. The arguments are taken (and removed
# from sys.argv) before anything is imported: a package that rewrites sys.argv cannot break the probe.
PRELUDE = """
import sys, os
_argv = sys.argv[1:]
del sys.argv[1:]
_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _here]
del _here
import json

def _answer(data):
    with open(_argv[0] + ".part", "w") as handle:
        json.dump(data, handle)
    os.rename(_argv[0] + ".part", _argv[0])
"""

# The command line: the answer file, the marker token, then the parts as PART=MODULE, in order (python 3.6+, stdlib
# only). Before each part the marker line goes to stdout and stderr, after what was written so far (Python's buffers
# and C stdio's): the output after it is that part's.
PROBE_CODE = PRELUDE + """
import importlib
try:
    import ctypes
    _fflush = ctypes.CDLL(None).fflush
except Exception:
    _fflush = None

def _mark(name):
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    if _fflush is not None:
        try:
            _fflush(None)
        except Exception:
            pass
    line = ("\\n[compat-import-probe " + _argv[1] + ": " + name + " starts]\\n").encode()
    for fd in (1, 2):
        try:
            os.write(fd, line)
        except OSError:
            pass

def _torch(module):
    torch = importlib.import_module(module)
    return {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "debug": bool(getattr(torch.version, "debug", False))}

def _ipex(module):
    import torch
    ipex = importlib.import_module(module)
    return {"version": getattr(ipex, "__version__", "?"), "torch": torch.__version__}

def _ccl(module):
    import torch
    import torch.distributed as dist
    bindings = importlib.import_module(module)
    registered = None
    try:
        registered = bool(dist.is_backend_available("ccl"))
    except Exception:
        backend = getattr(dist, "Backend", None)
        registered = "ccl" in getattr(backend, "backend_list", []) or "ccl" in getattr(backend, "_plugins", {})
    return {"registered": registered, "cwd": getattr(bindings, "cwd", None), "torch": torch.__version__}

def _companion(module):
    import torch
    companion = importlib.import_module(module)
    return {"version": getattr(companion, "__version__", "?"), "torch": torch.__version__}

_done = {}
for _spec in _argv[2:]:
    _name, _module = _spec.split("=", 1)
    _mark(_name)
    _answer({"parts": _done, "started": _name})
    _done[_name] = {"torch": _torch, "ipex": _ipex, "ccl": _ccl}.get(_name, _companion)(_module)
    _answer({"parts": _done, "started": None})
"""
ANSWER_LIMIT = 1 << 20  # bytes; a real answer is under 1 kB
QUOTE_LIMIT = 300  # characters of one line of the child's output quoted in a finding


def marker(token: str, part: str) -> str:
    """The line the probe writes to stdout and stderr before it imports ``part``."""
    return f"[compat-import-probe {token}: {part} starts]"


class Part(Record):
    name: str  # torch, ipex, ccl: the key of its answer
    module: str  # the module imported


TORCH = Part("torch", "torch")
COMPANIONS = tuple(info.module for info in COMPANION_RECORDS)  # imported by name; their native extensions load with the import


class ImportResult(Record):
    """How importing one part went."""

    verdict: Verdict
    data: Optional[dict[str, Any]]
    stderr: str
    returncode: Optional[int]


class ProbeRun(Record):
    """One probe child: the answers of the parts it finished and how it ended (``ended`` None: it could not start)."""

    parts: tuple[Part, ...]
    answers: dict[str, dict[str, Any]]
    ended: Optional[ChildResult]
    error: str = ""  # why it could not start
    token: str = ""  # the token of its marker lines ("": none, all its output is the charged part's)

    @property
    def charged(self) -> Optional[Part]:
        """The part in progress when the child ended: the first without an answer (None: every part answered)."""
        return next((p for p in self.parts if p.name not in self.answers), None)

    @property
    def ended_badly(self) -> bool:
        return self.ended is not None and (self.ended.returncode != 0 or self.ended.timed_out)

    def output_of(self, part: Part, text: str, dropped: bool = False) -> str:
        """What the child wrote to one stream (``text``) since ``part`` started: after its marker. Without its marker
        (and any other): all of it for the first part (only the interpreter's start came before it) and when the
        earlier output, markers and all, was ``dropped`` (run_child keeps the last OUTPUT_LIMIT bytes); otherwise
        nothing (the child ended between two parts). Never what an earlier part wrote before this part's marker."""
        if not self.token:
            return text
        mark = marker(self.token, part.name)
        at = text.find(mark)
        if at >= 0:
            return text[at + len(mark):]
        unmarked = not any(marker(self.token, p.name) in text for p in self.parts)
        return text if unmarked and (dropped or part == self.parts[0]) else ""


def run_probe(python: str, parts: Sequence[Part], timeout: float) -> ProbeRun:
    """Import ``parts`` (torch first) in order in ONE child of ``python``, in its own process group (dies with compat),
    from a private empty folder that is removed afterwards; the whole group, and what it started in other sessions,
    is killed when a part takes more than ``timeout`` seconds, on Ctrl-C and on SIGTERM (which then ends compat with
    143). The answers are read from a file in that folder."""
    parts = tuple(parts)
    folder = tempfile.mkdtemp(prefix="compat-import-")  # mode 0700: nobody else can plant a module in it
    try:
        answer = os.path.join(folder, "answer.json")
        clock = _PartClock(answer, [p.name for p in parts], timeout)
        total = min(len(parts) * timeout + 1.0, MAX_TIMEOUT_S)
        token = os.urandom(16).hex()  # a package cannot print another part's marker ahead of time (os.urandom: secrets would pull hashlib into every start)
        argv = [python, "-c", PROBE_CODE, answer, token, *(f"{p.name}={p.module}" for p in parts)]
        try:
            ended = run_child(argv, total, env=dict(os.environ, PYTHONFAULTHANDLER="1"), cwd=folder, overdue=clock.overdue)
        except OSError as exc:
            return ProbeRun(parts, {}, None, f"{python} cannot be run ({exc.strerror})")
        data = _read_answer(answer) or {}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    answers = data.get("parts") if isinstance(data.get("parts"), dict) else {}
    return ProbeRun(parts, {p.name: answers[p.name] for p in parts if isinstance(answers.get(p.name), dict)}, ended, token=token)


class _PartClock:
    """Each part's own time limit, from the "started" marker in the answer file (read while the child runs). The clock
    only moves on to a later part: whatever the child writes there, the child as a whole keeps its total limit."""

    def __init__(self, path: str, parts: Sequence[str], timeout: float) -> None:
        self.path, self.parts, self.timeout = path, list(parts), timeout
        self.current = 0
        self.since = time.monotonic()  # the first part's clock starts with the child

    def overdue(self) -> bool:
        started = (_read_answer(self.path) or {}).get("started")
        if started in self.parts[self.current + 1:]:
            self.current, self.since = self.parts.index(started), time.monotonic()
        return time.monotonic() - self.since > self.timeout


def _read_answer(path: str) -> Optional[dict[str, Any]]:
    """The JSON object the probe wrote, or None (no file: it did not get that far; not a regular file: not an answer).
    Opened without blocking or following a link: the child, which runs code of the environment, could put anything there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = json.loads(handle.read(ANSWER_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def part_results(run: ProbeRun, timeout: float) -> dict[str, Optional[ImportResult]]:
    """Each part's result from one probe child; None for a part after the one the ending is charged to (not tried)."""
    if run.ended is None:
        return {p.name: ImportResult(Verdict("error", f"importing {p.module} could not start: {run.error}", (), "Pass a working interpreter with --python."),
                                     None, "", None) for p in run.parts}
    ended = run.ended
    charged = run.charged or run.parts[-1]  # every part answered but the child ended badly: the last one (one part per child)
    results: dict[str, Optional[ImportResult]] = {}
    for part in run.parts:
        if part.name in run.answers and part is not charged:
            results[part.name] = ImportResult(Verdict("ok", f"{part.module} imports"), run.answers[part.name], "", ended.returncode)
        elif part is charged:
            stdout = run.output_of(part, ended.stdout.decode(errors="replace"), ended.stdout_dropped > 0)
            stderr = run.output_of(part, ended.stderr.decode(errors="replace"), ended.stderr_dropped > 0)
            data = run.answers.get(part.name)
            verdict = classify(ended.returncode, stdout, stderr, ended.timed_out, part.module, timeout, at_exit=data is not None)
            if verdict.ok and data is None:  # exited 0 without reaching the end of the probe
                said = shown(stderr.strip().splitlines()[-1], QUOTE_LIMIT) if stderr.strip() else f"exit status 0, no answer from the probe for {part.module}"
                verdict = Verdict("error", f"importing {part.module} ended early (exit 0 before the probe finished)", (said,),
                                  f"Something imported with {part.module} (the package, a .pth file or sitecustomize) ends the interpreter "
                                  f"with sys.exit() or os._exit(): python -v -c 'import {part.module}' 2>&1 | tail shows the last import before it stops.")
            results[part.name] = ImportResult(verdict, data, stderr, ended.returncode)
        else:
            results[part.name] = None
    return results


def probe_stack(python: str, parts: Sequence[Part], timeout: float) -> dict[str, ImportResult]:
    """Every part's result, torch imported once when all goes well (see the module's docstring for the rest)."""
    parts = tuple(parts)
    run = run_probe(python, parts, timeout)
    if run.charged is None and len(parts) > 1 and run.ended_badly:
        return _bad_exit(python, run, timeout)
    results = part_results(run, timeout)
    torch = results[TORCH.name]
    done: dict[str, ImportResult] = {}
    for part in parts:
        result = results[part.name]
        if result is None:  # not tried: after torch failed it cannot be, after another part it is tried alone
            result = _torch_failed(part, torch) if torch is not None and not torch.verdict.ok else _alone(python, part, timeout)
        done[part.name] = result
    return done


def _bad_exit(python: str, run: ProbeRun, timeout: float) -> dict[str, ImportResult]:
    """Every part answered, then the child hung or crashed at exit: whose ending is it? torch's when torch alone ends
    so too (the other parts are then not tried, as after any failure of torch); otherwise the one other part's, or,
    with two, each one's in a child of its own (torch, then the part). Each of those parts that ends well alone is
    not charged, unless all do: then the ending comes with them together, and is the last part's."""
    torch = _alone(python, TORCH, timeout)
    others = [part for part in run.parts if part != TORCH]
    if not torch.verdict.ok:
        return {TORCH.name: torch, **{part.name: _torch_failed(part, torch) for part in others}}
    together = part_results(run, timeout)  # charged to the last part
    if len(others) == 1:
        alone = {others[0].name: together[others[0].name]}
    else:
        alone = {part.name: _alone(python, part, timeout) for part in others}
        if all(result is not None and result.verdict.ok for result in alone.values()):
            last = together[others[-1].name]
            if last is not None:
                verdict = last.verdict
                together_with = ", ".join(part.module for part in others[:-1])
                note = f"each part imported alone exits cleanly; after {together_with} it does not"
                alone[others[-1].name] = ImportResult(Verdict(verdict.kind, verdict.summary, (note, *verdict.detail), verdict.fix), last.data, last.stderr, last.returncode)
    return {TORCH.name: torch, **{name: result for name, result in alone.items() if result is not None}}


def _alone(python: str, part: Part, timeout: float) -> ImportResult:
    """``part`` in a child of its own (torch, then the part): that child's ending is the part's."""
    results = part_results(run_probe(python, (TORCH,) if part == TORCH else (TORCH, part), timeout), timeout)
    return results[part.name] or _torch_failed(part, results[TORCH.name])


def _torch_failed(part: Part, torch: Optional[ImportResult]) -> ImportResult:
    """A part that was not tried because importing torch, which it needs, failed first: a failure naming torch's."""
    if torch is None:  # cannot happen: a part is only left untried after another part's (here: torch's) ending
        return ImportResult(Verdict("error", f"importing {part.module} was not tried"), None, "", None)
    cause = torch.verdict
    return ImportResult(Verdict("not-tried", f"{part.module} was not tried: torch, which it imports first, fails ({cause.summary})", cause.detail,
                                "Fix torch first: compat doctor --only imports.torch shows why it fails; then this check can run."),
                        None, "", torch.returncode)  # torch's finding quotes its output


def _parts(ctx: Context) -> list[Part]:
    """What the probe imports: torch, then each installed part whose check runs, in a training script's order."""

    def wanted(cid: str) -> bool:
        return not ctx.selected or cid in ctx.selected

    parts = [TORCH]
    ipex, ccl = _ipex_module(ctx), _ccl_module(ctx)
    if ipex and wanted("imports.ipex"):
        parts.append(Part("ipex", ipex))
    if ccl and wanted("imports.ccl"):
        parts.append(Part("ccl", ccl))
    for info in COMPANION_RECORDS:  # after the Intel parts: a companion that fails does not send them to children of their own
        if ctx.snapshot.get(info.distribution) is not None and wanted(import_check_id(info)):
            parts.append(Part(info.module, info.module))
    return parts


COMBINED = "imports:combined"  # the context's cache key of the one probe the import checks share


def shared_parts(ctx: Context) -> tuple[Part, ...]:
    """What the one shared probe imports for ``ctx`` (compat install starts it beside its environment probe, then
    hands its results to the checks under COMBINED only when the installed set asks for exactly these parts)."""
    return tuple(_parts(ctx))


def _imports(ctx: Context, part: Part) -> ImportResult:
    """The part's result from the one probe every import check shares (a part outside it: a child of its own)."""
    python, timeout = ctx.snapshot.executable, ctx.options.import_timeout
    results = ctx.once(COMBINED, lambda: probe_stack(python, _parts(ctx), timeout))
    if part.name in results:
        return results[part.name]
    return ctx.once(f"imports:{part.name}", lambda: _alone(python, part, timeout))


def _ipex_module(ctx: Context) -> Optional[str]:
    dist = ctx.snapshot.get(*IPEX_NAMES)
    if dist is None:
        return None
    release = ctx.matrix.ipex_release(dist.public_version) if dist.public_version else None
    return release.module if release else COMPONENTS[Component.IPEX].module


def _ccl_module(ctx: Context) -> Optional[str]:
    dist = ctx.snapshot.get(*CCL_NAMES)
    if dist is None:
        return None
    release = ctx.matrix.ccl_release(dist.public_version) if dist.public_version else None
    modules = COMPONENTS[Component.CCL].modules  # its module, then the one releases before 1.12 were imported as
    return release.module if release else next((m for m in modules[:-1] if m in ctx.snapshot.modules), modules[-1])


def _finding(cid: str, result: ImportResult, ok_summary: str, ctx: Optional[Context] = None) -> Finding:
    verdict = result.verdict
    if ctx is not None:
        from .oneccl_env import env_command

        verdict = verdict.naming(env_command(ctx))
    if verdict.ok:
        return Finding(cid, Status.PASS, ok_summary)
    tail = result.stderr.strip()[-400:]  # the child's output is cut to run_child's OUTPUT_LIMIT; a finding quotes less
    evidence = tuple(shown(d, QUOTE_LIMIT) for d in verdict.detail if d) + ((f"stderr: {tail}",) if tail else ())
    return Finding(cid, Status.FAIL, verdict.summary, evidence, verdict.fix)


@check("imports.torch", "torch imports in a child process", static=False)
def import_torch(ctx: Context) -> Finding:
    cid = "imports.torch"
    if ctx.snapshot.get("torch") is None:
        return Finding(cid, Status.SKIP, "torch is not installed")
    result = _imports(ctx, TORCH)
    data = result.data or {}
    return _finding(cid, result, f"torch {data.get('version')} imports" + (f" (CUDA {data['cuda']} build)" if data.get("cuda") else ""), ctx)


@check("imports.ipex", "intel_extension_for_pytorch imports in a child process", static=False)
def import_ipex(ctx: Context) -> Finding:
    cid = "imports.ipex"
    module = _ipex_module(ctx)
    if module is None:
        return Finding(cid, Status.SKIP, "intel-extension-for-pytorch is not installed")
    result = _imports(ctx, Part("ipex", module))
    data = result.data or {}
    return _finding(cid, result, f"{module} {data.get('version')} imports with torch {data.get('torch')}", ctx)


@check("imports.ccl", "the oneCCL bindings import and register the ccl backend", static=False)
def import_ccl(ctx: Context) -> Finding:
    cid = "imports.ccl"
    module = _ccl_module(ctx)
    if module is None:
        return Finding(cid, Status.SKIP, "oneccl_bind_pt is not installed")
    result = _imports(ctx, Part("ccl", module))
    finding = _finding(cid, result, f"{module} imports and registers the ccl backend", ctx)
    if finding.status is Status.PASS and not (result.data or {}).get("registered"):
        return Finding(cid, Status.FAIL, f"{module} imports but the ccl backend is not registered",
                       (f"torch.distributed.is_backend_available('ccl') is False after import {module}",),
                       "Reinstall the oneccl_bind_pt built for this torch (compat check shows it).")
    return finding


def _import_companion(ctx: Context, info: ComponentInfo) -> Finding:
    """A companion's generated check (imports.<module>, made from its record below): its import in the shared child."""
    name = info.module
    cid = import_check_id(info)
    if ctx.snapshot.get(info.distribution) is None:
        return Finding(cid, Status.SKIP, f"{name} is not installed")
    result = _imports(ctx, Part(name, name))
    data = result.data or {}
    finding = _finding(cid, result, f"{name} {data.get('version')} imports with torch {data.get('torch')}")
    if finding.status is Status.FAIL:
        import re

        from ..environment.extensions import device_of

        said = " ".join((finding.summary, *finding.evidence, result.stderr[-2000:]))
        device = next((library for library in re.findall(r"lib[\w+-]+\.so[.0-9]*", said) if device_of(library.rstrip(".")) is not None), None)
        if device is not None:  # a device build next to a torch without that device: the build is wrong, not the search path
            return Finding(cid, finding.status, finding.summary, finding.evidence,
                           f"{name} is a build for another device than the installed torch ({device.rstrip('.')}): compat check --only packages.extension-build "
                           "names its file, the library and the build that fits.")
    return finding


def _register_companion(info: ComponentInfo) -> None:
    """imports.<module> for one companion record (checks/registry.COMPANION_RECORDS lists the ids)."""

    def import_companion(ctx: Context) -> Finding:
        return _import_companion(ctx, info)

    check(import_check_id(info), f"{info.label} imports (its native extension loads) in a child process", static=False)(import_companion)


for _record in COMPANION_RECORDS:
    _register_companion(_record)
