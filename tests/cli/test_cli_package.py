"""The command line as a package (compatmatrix/cli/): one module per command made on its first use, its services imported
only when it runs, and compat export's formats as a registry (cli/export/formats.py) a new format joins with its
module and one line."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from compatmatrix.cli import TABLE, build_parser, main, parse
from compatmatrix.cli.export.formats import FORMATS
from compatmatrix.cli.export.interface import ExportFormat
from compatmatrix.errors import UsageError

from ..clean_env import base_env
from ..conftest import ROOT

CLI = ROOT / "compatmatrix" / "cli"


def _subparser(name: str):
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    return commands[name].ensure_arguments()


@pytest.mark.parametrize("name", list(TABLE))
def test_every_command_module_has_its_parser_builder_and_run(name):
    import importlib

    module = importlib.import_module(f"compatmatrix.cli.{TABLE[name][0]}")
    assert module.DESCRIPTION and callable(module.add_arguments) and callable(module.build) and callable(module.run)
    parser = _subparser(name)
    assert parser.description == module.DESCRIPTION and parser.get_default("build") is module.build


def test_the_package_keeps_its_modules_and_functions_small():
    """The house rule the split was made for: no module of the package over 400 lines, no function over 80."""
    for path in CLI.rglob("*.py"):
        text = path.read_text()
        assert text.count("\n") < 400, path
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 80, f"{path}:{node.name}"


#: the core and the services: a command module imports them inside its run, never when it is imported
SERVICES = ("compatmatrix.planning", "compatmatrix.resolve", "compatmatrix.matrix", "compatmatrix.checks", "compatmatrix.install",
            "compatmatrix.live", "compatmatrix.export", "compatmatrix.launchers", "compatmatrix.placement", "compatmatrix.tune",
            "compatmatrix.migrate", "compatmatrix.environment", "compatmatrix.render", "compatmatrix.shell_env", "compatmatrix.translate",
            "compatmatrix.maintain")


def test_importing_every_command_module_loads_no_service():
    modules = sorted({module for module, _ in TABLE.values()} | {"export.formats"})
    code = ("import sys, importlib\n"
            f"for name in {modules!r}: importlib.import_module('compatmatrix.cli.' + name)\n"
            "print('\\n'.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base_env(), timeout=120, check=True)
    loaded = set(done.stdout.split())
    assert not {m for m in loaded if m.startswith(SERVICES)}, sorted(m for m in loaded if m.startswith(SERVICES))
    assert not {"packaging", "rich", "yaml"} & {m.split(".")[0] for m in loaded}


# --- compat export's formats: the registry ----------------------------------------------------------------------------


def test_the_registry_is_compat_exports_choice():
    parser = _subparser("export")
    positional = next(a for a in parser._actions if a.dest == "format")
    assert positional.help == "one of " + ", ".join(FORMATS)
    assert "{" + ",".join(FORMATS) + "}" in parser.format_usage()
    dests = {a.dest for a in parser._actions}
    for name, choice in FORMATS.items():
        assert isinstance(choice, ExportFormat) and choice.name == name
        assert set(choice.options) <= dests, (name, set(choice.options) - dests)


def _given(option: str) -> list[str]:
    """The option given with a value that is not its default."""
    action = next(a for a in _subparser("export")._actions if a.dest == option)
    if action.nargs == 0:
        return [action.option_strings[0]]
    return [action.option_strings[0], "2" if action.type is not None else "given"]


@pytest.mark.parametrize("form", list(FORMATS))
def test_every_other_formats_option_is_refused_naming_its_format(form):
    taken = set(FORMATS[form].options)
    for owner in FORMATS.values():
        for option in (o for o in owner.options if o not in taken):
            with pytest.raises(UsageError) as refused:
                parse(["export", form, *_given(option)])
            first_owner = next(f.name for f in FORMATS.values() if option in f.options)
            assert refused.value.message == f"{_given(option)[0]} goes with compat export {first_owner}, not {form}.", refused.value.message


class _NamesFormat(ExportFormat):
    """FIXTURE: a format that is not compat's, registered by a test as a new format would be: one line in FORMATS."""

    name = "fixture-names"

    def write(self, planned, args) -> int:
        sys.stdout.write("".join(f"{package.pin}\n" for package in planned.plan.packages))
        return 0


def test_a_new_format_is_its_module_and_one_registry_line(monkeypatch, capsys):
    monkeypatch.setitem(FORMATS, _NamesFormat.name, _NamesFormat())
    assert main(["export", "fixture-names", "--python-version", "3.11", "torch==2.7.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch==2.7.0") and all("==" in line for line in out.splitlines()), out
    with pytest.raises(UsageError, match="--image goes with compat export pytorchjob, not fixture-names"):
        parse(["export", "fixture-names", "--image", "i:1"])
    with pytest.raises(UsageError, match="Only compat export pytorchjob, sbatch, skypilot and ray take a training command"):
        parse(["export", "fixture-names", "--", "train.py"])
