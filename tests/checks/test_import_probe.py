"""The import probe (checks/imports.py): one child imports torch, IPEX and the bindings in turn, torch once; how it ended
is charged to the part in progress, the parts after it are tried alone (or, after torch, not at all).

FIXTURE environments (tests/fixture_envs.py) whose torch, IPEX and bindings append "<part> <pid>" to a log file at
import, so the tests see from outside which process imported what, and how often. Processes are checked through /proc
(tests/procs.py); every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compatmatrix.checks.crash import Verdict
from compatmatrix.checks.imports import TORCH, Part, ProbeRun, marker, part_results
from compatmatrix.environment.child import ChildResult

from ..fixture_envs import FixtureEnv
from ..procs import MARK_VARIABLE, cmdline, kill_marked, marked, new_mark
from .test_doctor import clean_environ, compat_json

IPEX, CCL = Part("ipex", "intel_extension_for_pytorch"), Part("ccl", "oneccl_bindings_for_pytorch")


def _logger(log: Path, part: str) -> str:
    return f"import os\nwith open({str(log)!r}, 'a') as _log:\n    _log.write('{part} ' + str(os.getpid()) + '\\n')\n"


def logged_env(tmp_path: Path, torch: str = "", ipex: str = "", ccl: str = "") -> tuple[FixtureEnv, Path]:
    """torch 2.7.0, IPEX 2.7.0 and the bindings 2.7.0, each logging its import; ``torch``/``ipex``/``ccl``: code run after
    the log line (a crash, a hang)."""
    log = tmp_path / "imports.log"
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").ipex("2.7.0").bindings("2.7.0")
    env.module("torch/__init__.py", _logger(log, "torch") + f"{torch}\n__version__ = '2.7.0'\nclass version:\n    cuda = None\nfrom . import distributed\n")
    env.module("intel_extension_for_pytorch/__init__.py", _logger(log, "ipex") + f"import torch\n{ipex}\n__version__ = '2.7.0+cpu'\n")
    env.module("oneccl_bindings_for_pytorch/__init__.py",
               _logger(log, "ccl") + f"import torch\n{ccl}\ncwd = os.path.dirname(os.path.abspath(__file__))\n"
               "torch.distributed.Backend.register_backend('ccl', None, devices=['cpu'])\n")
    return env, log


def imports_of(log: Path) -> list[tuple[str, str]]:
    """(part, pid) per import, in order."""
    return [tuple(line.split()) for line in log.read_text().splitlines()] if log.exists() else []


def pids(log: Path, part: str) -> list[str]:
    return [pid for name, pid in imports_of(log) if name == part]


# --- all goes well: one child ---------------------------------------------------------------------------------------


def test_one_child_imports_torch_once_then_ipex_then_the_bindings(tmp_path):
    env, log = logged_env(tmp_path)
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=0)
    assert checks["imports.torch"]["summary"] == "torch 2.7.0 imports"
    assert checks["imports.ipex"]["summary"] == "intel_extension_for_pytorch 2.7.0+cpu imports with torch 2.7.0"
    assert checks["imports.ccl"]["summary"] == "oneccl_bindings_for_pytorch imports and registers the ccl backend"
    seen = imports_of(log)
    assert [part for part, _ in seen] == ["torch", "ipex", "ccl"], seen  # torch once, in a training script's order
    assert len({pid for _, pid in seen}) == 1, seen  # one process


def test_torchvision_and_torchaudio_are_imported_after_the_intel_parts_in_the_same_child(tmp_path):
    """A FIXTURE torchaudio whose import fails as PyPI's CUDA build does next to a CPU torch (the OSError torch.ops.load_library
    raises): imports.torchaudio fails with it and points to packages.extension-build; torchvision, before it, passes."""
    env, log = logged_env(tmp_path)
    env.dist("torchvision", "0.22.0")
    env.module("torchvision/__init__.py", _logger(log, "torchvision") + "import torch\n__version__ = '0.22.0'\n")
    env.dist("torchaudio", "2.7.0")
    env.module("torchaudio/__init__.py", _logger(log, "torchaudio") + "import torch\nraise OSError('libc10_cuda.so: cannot open shared object file: No such file or directory')\n")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    assert checks["imports.torchvision"]["summary"] == "torchvision 0.22.0 imports with torch 2.7.0"
    assert checks["imports.torchaudio"]["status"] == "fail" and "libc10_cuda.so" in checks["imports.torchaudio"]["summary"]
    assert "packages.extension-build" in checks["imports.torchaudio"]["fix"]
    seen = imports_of(log)
    assert [part for part, _ in seen] == ["torch", "ipex", "ccl", "torchvision", "torchaudio"] and len({pid for _, pid in seen}) == 1, seen


def test_only_the_parts_whose_checks_run_are_imported(tmp_path):
    env, log = logged_env(tmp_path)
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ccl", code=0)
    assert checks["imports.ccl"]["status"] == "pass"
    assert [part for part, _ in imports_of(log)] == ["torch", "ccl"]


def test_install_verification_imports_torch_once(tmp_path):
    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.install.service import verify
    from compatmatrix.matrix import load_matrix

    env, log = logged_env(tmp_path)
    findings = {f.id: f for f in verify(load_matrix(), take_snapshot(str(env.python)))}
    assert all(findings[c].status.value == "pass" for c in ("imports.torch", "imports.ipex", "imports.ccl")), findings
    seen = imports_of(log)
    assert [part for part, _ in seen] == ["torch", "ipex", "ccl"] and len({pid for _, pid in seen}) == 1, seen


def test_each_part_has_its_own_time_limit(tmp_path):
    """torch and IPEX take 2.5 s each: more than the 4 s limit together, within it each."""
    env, log = logged_env(tmp_path, torch="import time\ntime.sleep(2.5)", ipex="import time\ntime.sleep(2.5)")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", "--import-timeout", "4", code=0)
    assert all(checks[c]["status"] == "pass" for c in ("imports.torch", "imports.ipex", "imports.ccl")), checks
    assert len(pids(log, "torch")) == 1


# --- a part that fails: charged to it; the parts after it tried alone --------------------------------------------------


def test_ipex_abort_fails_ipex_alone_and_the_bindings_are_still_tried(tmp_path):
    env, log = logged_env(tmp_path, ipex="os.abort()")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    assert checks["imports.torch"]["status"] == "pass" and checks["imports.torch"]["summary"] == "torch 2.7.0 imports"
    assert checks["imports.ipex"]["status"] == "fail"
    assert checks["imports.ipex"]["summary"] == "importing intel_extension_for_pytorch was killed by signal SIGABRT"
    assert checks["imports.ccl"]["status"] == "pass", checks["imports.ccl"]
    seen = imports_of(log)
    (ipex_pid,), (ccl_pid,) = pids(log, "ipex"), pids(log, "ccl")
    assert ccl_pid != ipex_pid and pids(log, "torch") == [ipex_pid, ccl_pid], seen  # the bindings in a child of their own


def test_a_crash_in_ipex_does_not_hide_the_bindings_own_crash(tmp_path):
    abort = ("import sys\nsys.stderr.write(\"terminate called after throwing an instance of 'c10::Error'\\n"
             "  what():  Mismatch in kernel C++ signatures\\n\")\nsys.stderr.flush()\nos.abort()")
    env, _ = logged_env(tmp_path, ipex="raise ImportError('undefined symbol: _ZN5torch3jit8tracer9ipex')", ccl=abort)
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    assert checks["imports.torch"]["status"] == "pass"
    assert checks["imports.ipex"]["summary"] == "importing intel_extension_for_pytorch failed: undefined symbol _ZN5torch3jit8tracer9ipex"
    assert checks["imports.ccl"]["summary"] == "importing oneccl_bindings_for_pytorch aborted: 'Mismatch in kernel C++ signatures' (killed by signal SIGABRT)"


def test_a_hang_is_charged_to_the_part_that_hangs_and_nothing_is_left(tmp_path):
    env, log = logged_env(tmp_path, ipex="import subprocess, time\nsubprocess.Popen(['sleep', '91'])\ntime.sleep(3600)")
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("doctor", env.python, "--only", "imports", "--import-timeout", "3", env={MARK_VARIABLE: mark}, code=1)
        assert time.monotonic() - started < 30
        assert checks["imports.torch"]["status"] == "pass"
        assert checks["imports.ipex"]["summary"] == "importing intel_extension_for_pytorch did not finish within 3 s"
        assert checks["imports.ccl"]["status"] == "pass", checks["imports.ccl"]
        assert marked(mark) == [], [cmdline(p) for p in marked(mark)]
        assert len(pids(log, "torch")) == 2 and len(pids(log, "ccl")) == 1
    finally:
        kill_marked(mark)


def test_a_crash_at_exit_is_charged_by_running_each_part_alone(tmp_path):
    """Every part answered, then the interpreter aborted at exit: torch alone exits cleanly, so each other part runs alone."""
    env, log = logged_env(tmp_path, ipex="import atexit\natexit.register(os.abort)")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    assert checks["imports.torch"]["status"] == "pass"
    assert checks["imports.ipex"]["summary"] == "intel_extension_for_pytorch imported, then the interpreter crashed at exit (killed by signal SIGABRT)"
    assert "atexit" in checks["imports.ipex"]["fix"]
    assert checks["imports.ccl"]["status"] == "pass"
    assert len(pids(log, "torch")) == 4 and len(pids(log, "ipex")) == 2 and len(pids(log, "ccl")) == 2  # all, torch, torch+ipex, torch+ccl


def test_a_crash_at_exit_after_torch_and_one_part_needs_no_run_of_that_part(tmp_path):
    """Two parts: torch alone exits cleanly, so the ending is the other part's."""
    env, log = logged_env(tmp_path, ccl="import atexit\natexit.register(os.abort)")
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ccl", code=1)
    assert checks["imports.ccl"]["summary"] == "oneccl_bindings_for_pytorch imported, then the interpreter crashed at exit (killed by signal SIGABRT)"
    assert len(pids(log, "torch")) == 2 and len(pids(log, "ccl")) == 1


def test_torch_aborting_at_exit_is_torch_s_and_the_others_are_not_tried(tmp_path):
    env, log = logged_env(tmp_path, torch="import atexit\natexit.register(os.abort)")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    summary = "torch imported, then the interpreter crashed at exit (killed by signal SIGABRT)"
    assert checks["imports.torch"]["summary"] == summary
    for cid, module in (("imports.ipex", "intel_extension_for_pytorch"), ("imports.ccl", "oneccl_bindings_for_pytorch")):
        assert checks[cid]["summary"] == f"{module} was not tried: torch, which it imports first, fails ({summary})"
        assert checks[cid]["fix"].startswith("Fix torch first: compat doctor --only imports.torch")  # stands alone, also under --skip imports.torch
    assert len(pids(log, "torch")) == 2 and len(pids(log, "ipex")) == 1 and len(pids(log, "ccl")) == 1  # all, then torch alone


def test_torch_hanging_at_exit_costs_two_waits_not_one_per_part(tmp_path):
    """torch starts a thread that is not a daemon: the interpreter never exits. One wait in the probe, one for torch alone."""
    env, log = logged_env(tmp_path, torch="import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()")
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("doctor", env.python, "--only", "imports", "--import-timeout", "4", env={MARK_VARIABLE: mark}, code=1)
        took = time.monotonic() - started
        summary = "torch imported, then the interpreter did not exit within 4 s"
        assert checks["imports.torch"]["summary"] == summary
        assert "dump_traceback_later" in checks["imports.torch"]["fix"]
        for cid, module in (("imports.ipex", "intel_extension_for_pytorch"), ("imports.ccl", "oneccl_bindings_for_pytorch")):
            assert checks[cid]["summary"] == f"{module} was not tried: torch, which it imports first, fails ({summary})"
        assert len(pids(log, "torch")) == 2 and len(pids(log, "ipex")) == 1 and len(pids(log, "ccl")) == 1
        assert took < 3.5 * 4 + 8, took  # two 4 s waits (+ start-up on a loaded machine); one per part would be 4 or more
        assert marked(mark) == []
    finally:
        kill_marked(mark)


# --- each part's ending is read from its own output --------------------------------------------------------------------


def test_a_warning_printed_by_ipex_is_not_blamed_on_the_bindings(tmp_path):
    """IPEX prints a harmless 'cannot open shared object file' warning; the bindings then abort: their finding says so."""
    warning = ("import sys\nsys.stderr.write('[W] intel_extension_for_pytorch: optional kernels off "
               "(libxsmm_ext.so.1: cannot open shared object file: No such file or directory)\\n')\nprint('libxsmm_ext.so.1: cannot open shared object file')")
    env, _ = logged_env(tmp_path, ipex=warning, ccl="os.abort()")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    assert checks["imports.torch"]["status"] == "pass" and checks["imports.ipex"]["status"] == "pass"
    ccl = checks["imports.ccl"]
    assert ccl["summary"] == "importing oneccl_bindings_for_pytorch was killed by signal SIGABRT"
    assert "libxsmm" not in " ".join(ccl["evidence"]) + ccl["fix"], ccl


def test_a_package_that_rewrites_sys_argv_does_not_break_the_probe(tmp_path):
    env, _ = logged_env(tmp_path, torch="import sys\nsys.argv[:] = ['x']")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=0)
    assert all(checks[c]["status"] == "pass" for c in ("imports.torch", "imports.ipex", "imports.ccl")), checks


def test_a_package_flooding_its_output_then_hanging_gives_a_small_finding(tmp_path):
    flood = "import sys, time\nchunk = 'x' * (4 << 20)\nwhile True:\n    sys.stdout.write(chunk); sys.stderr.write(chunk); time.sleep(0.05)"
    env, _ = logged_env(tmp_path, ipex=flood)
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "doctor", "--json", "--python", str(env.python), "--only", "imports",
                           "--import-timeout", "3"], capture_output=True, timeout=120, env=clean_environ(), check=False)
    assert done.returncode == 1 and len(done.stdout) < 20_000, len(done.stdout)
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["imports.ipex"]["summary"] == "importing intel_extension_for_pytorch did not finish within 3 s"
    assert all(len(e) <= 420 for e in checks["imports.ipex"]["evidence"]), checks["imports.ipex"]
    assert checks["imports.ccl"]["status"] == "pass"


# --- torch fails: nothing after it can pass ---------------------------------------------------------------------------


@pytest.mark.parametrize("broken, summary", [
    ("raise ImportError('libtorch_cpu.so: cannot open shared object file: No such file or directory')", "importing torch failed: libtorch_cpu.so cannot be found"),
    ("import time\ntime.sleep(3600)", "importing torch did not finish within 3 s"),
], ids=["error", "hang"])
def test_when_torch_fails_the_other_parts_never_pass(tmp_path, broken, summary):
    env, log = logged_env(tmp_path, torch=broken)
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("doctor", env.python, "--only", "imports", "--import-timeout", "3", env={MARK_VARIABLE: mark}, code=1)
        assert time.monotonic() - started < 20  # one wait for a hanging torch, not one per part
        assert checks["imports.torch"]["summary"] == summary
        for cid, module in (("imports.ipex", "intel_extension_for_pytorch"), ("imports.ccl", "oneccl_bindings_for_pytorch")):
            assert checks[cid]["status"] == "fail"
            assert checks[cid]["summary"] == f"{module} was not tried: torch, which it imports first, fails ({summary})"
        assert len(pids(log, "torch")) == 1 and not pids(log, "ipex") and not pids(log, "ccl")
        assert marked(mark) == []
    finally:
        kill_marked(mark)


# --- the charging rule, on recorded endings --------------------------------------------------------------------------------


def _run(answers, returncode, stderr=b"", timed_out=False, parts=(TORCH, IPEX, CCL), token="", stdout=b""):
    return ProbeRun(tuple(parts), answers, ChildResult(returncode, stdout, stderr, timed_out), token=token)


TORCH_ANSWER = {"version": "2.7.0", "cuda": None, "debug": False}


def test_the_ending_is_charged_to_the_first_part_without_an_answer():
    results = part_results(_run({"torch": TORCH_ANSWER}, -6), 5.0)
    assert results["torch"] is not None and results["torch"].verdict.ok and results["torch"].data == TORCH_ANSWER
    assert results["ipex"] is not None and results["ipex"].verdict.summary == "importing intel_extension_for_pytorch was killed by signal SIGABRT"
    assert results["ccl"] is None  # not tried


def test_a_timeout_names_the_part_and_its_own_limit():
    results = part_results(_run({"torch": TORCH_ANSWER, "ipex": {"version": "2.7.0+cpu"}}, None, timed_out=True), 7.0)
    assert [results[p].verdict.ok for p in ("torch", "ipex")] == [True, True]
    assert results["ccl"] is not None and results["ccl"].verdict == Verdict(
        "hang", "importing oneccl_bindings_for_pytorch did not finish within 7 s", ("no exit status (killed after the timeout)", "no output"),
        results["ccl"].verdict.fix)


def test_exit_0_before_a_part_answered_is_that_part_ending_early():
    results = part_results(_run({"torch": TORCH_ANSWER}, 0), 5.0)
    assert results["ipex"] is not None and "ended early" in results["ipex"].verdict.summary
    assert "sys.exit" in results["ipex"].verdict.fix and "import intel_extension_for_pytorch" in results["ipex"].verdict.fix
    assert results["ipex"].verdict.detail and all(results["ipex"].verdict.detail)  # something to show
    assert results["ccl"] is None


def _marked(token, *chunks):
    """Output with the probe's marker before each part: chunks alternate part name and what it printed."""
    return "".join(f"\n{marker(token, name)}\n{text}" for name, text in zip(chunks[::2], chunks[1::2])).encode()


def test_only_the_output_after_the_charged_part_marker_is_classified():
    token = "0123456789abcdef"
    stderr = _marked(token, "torch", "", "ipex", "libxsmm_ext.so.1: cannot open shared object file\n", "ccl", "Fatal Python error: Aborted\n")
    results = part_results(_run({"torch": TORCH_ANSWER, "ipex": {}}, -6, stderr, token=token, stdout=stderr), 5.0)
    assert results["ccl"] is not None and results["ccl"].verdict.summary == "importing oneccl_bindings_for_pytorch was killed by signal SIGABRT"
    assert "libxsmm" not in results["ccl"].stderr and "Fatal Python error" in results["ccl"].stderr


def test_a_marker_without_the_token_is_just_output():
    token = "0123456789abcdef"
    forged = f"\n{marker('guessed', 'ccl')}\nundefined symbol: _ZNfake\n"
    stderr = _marked(token, "torch", "", "ipex", forged, "ccl", "")
    results = part_results(_run({"torch": TORCH_ANSWER, "ipex": {}}, -6, stderr, token=token), 5.0)
    assert results["ccl"] is not None and results["ccl"].verdict.summary == "importing oneccl_bindings_for_pytorch was killed by signal SIGABRT"


def test_an_ending_between_two_parts_quotes_no_earlier_output():
    token = "0123456789abcdef"
    stderr = _marked(token, "torch", "", "ipex", "undefined symbol: _ZNipex_warning\n")  # IPEX answered; the child died before the bindings' marker
    results = part_results(_run({"torch": TORCH_ANSWER, "ipex": {}}, -9, stderr, token=token), 5.0)
    assert results["ccl"] is not None and results["ccl"].verdict.summary == "importing oneccl_bindings_for_pytorch was killed by signal SIGKILL"
    assert results["ccl"].stderr == ""


def test_output_before_the_first_marker_is_torch_s():
    results = part_results(_run({}, 1, b"ImportError: libtorch_cpu.so: cannot open shared object file\n", token="0123456789abcdef"), 5.0)
    assert results["torch"] is not None and results["torch"].verdict.summary == "importing torch failed: libtorch_cpu.so cannot be found"


def test_a_line_of_a_megabyte_is_quoted_short():
    results = part_results(_run({"torch": TORCH_ANSWER}, 1, b"E" * (1 << 20)), 5.0)
    verdict = results["ipex"].verdict
    assert len(verdict.summary) < 400 and all(len(d) < 400 for d in verdict.detail), verdict


def test_every_part_answered_then_a_bad_ending_is_worded_as_an_ending_at_exit():
    results = part_results(_run({"torch": TORCH_ANSWER}, None, timed_out=True, parts=(TORCH,)), 5.0)
    assert results["torch"] is not None and results["torch"].verdict.summary == "torch imported, then the interpreter did not exit within 5 s"
    assert results["torch"].data == TORCH_ANSWER
    results = part_results(_run({"torch": TORCH_ANSWER}, 3, b"boom\n", parts=(TORCH,)), 5.0)
    assert results["torch"].verdict.summary == "torch imported, then the interpreter ended with exit status 3 at exit"


def test_a_child_that_cannot_start_fails_every_part():
    results = part_results(ProbeRun((TORCH, IPEX), {}, None, "/nowhere/python cannot be run (No such file or directory)"), 5.0)
    assert all(r is not None and r.verdict.kind == "error" and "could not start" in r.verdict.summary for r in results.values())


def test_each_part_clock_starts_when_the_child_says_it_started(tmp_path, monkeypatch):
    import json
    import os

    from compatmatrix.checks import imports

    now = [100.0]
    monkeypatch.setattr(imports.time, "monotonic", lambda: now[0])
    answer = tmp_path / "answer.json"
    clock = imports._PartClock(str(answer), ["torch", "ipex", "ccl"], 3.0)  # torch's clock starts with the child (no file yet)
    now[0] = 102.0
    assert not clock.overdue()
    answer.write_text(json.dumps({"parts": {"torch": TORCH_ANSWER}, "started": "ipex"}))
    now[0] = 102.5
    assert not clock.overdue()  # IPEX's own 3 s start now
    now[0] = 105.4
    assert not clock.overdue()  # 5.4 s in all, 2.9 s of them IPEX's
    answer.write_text(json.dumps({"parts": {"torch": TORCH_ANSWER, "ipex": {}}, "started": None}))
    answer.write_text(json.dumps({"parts": {}, "started": "torch"}))  # a child cannot wind a clock back
    now[0] = 105.6
    assert clock.overdue()  # between parts (and after the last) the clock of the last one started keeps running
    answer.unlink()
    os.mkfifo(answer)
    assert imports._read_answer(str(answer)) is None  # a FIFO planted there is not an answer and never blocks
