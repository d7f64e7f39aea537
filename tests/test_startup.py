"""What compat's static commands import (python -X importtime, as a user runs them: not a terminal).

Issue 15: rich only where rich must write (not for --json, --help, --version, nor for plain lines off a terminal),
packaging not for --help, the TOML parser not when the parsed matrix is cached, and never torch or IPEX on the
static paths. Import lists, not timings: the times themselves are bench/run.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from .clean_env import base_env
from .conftest import ROOT

FIVE_PINS = ["torch==2.1.0", "intel-extension-for-pytorch==2.3.0", "oneccl-bind-pt==2.0.0", "transformers==4.30.0", "accelerate==0.20.0"]
STACK = ("torch", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch", "torch_ccl", "transformers", "accelerate")


def imported(*args: str, env_extra=None) -> set[str]:
    """The modules `compat ARGS` imports, run twice (the first run warms the matrix cache and the bytecode)."""
    env = base_env({"NO_COLOR": "1", "COLUMNS": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "TTY_INTERACTIVE": None,
                    "PYTHONDONTWRITEBYTECODE": None, **(env_extra or {})})
    argv = [sys.executable, "-X", "importtime", "-m", "compatmatrix", *args]
    for _ in range(2):
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:") and line.count("|") == 2}


def _top(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("args", [
    ("resolve", "--json", "--python-version", "3.11"),
    ("resolve", "--python-version", "3.10", *FIVE_PINS),  # a conflict: plain lines, one wrapped
    ("resolve", "--json", "--python-version", "3.10", *FIVE_PINS),
    ("matrix", "--json"),
    ("check", "--json"),
    ("check",),
    ("--help",),
    ("--version",),
    ("resolve", "--help"),
    ("export", "requirements", "--python-version", "3.11"),
    ("export", "pylock", "--python-version", "3.11"),
    ("export", "--validate", str(ROOT / "examples" / "Dockerfile"), "--json"),
])
def test_no_rich_where_rich_writes_nothing(args):
    modules = imported(*args)
    assert "compatmatrix.cli" in modules
    assert "rich" not in _top(modules)
    assert not _top(modules) & set(STACK)
    # hashlib loads OpenSSL (~3 ms); secrets pulls in hashlib, hmac, random and base64 (~10 ms): a static start has neither
    assert not {"hashlib", "secrets", "hmac"} & _top(modules), sorted({"hashlib", "secrets", "hmac"} & _top(modules))
    assert not {"requests", "urllib3", "yaml"} & _top(modules), sorted({"requests", "urllib3", "yaml"} & _top(modules))  # nothing is fetched
    assert not {"matplotlib", "numpy"} & _top(modules)  # the --report charts' library: that path only


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("resolve", "--help"), ("bogus",)])
def test_the_command_line_alone_needs_no_core(args):
    modules = imported(*args) if args != ("bogus",) else _imported_failing(*args)
    assert not {"packaging", "rich", "tomllib", "dataclasses"} & _top(modules)
    assert not {m for m in modules if m.startswith(("compatmatrix.matrix", "compatmatrix.resolve", "compatmatrix.checks"))}


def _imported_failing(*args: str) -> set[str]:
    env = base_env({"NO_COLOR": "1"})
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "compatmatrix", *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:") and line.count("|") == 2}


def test_resolve_reads_no_toml_and_makes_no_dataclass():
    modules = imported("resolve", "--json", "--python-version", "3.11")
    assert "tomllib" not in modules and "tomli" not in modules  # the parsed matrix comes from the cache (JSON)
    assert "dataclasses" not in modules  # records (compatmatrix.record) cost nothing to define
    assert "importlib.resources" not in modules


def test_tables_and_colour_still_come_from_rich():
    assert "rich.table" in imported("matrix")
    assert "rich" in _top(imported("resolve", "--python-version", "3.10", FIVE_PINS[0], env_extra={"FORCE_COLOR": "1"}))


@pytest.mark.parametrize("args", [
    ("resolve", "--json", "--python-version", "3.11"),
    ("check", "--json"),
    ("matrix", "--json"),
    ("export", "requirements", "--python-version", "3.11"),
    ("export", "constraints", "--python-version", "3.11"),
    ("export", "pip-command", "--python-version", "3.11"),
    ("export", "pylock", "--python-version", "3.11"),
    ("export", "dockerfile", "--python-version", "3.11"),
])
def test_yaml_only_where_a_manifest_is_written_or_read(args):
    assert "yaml" not in _top(imported(*args))


def test_the_manifest_paths_use_yaml():
    assert "yaml" in _top(imported("export", "pytorchjob", "--python-version", "3.11", "--image", "i:1", "--cpu", "4", "--memory", "8Gi", "--", "t.py"))
    assert "yaml" in _top(imported("export", "--validate", str(ROOT / "tests" / "data" / "export" / "seed_pytorchjob.yaml")))


EMULATION = ("compatmatrix.export.apiserver", "compatmatrix.export.pods", "compatmatrix.export.releases")


@pytest.mark.parametrize("args", [
    ("resolve", "--json", "--python-version", "3.11"),
    ("check", "--json"),
    ("export", "requirements", "--python-version", "3.11"),
    ("export", "pytorchjob", "--python-version", "3.11", "--image", "i:1", "--cpu", "4", "--memory", "8Gi", "--", "t.py"),
    ("export", "--validate", str(ROOT / "examples" / "Dockerfile"), "--json"),
])
def test_the_api_server_emulation_and_the_cel_library_load_only_where_a_manifest_is_validated(args):
    modules = imported(*args)
    assert not set(EMULATION) & modules and not {"cel", "typer"} & _top(modules)


def test_validate_of_a_trainjob_loads_the_emulation_but_not_the_cel_packages_command_line():
    modules = imported("export", "--validate", str(ROOT / "tests" / "data" / "k8s" / "trainjob_auto_cpu.yaml"), "--python-version", "3.11", "--json")
    assert set(EMULATION) <= modules
    # the CEL core is loaded from its extension file: the package's __init__ (typer, rich, prompt_toolkit: ~0.3 s) is not run
    assert not {"cel", "typer", "rich", "prompt_toolkit"} & _top(modules)


def test_check_of_another_environment_makes_no_dataclass_and_reads_no_platform(tmp_path):
    """compat check --python ENV (what users check; issue 20's speed goal): its records are Records, the run marker
    and the linker's arch need neither uuid nor platform (~10 ms together), and its probe answer is kept."""
    import venv

    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    modules = imported("check", "--json", "--python", str(env / "bin" / "python"))
    assert not {"dataclasses", "inspect", "uuid", "platform"} & modules, sorted({"dataclasses", "inspect", "uuid", "platform"} & modules)


def test_a_command_builds_only_its_own_options():
    """Every subcommand's arguments are made on its first use (cli._Parser.populate): the others' cost nothing."""
    from compatmatrix.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert all(len(sub._actions) == 1 for sub in commands.values())  # -h only, until used
    namespace = parser.parse_args(["check", "--json"])
    assert namespace.command == "check"
    assert len(commands["check"]._actions) > 1 and all(len(sub._actions) == 1 for name, sub in commands.items() if name != "check")


def test_the_catalogue_lists_every_registered_check_in_its_module_and_order():
    """checks/registry.CATALOGUE stands in for the registrations until a check runs (issue 35): the same ids, modules
    and kinds as the @check decorators give once every module is imported; the checks run in its order."""
    from compatmatrix.checks import builds, imports, oneccl_env, packages, runtime  # noqa: F401  (registration)
    from compatmatrix.checks.registry import CATALOGUE, REGISTRY, all_checks

    registered = {c.id: (c.run.__module__.rsplit(".", 1)[1], c.static) for c in REGISTRY.values()}  # in import order: any
    assert registered == {id: (module, static) for id, module, static in CATALOGUE}
    assert len(CATALOGUE) == len(registered)
    assert [c.description for c in all_checks()] == [REGISTRY[id].description for id, _, _ in CATALOGUE]


CHECK_MODULES = ("compatmatrix.checks.imports", "compatmatrix.checks.oneccl_env", "compatmatrix.checks.runtime")
# what a child process needs (subprocess, the process-group machinery): no static path below starts one
CHILD = ("compatmatrix.environment.child", "compatmatrix.processes", "tempfile")


def test_check_of_a_requirements_file_loads_only_the_package_checks():
    """compat check -r runs the packages.* checks alone: the other check modules, the child machinery and the JSON
    builders (the text summary counts without them) stay unloaded (issue 35)."""
    modules = imported("check", "-r", str(ROOT / "examples" / "requirements.txt"))
    assert "compatmatrix.checks.packages" in modules
    assert not (set(CHECK_MODULES) | set(CHILD) | {"compatmatrix.render.json"}) & modules, sorted((set(CHECK_MODULES) | set(CHILD) | {"compatmatrix.render.json"}) & modules)
    assert not {"rich", "yaml", "requests", "jsonschema", "tomllib"} & _top(modules)
    # NAME==X lines need neither packaging.requirements nor the markers (with packaging.tags, logging, platform and
    # dataclasses: ~20 ms of CPU); a line with a marker or extras loads them (below)
    heavy = {"packaging.requirements", "packaging.markers", "packaging.tags", "dataclasses", "inspect", "logging", "platform"}
    assert not heavy & modules, sorted(heavy & modules)


def test_a_line_with_a_marker_is_read_by_packaging(tmp_path):
    file = tmp_path / "requirements.txt"
    file.write_text("torch==2.7.0+cpu; python_version >= '3.9'\ntransformers[torch]>=4.40\n")
    modules = imported("check", "-r", str(file))
    assert {"packaging.requirements", "packaging.markers"} <= modules


def test_check_of_another_environment_with_a_kept_probe_answer_starts_no_child_and_loads_no_import_probe(tmp_path):
    import venv

    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    hour_ago = time.time() - 3600  # settled: a probe answer is kept only for an environment nothing changed in just before
    for path in [env, *env.rglob("*")]:
        os.utime(path, (hour_ago, hour_ago), follow_symlinks=False)
    modules = imported("check", "--python", str(env / "bin" / "python"), env_extra={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert list((tmp_path / "cache").rglob("probe-*.json"))  # the second run read the kept answer
    assert "compatmatrix.checks.imports" not in modules and "compatmatrix.render.json" not in modules
    assert not (set(CHILD) | {"subprocess"}) & modules, sorted((set(CHILD) | {"subprocess"}) & modules)  # ldconfig is not run
    assert not {"rich", "yaml", "requests", "jsonschema"} & _top(modules)


def test_compat_env_makes_no_dataclass_and_loads_no_launcher_module():
    """compat env (issue 35): its plans are Records, and its --launcher choices are the registry's, read only when
    --launcher is given (or the help shown)."""
    from compatmatrix.cli import build_parser
    from compatmatrix.launchers import names
    from compatmatrix.launchers.interface import ENV, TUNE

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command, capability in (("env", ENV), ("tune", TUNE)):
        (launcher,) = (a for a in commands[command].ensure_arguments()._actions if a.dest == "launcher")
        assert list(launcher.choices) == list(names(capability)) and "torchrun" in launcher.choices
    modules = imported("env")
    assert not {"dataclasses", "inspect"} & modules, sorted({"dataclasses", "inspect"} & modules)
    # the oneCCL environment is computed in launchers/environment.py (on launchers/interface.py's CclEnv), so those two
    # and the package load; no launcher itself does, nor anything else of launchers/
    computation = {"compatmatrix.launchers", "compatmatrix.launchers.environment", "compatmatrix.launchers.interface"}
    assert not {m for m in modules if m.startswith("compatmatrix.launchers")} - computation
    assert not {"rich", "yaml", "requests", "jsonschema", "tomllib"} & _top(modules)
