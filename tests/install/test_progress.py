"""What a long install shows (compatmatrix/install/progress.py): its phases with their times, downloads with bytes
and rate, one summary line; plain lines off a terminal, rich bars on one, nothing extra with --json (where
rich.progress is not even imported).

The display itself in-process; compat install as a child process with a FIXTURE index on 127.0.0.1, its stderr a
pipe or a pseudo-terminal (pty).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from compatmatrix.install import progress as progress_module
from compatmatrix.install.progress import PHASES, Display, Lines, Progress, choose_display, size_text

from ..install_helpers import STACK, clean_env, copy_venv, served, stack_index, template_venv

ROOT = Path(__file__).resolve().parents[2]
FINDING = json.loads((ROOT / "compatmatrix" / "schemas" / "findings-v1.json").read_text())["properties"]["checks"]["items"]
SUMMARY = re.compile(r"^  phases: preflight [\d.]+ s, plan [\d.]+ s, fetch [\d.]+ s, snapshot [\d.]+ s, install [\d.]+ s, verify [\d.]+ s, total [\d.]+ s$", re.M)

# compat's own main, with the rich modules it imported written to $PROBE_MODULES at exit
WRAPPER = """
import atexit, json, os, sys
def _dump():
    with open(os.environ["PROBE_MODULES"], "w") as out:
        json.dump(sorted(m for m in sys.modules if m == "rich" or m.startswith("rich.")), out)
atexit.register(_dump)
from compatmatrix.cli import main
sys.exit(main(sys.argv[1:]))
"""


# ---------------------------------------------------------------- the display, in-process


def test_phases_are_timed_summed_and_summed_up_in_order():
    said: list[str] = []
    run = Progress(Lines(said.append))
    with run:
        with run.phase("plan"):
            time.sleep(0.01)
        with run.phase("preflight"):
            pass
        with run.phase("plan"):  # a phase entered twice: its time is the sum
            pass
        with pytest.raises(RuntimeError), run.phase("install"):
            raise RuntimeError("the installer failed")
    assert [line.split("]")[0] for line in said] == ["  [plan", "  [preflight", "  [plan", "  [install"]
    assert said[-1].endswith("(stopped)")
    assert run.times["plan"] >= 0.01
    summary = run.summary()
    assert re.fullmatch(r"phases: preflight [\d.]+ s, plan [\d.]+ s, install [\d.]+ s, total [\d.]+ s", summary), summary
    run.finish()
    assert said[-1].startswith("  phases: preflight")


def test_a_download_says_its_bytes_and_rate_when_done():
    said: list[str] = []
    run = Progress(Lines(said.append))
    with run.transfer("torch-2.7.0.whl", 3 << 20) as transfer:
        chunks = list(transfer.counted([b"x" * (1 << 20)] * 3))
    assert len(chunks) == 3 and transfer.done == 3 << 20
    assert re.fullmatch(r"  fetched torch-2\.7\.0\.whl: 3\.0 MiB in [\d.]+ s \([\d.]+ (KiB|MiB|GiB)/s\)", said[0]), said
    with pytest.raises(OSError), run.transfer("broken.whl", None) as transfer:
        raise OSError("disk full")
    assert len(said) == 1  # a transfer that failed is said by the error, not as fetched


def test_sizes_are_in_binary_units():
    assert [size_text(n) for n in (0, 1023, 1024, 5 << 20, 3 << 30)] == ["0 bytes", "1023 bytes", "1.0 KiB", "5.0 MiB", "3.0 GiB"]


def test_off_a_terminal_the_display_is_plain_lines_and_rich_is_not_needed():
    said: list[str] = []
    assert isinstance(choose_display("auto", said.append), Lines)  # pytest captures stdout and stderr: no terminal
    assert type(choose_display("none", said.append)) is Display
    assert tuple(PHASES) == ("preflight", "plan", "fetch", "snapshot", "install", "verify")
    done = subprocess.run([sys.executable, "-c", "import sys, compatmatrix.install.progress as p, compatmatrix.install.service; "
                           "p.choose_display('auto', print); print(sorted(m for m in sys.modules if m.startswith('rich.progress')))"],
                          capture_output=True, text=True, timeout=60, check=True, env=clean_env())
    assert done.stdout.strip() == "[]"
    assert progress_module.__doc__ and "rich.progress" in progress_module.__doc__


# ---------------------------------------------------------------- compat install, as a child process


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return template_venv(tmp_path_factory.mktemp("progress-template") / "venv")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with served(stack_index(tmp_path_factory.mktemp("progress-index"))) as fixture:
        yield fixture


def _argv(python: Path, index, *extra: str) -> list[str]:
    return [sys.executable, "-c", WRAPPER, "install", "--python", str(python), "--yes", *STACK, *index.index_args(), *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    return clean_env(PROBE_MODULES=str(tmp_path / "modules.json"), XDG_CACHE_HOME=str(tmp_path / "cache"))


def _rich_modules(tmp_path: Path) -> list[str]:
    return json.loads((tmp_path / "modules.json").read_text())


@pytest.mark.integration
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_off_a_terminal_every_phase_and_the_summary_are_plain_lines(template, index, tmp_path, installer):
    from compatmatrix.install.runner import uv_binary

    if installer == "uv" and uv_binary() is None:
        pytest.skip("uv is not installed here")
    python = copy_venv(template, tmp_path / "venv")
    done = subprocess.run(_argv(python, index, "--installer", installer), capture_output=True, text=True, timeout=600, env=_env(tmp_path),
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for phase in PHASES:
        assert re.search(rf"^  \[{phase}\] [\d.]+ s$", done.stderr, re.M), (phase, done.stderr[-3000:])
    assert len(SUMMARY.findall(done.stderr)) == 1, done.stderr[-3000:]
    assert re.search(r"^  fetched torch-2\.7\.0\+cpu-\S+\.whl: [\d.]+ \S+ in [\d.]+ s \([\d.]+ \S+/s\)$", done.stderr, re.M), done.stderr[-3000:]
    assert "\x1b[" not in done.stderr  # no terminal codes in a log
    assert "rich.progress" not in _rich_modules(tmp_path)


@pytest.mark.integration
def test_json_gets_nothing_extra_and_rich_progress_is_not_imported(template, index, tmp_path):
    python = copy_venv(template, tmp_path / "venv")
    done = subprocess.run(_argv(python, index, "--json"), capture_output=True, text=True, timeout=600, env=_env(tmp_path),
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)  # one JSON document, nothing else on stdout
    assert set(data) == {"schema_version", "command", "ok", "state", "installer", "changes", "checks"}, sorted(data)
    assert data["command"] == "install" and data["ok"] is True and data["state"] == "installed"
    for check in data["checks"]:  # no schema file for install; its checks are findings as compat check writes them
        jsonschema.validate(check, FINDING)
    assert "phases:" not in done.stderr and not re.search(r"^  \[\w+\] ", done.stderr, re.M) and "fetched " not in done.stderr, done.stderr[-2000:]
    assert "rich.progress" not in _rich_modules(tmp_path)


def _run_on_a_pty(argv: list[str], env: dict[str, str], stdout_too: bool, timeout: float = 600) -> tuple[int, str, str]:
    """Run ``argv`` with stderr (and stdout, if ``stdout_too``) on a pseudo-terminal; returns (exit code, what the
    terminal showed, stdout when it was a pipe)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave if stdout_too else subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    shown = bytearray()
    end = time.monotonic() + timeout
    stdout = b""
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child side is closed
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        if not stdout_too:
            stdout = process.stdout.read() if process.stdout else b""
        code = process.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return code, shown.decode(errors="replace"), stdout.decode(errors="replace")


@pytest.mark.integration
def test_on_a_terminal_bars_are_drawn_and_the_summary_stays(template, index, tmp_path):
    python = copy_venv(template, tmp_path / "venv")
    env = _env(tmp_path)
    env.pop("NO_COLOR", None)
    env.update(TERM="xterm-256color", COLUMNS="120")
    code, shown, _ = _run_on_a_pty(_argv(python, index), env, stdout_too=True)
    assert code == 0, shown[-3000:]
    assert "rich.progress" in _rich_modules(tmp_path)
    assert re.search(r"phases: preflight [\d.]+ s, plan [\d.]+ s, fetch [\d.]+ s, snapshot [\d.]+ s, install [\d.]+ s, verify [\d.]+ s, total", shown), shown[-3000:]
    for phase in PHASES:
        assert f"[{phase}]" in shown, (phase, shown[-3000:])


@pytest.mark.integration
def test_json_on_a_terminal_stderr_draws_no_bars(template, index, tmp_path):
    python = copy_venv(template, tmp_path / "venv")
    env = _env(tmp_path)
    env.update(TERM="xterm-256color")
    code, shown, stdout = _run_on_a_pty(_argv(python, index, "--json"), env, stdout_too=False)
    assert code == 0, shown[-3000:]
    assert json.loads(stdout)["ok"] is True
    assert "rich.progress" not in _rich_modules(tmp_path)
    assert "phases:" not in shown


@pytest.mark.integration
def test_json_with_both_streams_on_a_terminal_draws_no_bars(template, index, tmp_path):
    """--json asks for the document only: no progress display at all, even where both streams are terminals (the
    display a plain install would choose there is bars)."""
    python = copy_venv(template, tmp_path / "venv")
    env = _env(tmp_path)
    env.pop("NO_COLOR", None)
    env.update(TERM="xterm-256color", COLUMNS="120")
    code, shown, _ = _run_on_a_pty(_argv(python, index, "--json"), env, stdout_too=True)
    assert code == 0, shown[-3000:]
    assert "rich.progress" not in _rich_modules(tmp_path)
    assert "phases:" not in shown and "[preflight]" not in shown, shown[-3000:]
    assert '"ok": true' in shown, shown[-3000:]  # the document itself, on the terminal
