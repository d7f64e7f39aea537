"""Classify how a child process that imported part of the stack ended. Pure: exit code + output in, verdict out."""

from __future__ import annotations

import re
import signal
from typing import Optional

from ..environment.child import describe_exit
from ..errors import shown
from ..record import Record

LINE_LIMIT = 300  # characters of one line of output quoted in a verdict (a child may print a megabyte on one line)

# IPEX's torch-version guard, in every spelling it has printed: one space (1.12-2.0, 2.2-2.8), the 2.1.0/2.1.100 text
# whose backslash continuations keep the next lines' indentation (7 spaces before "2.1.*", 11 before "and run again."),
# "Intel(R)" or "Intel®", and the C++ check's "PyTorch/libtorch 2.1.*" (csrc/jit/initialization.cpp).
_GUARD = re.compile(r"needs\s+to\s+work\s+with\s+PyTorch(?:/libtorch)?\s+([0-9][0-9.*]*)")
_GUARD_FOUND = re.compile(r"but\s+PyTorch(?:/libtorch)?\s+(\S+)\s+is\s+found")


class Verdict(Record):
    kind: str  # ok, hang, exit-hang, exit-crash, ipex-guard, undefined-symbol, abi-abort, illegal-instruction, missing-libccl, missing-library, not-installed, signal, error
    summary: str
    detail: tuple[str, ...] = ()
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def naming(self, command: str) -> "Verdict":
        """This verdict with its fix's compat env named in full (``command``: checks/oneccl_env.env_command, or the live
        run's CclRun.env_command: --python, --launcher), where the fix names one."""
        if not command or ENV_COMMAND not in self.fix:
            return self
        return Verdict(self.kind, self.summary, self.detail, self.fix.replace(ENV_COMMAND, command))


ENV_COMMAND = 'eval "$(compat env)"'  # a verdict's fix as classify writes it; the caller names it in full (Verdict.naming)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return shown(lines[-1].strip(), LINE_LIMIT) if lines else ""


def classify(returncode: Optional[int], stdout: str, stderr: str, timed_out: bool, what: str, timeout: float = 0.0,
             at_exit: bool = False) -> Verdict:
    """What happened when a child process imported ``what``; ``at_exit``: the import was done (the child said so)
    and the child then did not exit, or ended badly, as the interpreter shut down."""
    output = f"{stdout}\n{stderr}"
    ending = describe_exit(returncode)
    if at_exit:
        return _at_exit(returncode, output, stderr, timed_out, what, timeout)
    if timed_out:
        return Verdict("hang", f"importing {what} did not finish within {timeout:g} s", (ending, _last_line(output) or "no output"),
                       "Something blocks at import (a lock, a network call, a waiting MPI/oneCCL init): run the import by hand with PYTHONFAULTHANDLER=1.")
    return (_guard_verdict(returncode, output, stderr, ending) or _load_verdict(returncode, output, stderr, what, ending)
            or _exit_verdict(returncode, stdout, stderr, output, what, ending))


def _guard_verdict(returncode: Optional[int], output: str, stderr: str, ending: str) -> Optional[Verdict]:
    """IPEX's own version check refused the torch next to it (its 'needs to work with PyTorch X' message), or None."""
    guard = _GUARD.search(output)
    if not guard:
        return None
    series = guard.group(1)
    found = _GUARD_FOUND.search(output)
    installed = found.group(1) if found else "another version"
    if "module 'os' has no attribute 'exit'" in stderr:
        ending_text = "and then crashed with AttributeError: module 'os' has no attribute 'exit' (the 2.6-2.8 guard calls os.exit)"
    elif returncode == 127:
        ending_text = "and exited with status 127"
    else:
        ending_text = f"and ended hard ({ending})"
    return Verdict("ipex-guard", f"IPEX's version check refused torch {installed}: it needs PyTorch {series}", (f"IPEX printed its 'needs to work with PyTorch {series}' message {ending_text}",),
                   f"Install a torch {series} (or the IPEX built for torch {installed})")


def _load_verdict(returncode: Optional[int], output: str, stderr: str, what: str, ending: str) -> Optional[Verdict]:
    """The loader or the binary failed: an undefined symbol, a kernel signature abort, SIGILL, a missing library; or None."""
    symbol = re.search(r"undefined symbol: ([\w.@$]+)", output)
    if symbol:
        return Verdict("undefined-symbol", f"importing {what} failed: undefined symbol {symbol.group(1)}", (_last_line(stderr),),
                       f"{what} was built against a different torch: install the pair the matrix gives (compat check shows it).")
    if "Mismatch in kernel C++ signatures" in output:
        return Verdict("abi-abort", f"importing {what} aborted: 'Mismatch in kernel C++ signatures' ({ending})", (_last_line(stderr),),
                       f"{what} registers kernels for a different torch: install the pair the matrix gives (compat check shows it).")
    if returncode is not None and (returncode == -signal.SIGILL or returncode == 128 + signal.SIGILL):
        return Verdict("illegal-instruction", f"importing {what} hit an illegal instruction (SIGILL)", (ending,),
                       "This CPU lacks an instruction set the build needs (IPEX needs AVX2; some builds AVX-512): run on a newer CPU or use stock PyTorch.")
    missing_lib = re.search(r"(lib[\w.+-]+\.so[.\d]*): cannot open shared object file", output)
    if not missing_lib:
        return None
    name = missing_lib.group(1)
    if name.startswith("libccl.so"):
        return Verdict("missing-libccl", f"importing {what} failed: {name} cannot be found", (_last_line(stderr),),
                       f"The oneCCL runtime is not on the library path: {ENV_COMMAND} (or source the bindings' env/setvars.sh); reinstall oneccl_bind_pt if it persists.")
    return Verdict("missing-library", f"importing {what} failed: {name} cannot be found", (_last_line(stderr),), f"Install the package that provides {name} or put its directory on LD_LIBRARY_PATH.")


def _exit_verdict(returncode: Optional[int], stdout: str, stderr: str, output: str, what: str, ending: str) -> Verdict:
    """Nothing more specific: the module is missing, a signal, another error, or it imports."""
    not_installed = re.search(r"No module named '([\w.]+)'", output)
    if not_installed and returncode not in (0, None):
        return Verdict("not-installed", f"{not_installed.group(1)} is not installed", (_last_line(stderr),), f"pip install the {what} release compat resolve gives")
    if returncode is not None and returncode < 0:
        return Verdict("signal", f"importing {what} was {ending}", (_last_line(stderr) or "no output",), "Run the import by hand with PYTHONFAULTHANDLER=1 to see where it dies.")
    if returncode != 0:
        return Verdict("error", f"importing {what} failed ({ending}): {_last_line(stderr) or _last_line(stdout) or 'no output'}", (), "Read the error above; compat check lists pairing problems that cause most import failures.")
    return Verdict("ok", f"{what} imports")


def _at_exit(returncode: Optional[int], output: str, stderr: str, timed_out: bool, what: str, timeout: float) -> Verdict:
    """``what`` imported; then the interpreter did not exit, or crashed or failed as it exited."""
    ending = describe_exit(returncode)
    if timed_out:
        return Verdict("exit-hang", f"{what} imported, then the interpreter did not exit within {timeout:g} s", (ending, _last_line(output) or "no output"),
                       f"Something the import starts keeps the interpreter from exiting (a thread that is not a daemon, an atexit hook that waits): "
                       f"python -c 'import faulthandler, {what}; faulthandler.dump_traceback_later(10)' prints every thread's stack after 10 s.")
    if returncode is None or returncode == 0:
        return Verdict("ok", f"{what} imports")
    said = (_last_line(stderr) or _last_line(output) or "no output",)
    fix = (f"Something the import registers fails as the interpreter exits (an atexit hook, a library's destructor): "
           f"python -X faulthandler -c 'import {what}' shows where.")
    if returncode < 0:
        return Verdict("exit-crash", f"{what} imported, then the interpreter crashed at exit ({ending})", said, fix)
    return Verdict("exit-crash", f"{what} imported, then the interpreter ended with {ending} at exit", said, fix)
