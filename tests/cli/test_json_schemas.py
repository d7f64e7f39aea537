"""Every `--json` document has a versioned JSON Schema (compatmatrix/schemas/, render.SCHEMAS), and every command's
`--json` output validates against it: run as users run it (subprocesses), for the answers each command can give.

The install and download documents of a real install need a package index: their shapes are validated here from the
builders in render/json.py with stand-in results, and for real in the integration test at the end (the FIXTURE index
of tests/install/test_install.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from types import SimpleNamespace

import jsonschema
import pytest

from compatmatrix.cli import build_parser
from compatmatrix.render import SCHEMAS, schema_path

from ..conftest import ROOT, run_compat

SCHEMA_DIR = ROOT / "compatmatrix" / "schemas"
DATA = ROOT / "tests" / "data"


def schema(command: str) -> dict:
    return json.loads(schema_path(command).read_text())


def valid(command: str, document: dict) -> dict:
    jsonschema.Draft202012Validator(schema(command), format_checker=jsonschema.FormatChecker()).validate(document)
    return document


def cli_json(command: str, *args: str, codes=(0,), env_extra=None) -> dict:
    done = run_compat(command, *args, env_extra=env_extra)
    assert done.returncode in codes, done.stderr[-2000:]
    return valid("export" if command == "export" else command, json.loads(done.stdout))


# --- the schemas themselves -------------------------------------------------------------------------------------------


def test_every_command_with_json_has_a_schema():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    with_json = {name for name, sub in commands.items() if any("--json" in a.option_strings for a in sub.ensure_arguments()._actions)}
    for name, sub in commands.items():  # a command's own actions (compat matrix update)
        for action in (a for a in sub._actions if isinstance(a, argparse._SubParsersAction)):
            with_json |= {f"{name} {inner}" for inner, parser in action.choices.items() if any("--json" in a.option_strings for a in parser._actions)}
    commands_of = {key for key in SCHEMAS if " --" not in key}  # "matrix update --health": an option's own document
    assert with_json == commands_of, with_json ^ commands_of
    assert all(key.split(" --")[0] in commands_of for key in SCHEMAS)


def test_every_schema_file_is_a_valid_schema_and_is_used():
    files = {p.name for p in SCHEMA_DIR.glob("*.json")}
    assert files == set(SCHEMAS.values())
    for name in files:
        document = json.loads((SCHEMA_DIR / name).read_text())
        jsonschema.Draft202012Validator.check_schema(document)
        assert document["$id"].endswith("/" + name) and "schema_version" in json.dumps(document)


def test_the_launcher_enums_are_the_launchers_registry():
    """The launcher and flavour a document may name are the registry's (compatmatrix/launchers): a launcher added there
    without its schema enums (or the reverse) fails here."""
    from compatmatrix.launchers import flavors, names
    from compatmatrix.launchers.interface import BOUND, LIVE, TUNE

    live = json.loads(schema_path("doctor").read_text())["properties"]["live"]["properties"]
    launch = json.loads(schema_path("launch").read_text())["properties"]
    assert json.loads(schema_path("tune").read_text())["properties"]["launcher"]["enum"] == list(names(TUNE))
    assert live["launcher"]["enum"] == list(names(LIVE))
    assert live["flavor"]["enum"] == list(flavors(LIVE))
    assert launch["launcher"]["enum"] == list(names(BOUND))
    assert launch["flavor"]["enum"] == list(flavors(BOUND))


def test_findings_are_one_shape_in_every_document():
    findings = json.loads((SCHEMA_DIR / "findings-v1.json").read_text())["properties"]["checks"]["items"]
    install = json.loads((SCHEMA_DIR / "install-v1.json").read_text())["$defs"]["finding"]
    validate = json.loads((SCHEMA_DIR / "export-validate-v1.json").read_text())["properties"]["checks"]["items"]
    for other in (install, validate):
        assert other["required"] == findings["required"] and set(other["properties"]) == set(findings["properties"])


# --- each command's --json, for real ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args, codes", [
    (("--python-version", "3.11"), (0,)),
    (("--python-version", "3.11", "--profile", "stock", "torchvision", "torchaudio"), (0,)),
    (("--python-version", "3.10", "torch==1.12.1", "oneccl_bind_pt==1.12.0"), (1,)),
    (("--platform", "macosx_14_0_arm64"), (1,)),
    (("--python-version", "3.10", "-r", str(DATA / "real_inputs" / "01_ipex-v1.10.0-install-docs.txt")), (0, 1)),
], ids=["set", "companions", "conflict", "unsupported", "requirements-file"])
def test_resolve(args, codes):
    data = cli_json("resolve", "--json", *args, codes=codes)
    assert ("files" in data) is ("-r" in args)


@pytest.mark.parametrize("args", [(), ("--package", "ccl", "--python-version", "3.9"), ("--torch", ">=2.5", "--package", "transformers")])
def test_matrix(args):
    data = cli_json("matrix", "--json", *args)
    assert data["releases"]


def test_check_doctor_and_check_of_files(tmp_path):
    cli_json("check", "--json", codes=(0, 1))
    cli_json("doctor", "--json", "--only", "packages", "--only", "runtime", codes=(0, 1))
    data = cli_json("check", "--json", "-r", str(DATA / "real_inputs" / "01_ipex-v1.10.0-install-docs.txt"), "--python-version", "3.10", codes=(0, 1))
    assert data["checks"][0]["area"] == "input"  # input.files: the files' own problems


def test_install_plan_and_recovery(tmp_path):
    data = cli_json("install", "--json", "--dry-run", "--python-version", "3.11")
    assert data["dry_run"] is True
    cli_json("install", "--json", "--dry-run", codes=(0,))  # the running interpreter's environment
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    refused = cli_json("install", "--json", "--restore", "--python", str(venv / "bin" / "python"), codes=(1,))
    assert refused["ok"] is False and refused["state"] == "unchanged" and "No interrupted compat install" in refused["error"]


def test_translate():
    data = cli_json("translate", "--json", "--transformers", "4.30.2", "--accelerate", "0.20.3", "--", "python", "run.py", "--no_cuda", "--xpu_backend", "ccl")
    assert data["edits"]
    blocked = cli_json("translate", "--json", "--transformers", "5.3.0", "--accelerate", "1.13.0", "--", "run.py", "--ddp_backend", "ccl", codes=(1,))
    assert blocked["blocking"]


def test_env():
    data = cli_json("env", "--json")
    assert data["schema_version"] == 2


@pytest.mark.parametrize("topology", ["vm-1s-2c-nosmt", "xeon-2s-28c-ht-2numa"])
def test_launch(topology):
    done = run_compat("launch", "--launcher", "torchrun", "--nproc-per-node", "2", "--print", "--json", "--ccl-workers", "0",
                      "--sysfs-root", str(DATA / "topologies" / topology), "--", "train.py")
    assert done.returncode == 0, done.stderr
    valid("launch", json.loads(done.stdout))


def test_migrate(tmp_path):
    pins = tmp_path / "requirements.txt"
    pins.write_text("torch==2.8.0\nintel-extension-for-pytorch==2.8.0\ntransformers==4.56.2\naccelerate==1.10.1\n")
    data = cli_json("migrate", "--json", "--dry-run", "-r", str(pins), "--python-version", "3.11", "--",
                    "torchrun", "run_qa.py", "--no_cuda", "--ddp_backend", "ccl", "--use_ipex")
    assert "intel-extension-for-pytorch" in [r["name"] for r in data["removals"]]
    assert "ccl" not in data["command"] and "--use_ipex" not in data["command"]


def test_export_validate():
    data = cli_json("export", "--validate", str(DATA / "export" / "seed_pytorchjob.yaml"), "--json", codes=(1,))
    assert data["kind"] == "pytorchjob"
    data = cli_json("export", "--validate", str(ROOT / "examples" / "Dockerfile"), "--json")
    assert data["kind"] == "dockerfile"


# --- documents that need a real install: their builders, with stand-in results ----------------------------------------


def _finding(status="pass"):
    from compatmatrix.findings import Finding, Status

    return Finding("packages.torch-installed", Status(status), "torch 2.7.0+cpu (CPU build)", ("evidence",), "")


def test_install_documents_from_their_builders():
    from compatmatrix.install.errors import InstallError
    from compatmatrix.render import json as documents

    result = SimpleNamespace(ok=True, installer="uv", findings=[_finding()],
                             changes=[SimpleNamespace(name="torch", before=None, after="2.7.0+cpu", kind="install"),
                                      SimpleNamespace(name="filelock", before="3.0.0", after="3.1.0", kind="replace")])
    valid("install", documents.install_result_json(result))
    error = InstallError("pip failed.", "Run again.", state="restored", findings=(_finding("fail"),))
    valid("install", documents.install_error_json(error))
    valid("install", documents.recover_json("/venv was restored", True))
    valid("install", documents.recover_json("/venv was kept", False))
    with pytest.raises(jsonschema.ValidationError):  # one of the four shapes, not a mixture
        valid("install", {**documents.recover_json("x", True), "installer": "pip"})


def test_download_document_from_its_builder(tmp_path):
    from compatmatrix.render import json as documents

    plan = SimpleNamespace(packages=[SimpleNamespace(component=SimpleNamespace(distribution="torch"), pin="torch==2.7.0+cpu")])
    valid("download", documents.download_json(str(tmp_path), [tmp_path / "torch-2.7.0+cpu-cp311-cp311-linux_x86_64.whl"], plan))


@pytest.mark.integration
def test_install_and_download_documents_for_real(index, tmp_path):  # noqa: F811
    """The FIXTURE index (tests/install/test_install.py): download --json, install --json from the wheelhouse, and a refusal."""
    from ..install.test_install import RUNNING_PYTHON, compat, make_venv

    house = tmp_path / "house"
    done = compat("download", "-d", str(house), "--json", "--python-version", RUNNING_PYTHON, "--platform", "manylinux_2_28_x86_64", *index.index_args())
    assert done.returncode == 0, done.stderr
    valid("download", json.loads(done.stdout))
    target = make_venv(tmp_path / "venv")
    done = compat("install", "--json", "--python", str(target), "--offline", "--wheelhouse", str(house))
    assert done.returncode == 0, done.stderr
    assert valid("install", json.loads(done.stdout))["state"] == "installed"
    empty = tmp_path / "empty"
    empty.mkdir()
    done = compat("install", "--json", "--python", str(target), "--offline", "--wheelhouse", str(empty))
    assert done.returncode == 1, done.stderr
    assert valid("install", json.loads(done.stdout))["ok"] is False


from ..install.test_install import index  # noqa: E402,F401  (the FIXTURE index fixture, for the integration test above)
