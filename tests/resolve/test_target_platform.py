"""One target, one platform: every route to a target (resolve, install, download, check -r, export) takes its glibc
from the same decision (planning.target_of), so the same interpreter gives the same set whichever command asks."""

from __future__ import annotations

import json
import shlex
import sys

from packaging.version import Version

from compatmatrix.matrix.model import Component

from ..conftest import run_compat


def _fixture_interpreter(folder, glibc: str) -> str:
    """FIXTURE interpreter: this CPython, but its probes read ``platform.libc_ver()`` as glibc ``glibc`` (an old cluster's
    C library). It runs the probe compat hands it (``-I -S -c SOURCE ARGS``) after that one change."""
    shim = folder / "old_glibc_shim.py"
    shim.write_text(
        "import platform, sys\n"
        f"platform.libc_ver = lambda *a, **k: ('glibc', {glibc!r})\n"
        "args = [a for a in sys.argv[1:]]\n"
        "while args and args[0] in ('-I', '-S'):\n"
        "    args.pop(0)\n"
        "assert args[0] == '-c', args\n"
        "sys.argv = ['-c'] + args[2:]\n"
        "exec(compile(args[1], '<string>', 'exec'), {'__name__': '__main__'})\n"
    )
    python = folder / "python"
    python.write_text(f"#!/bin/sh\n# FIXTURE interpreter reporting glibc {glibc}\nexec {shlex.quote(sys.executable)} {shlex.quote(str(shim))} \"$@\"\n")
    python.chmod(0o755)
    return str(python)


def _json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_install_and_resolve_give_the_same_set_for_one_old_glibc_interpreter(tmp_path):
    python = _fixture_interpreter(tmp_path, "2.17")
    resolved = _json(run_compat("resolve", "--profile", "stock", "--python", python, "--json"))["packages"]
    planned = _json(run_compat("install", "--profile", "stock", "--python", python, "--dry-run", "--json"))["packages"]
    planned = {name: str(Version(spec.split("==", 1)[1]).public) for name, spec in planned.items()}
    assert planned == resolved
    assert Version(resolved["torch"]) < Version("2.7")  # the glibc 2.17 floor held on both routes


def test_a_manylinux2014_platform_never_gets_a_torch_that_needs_glibc_2_28(matrix):
    old = _json(run_compat("resolve", "--profile", "stock", "--python-version", "3.11", "--platform", "manylinux_2_17_x86_64", "--json"))
    assert Version(old["packages"]["torch"]) < Version("2.7")
    why = next(line for line in old["explanation"] if line.startswith("torch "))
    assert "glibc" in why and "2.28" in why
    new = _json(run_compat("resolve", "--profile", "stock", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "--json"))
    assert Version(new["packages"]["torch"]) == max(matrix.versions(Component.TORCH))  # every torch has a 3.11 wheel
