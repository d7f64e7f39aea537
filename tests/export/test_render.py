"""compatmatrix/render/: the format modules on their own (the commands' output is tests/test_cli*.py's and
tests/cli/test_json_schemas.py's)."""

from __future__ import annotations

import sys

import yaml

from compatmatrix.render import emit
from compatmatrix.render.manifest import load_documents, manifest_text
from compatmatrix.render.pylock import pylock_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib


def test_pylock_text_is_toml_whatever_the_strings_hold():
    odd = 'https://h.example/a "b"\\c\n\tdé\x01.whl'
    data = {"lock-version": "1.0", "created-by": "compatmatrix", "packages": [
        {"name": "torch", "version": "2.7.0+cpu", "index": odd, "wheels": [{"url": odd, "hashes": {"sha256": "ab" * 32}}]},
        {"name": "numpy", "version": "2.1.0"},
    ]}
    text = pylock_text(data, ["a header", "# with a hash"])
    assert text.startswith("# a header\n# # with a hash\n")
    assert tomllib.loads(text) == data


def test_manifest_text_writes_the_script_as_a_block_and_reads_back():
    document = {"kind": "PyTorchJob", "spec": {"args": ["-c", "set -eu\necho \"$X\" >&2\nexec torchrun \"$@\"", "train.py"]}}
    shared = {"a": 1}
    text = manifest_text({**document, "one": shared, "two": shared}, ["first note", "two\nlines"])
    assert text.startswith("# first note\n# two\n# lines\n") and "- |-\n" in text and "&id" not in text  # no YAML anchors
    assert load_documents(text + "---\n" + text)[0] == yaml.safe_load(text) == {**document, "one": shared, "two": shared}


def test_emit_prints_the_document_or_the_text(capsys):
    emit(True, False, lambda: {"schema_version": 1}, lambda console: console.print("text"))
    assert capsys.readouterr().out == '{\n  "schema_version": 1\n}\n'
    emit(False, True, lambda: {"schema_version": 1}, lambda console: console.print("text"))
    assert capsys.readouterr().out == "text\n"


def test_install_service_keeps_the_plan_writers(matrix):
    """The pip forms moved to render/requirements.py; install/service.py answers the same for its callers."""
    from compatmatrix.install import service
    from compatmatrix.install.indexes import configure_indexes
    from compatmatrix.install.plan import make_plan
    from compatmatrix.render import requirements
    from compatmatrix.resolve import resolve

    from ..conftest import make_request

    plan = make_plan(resolve(matrix, make_request(matrix, "3.11", profile="ddp-ccl")), configure_indexes(matrix, []))
    for kind in ("requirements", "constraints"):
        assert service.requirements_text(plan, kind) == requirements.requirements_text(plan, kind) == requirements.plan_text(plan, kind)
    assert service.pip_command_text(plan) + "\n" == requirements.plan_text(plan, "pip-command")
