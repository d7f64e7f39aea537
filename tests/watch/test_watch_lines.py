"""A dead rank's last output lines in its finding: the agent's line ring (what a rank writes through Python's
sys.stdout / sys.stderr, written at once: a SIGKILL loses none of it), compat's own pipes of the ranks it starts
(--launcher spawn: every byte, C's and children's too, handed on unchanged), and the lines as text (escaped), JSON
(the schema) and bounded. The ranks here are plain Pythons (no torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.watch import judge as J
from compatmatrix.watch import lines, ring
from compatmatrix.watch.render import finding_json, lines_text, text_lines, watch_json
from compatmatrix.watch.service import SITE, Watcher, WatchOptions, WatchOutcome, agent_env

from ..hostile_strings import hostile

SITE_FILE = SITE / "sitecustomize.py"


def test_the_line_ring_constants_are_the_agents():
    text = SITE_FILE.read_text()
    for name in ("LINES", "LINE"):
        assert f"\n{name} = {getattr(lines, name)}\n" in text
    assert f"\nLINE_TEXT = {lines.MAX_CHARS}  #" in text


def _rank(tmp_path: Path, code: str, rank: str = "1") -> subprocess.CompletedProcess:
    """A rank run by a plain Python with the agent; its stdout and stderr as bytes (exactly as written)."""
    env = agent_env({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK")}, tmp_path, "test", 0.05)
    env.update({"RANK": rank, "WORLD_SIZE": "2", "LOCAL_RANK": rank, "TORCHELASTIC_RESTART_COUNT": "0"})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)


def _pid(path: Path, rank: int = 1) -> int:
    return ring.beats_of(path.read_bytes()[:ring.SLOTS * ring.SLOT], rank)[-1].pid


def test_a_killed_ranks_last_lines_are_in_its_ring_and_its_output_is_unchanged(tmp_path):
    code = ("import os, signal, sys\n"
            "for i in range(50): print(f'step {i}')\n"
            "sys.stderr.write('to stderr\\r\\n'); print('half', end='')\n"
            "os.kill(os.getpid(), signal.SIGKILL)")
    done = _rank(tmp_path, code)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "".join(f"step {i}\n" for i in range(50)).encode() + b"half" and done.stderr == b"to stderr\r\n"  # handed on unchanged
    path = tmp_path / "rank-1.ring"
    assert path.stat().st_size == ring.SLOTS * ring.SLOT + lines.LINES * lines.LINE
    found = lines.agent_lines(path, _pid(path))
    assert found == tuple(f"step {i}" for i in range(31, 50)) + ("to stderr",)  # the last 20 complete lines; "half" never ended
    assert lines.agent_lines(path, _pid(path) + 1) == ()  # another process's lines are not this rank's


def test_the_traceback_that_ends_a_rank_is_in_its_last_lines(tmp_path):
    done = _rank(tmp_path, "print('loading'); raise ValueError('bad batch')")
    assert done.returncode == 1 and b"ValueError: bad batch" in done.stderr
    path = tmp_path / "rank-1.ring"
    found = lines.agent_lines(path, _pid(path))
    assert found[0] == "loading" and found[1] == "Traceback (most recent call last):" and found[-1] == "ValueError: bad batch"


def test_the_wrapped_streams_are_the_streams_to_the_code_that_uses_them(tmp_path):
    code = ("import io, subprocess, sys\n"
            "assert sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2 and not sys.stdout.isatty()\n"
            "assert sys.stdout.encoding and sys.stdout.closed is False and sys.stdout is not sys.__stdout__\n"
            "sys.stdout.reconfigure(line_buffering=True)\n"
            "sys.stdout.buffer.write(b'raw bytes\\n'); sys.stdout.flush()\n"
            "sys.stdout.writelines(['a\\n', 'b\\n']); print('c', file=sys.stderr)\n"
            "subprocess.run([sys.executable, '-c', 'print(\"child\")'], stdout=sys.stdout, check=True)\n"
            "import logging; logging.basicConfig(); logging.getLogger().warning('logged')\n"
            "print('progress\\r 50%\\r100%')\n")
    done = _rank(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"raw bytes\na\nb\nchild\nprogress\r 50%\r100%\n" and done.stderr == b"c\nWARNING:root:logged\n"
    path = tmp_path / "rank-1.ring"
    # the buffer's bytes and the child's output go round the wrapper: not in the ring; a line redrawn in place is its last form
    assert lines.agent_lines(path, _pid(path)) == ("a", "b", "c", "WARNING:root:logged", "100%")


def test_the_line_ring_wraps_and_a_forked_child_writes_none_of_it(tmp_path):
    code = ("import os\n"
            "for i in range(1000): print('x' * (i % 700), i)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    print('from the child'); os._exit(0)\n"
            "os.waitpid(pid, 0); print('last')\n")
    done = _rank(tmp_path, code)
    assert done.returncode == 0 and b"from the child" in done.stdout
    path = tmp_path / "rank-1.ring"
    assert path.stat().st_size == ring.SLOTS * ring.SLOT + lines.LINES * lines.LINE
    found = lines.agent_lines(path, _pid(path), limit=lines.LINES)
    assert found[-1] == "last" and "from the child" not in found and len(found) == lines.LINES
    assert all(len(line) <= lines.MAX_CHARS + 3 for line in found) and any(line.endswith("...") for line in found)


def test_a_slot_of_any_bytes_is_a_line_or_nothing(tmp_path):
    path = tmp_path / "rank-0.ring"
    slots = [b"", b"{", b'{"n":1,"pid":7,"l":3}', b'{"n":true,"pid":7,"l":"x"}', b'{"n":-1,"pid":7,"l":"x"}', b"\xff\xfe",
             b'{"n":2,"pid":8,"l":"other"}', b'{"n":3,"pid":7,"l":"kept"}', b"[1]" * 200]
    path.write_bytes(b"\0" * (ring.SLOTS * ring.SLOT) + b"".join(s[:lines.LINE].ljust(lines.LINE) for s in slots))
    assert lines.agent_lines(path, 7) == ("kept",)
    os.mkfifo(tmp_path / "rank-1.ring")
    assert lines.agent_lines(tmp_path / "rank-1.ring", 7) == ()  # a FIFO is not waited on
    (tmp_path / "rank-2.ring").symlink_to(path)
    assert lines.agent_lines(tmp_path / "rank-2.ring", 7) == ()  # a link is not followed


def test_the_watcher_gives_a_gone_rank_its_lines_from_the_pipe_first(tmp_path):
    done = _rank(tmp_path, "import sys; print('agent line'); sys.exit(3)", rank="0")
    assert done.returncode == 3
    pid = _pid(tmp_path / "rank-0.ring", 0)

    class Tail:  # FIXTURE: what spawn's OutputTail of this pid holds
        def __init__(self, held):
            self.held = held

        def last(self):
            return self.held

    watcher = Watcher(tmp_path, WatchOptions(), exits={pid: (3 << 8, 5.0)}, tails={pid: Tail(("pipe line",))})
    watcher.read(5.0)
    (death,) = watcher.judge(6.0)
    assert death.exit_code == 3 and death.lines == ("pipe line",) and death.lines_from == "pipe"
    watcher = Watcher(tmp_path, WatchOptions(), exits={pid: (3 << 8, 5.0)}, tails={pid: Tail(())})  # the pipe saw nothing: the agent's
    watcher.read(5.0)
    (death,) = watcher.judge(6.0)
    assert death.lines == ("agent line",) and death.lines_from == "agent"


def test_the_lines_are_bounded_and_a_credential_is_masked_before_the_cut():
    secret = "https://user:hunter2@index.example/simple"
    found = lines.bounded([f"line {i}" for i in range(30)] + ["x" * 230 + secret, "y" * 500])
    assert len(found) == lines.MAX_LINES and found[0] == "line 12"
    assert "hunter2" not in "".join(found) and "hunte" not in found[-2] and found[-1] == "y" * lines.MAX_CHARS + "..."


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(hostile(), min_size=1, max_size=25))
def test_hostile_lines_are_escaped_in_text_and_valid_in_json(texts):
    import jsonschema

    from compatmatrix.console import dump_json, visible_line
    from compatmatrix.render import schema_path

    death = J.Death(1, 42, 3.0, 9, None, "", "running", "", lines.bounded(texts), lines.AGENT)
    said = lines_text(death)
    assert len(said) == len(death.lines) + 1 and said[0].startswith("rank 1's last ")
    for line in said:  # console.visible_line's rule: nothing that acts on a terminal, one line each
        assert visible_line(line) == line and not {"\n", "\r", "\x1b", "\x85", "\u2028"} & set(line)
    outcome = WatchOutcome(1, (death,), True, 5.0, ("flight-recorder",), ())
    document = json.loads(dump_json(watch_json(outcome)))
    jsonschema.validate(document, json.loads(schema_path("launch --watch").read_text()))
    assert len(document["findings"][0]["last_lines"]) == len(death.lines) <= lines.MAX_LINES
    assert text_lines(outcome)[1] == "compat launch --watch: " + said[0]


def test_a_death_without_lines_says_none_and_the_json_says_null():
    death = J.Death(1, 42, 3.0, 9, None, "", "running")
    assert lines_text(death) == [] and finding_json(death)["last_lines"] == [] and finding_json(death)["lines_from"] is None


# --- spawn: compat's pipes of the ranks


def _spawned(code: str, nproc: int = 2):
    from compatmatrix.watch.render import finding_said
    from compatmatrix.watch.service import watch_launch
    from compatmatrix.watch.spawn import SpawnRun

    from ..clean_env import base_env
    from ..procs import MARK_VARIABLE, marked, new_mark

    mark = new_mark()
    said: list[str] = []
    spawn = SpawnRun(("-c", code), sys.executable, nproc, said.append)
    outcome = watch_launch(spawn, base_env({MARK_VARIABLE: mark}), WatchOptions(world=nproc), said.append, finding_said, spawn.exits, spawn.tails)
    return outcome, said, marked(mark)


def test_spawn_hands_the_ranks_output_on_and_names_a_killed_ranks_last_lines_from_its_pipes(capfd):
    code = ("import os, signal, sys, time\n"
            "rank = os.environ['RANK']\n"
            "print(f'rank {rank} step 1'); print(f'rank {rank} to stderr', file=sys.stderr)\n"
            "os.write(2, f'rank {rank} from C\\n'.encode())\n"
            "time.sleep(1.0)\n"
            "if rank == '1': os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(120)")
    outcome, said, left = _spawned(code)
    out, err = capfd.readouterr()
    assert "rank 0 step 1\n" in out and "rank 1 step 1\n" in out and "rank 1 from C\n" in err and "rank 0 to stderr\n" in err
    death = outcome.findings[0]
    assert death.rank == 1 and death.signal == signal.SIGKILL and death.lines_from == "pipe"
    assert set(death.lines) == {"rank 1 step 1", "rank 1 to stderr", "rank 1 from C"}  # what the rank's C code wrote too
    at_once = next(line for line in said if "rank 1 (pid" in line).splitlines()  # said at once, the lines with it
    assert at_once[1] == "compat launch --watch: rank 1's last 3 lines (from compat's pipes of its stdout and stderr):"
    assert sorted(at_once[2:]) == sorted(f"compat launch --watch:     | {line}" for line in death.lines)
    assert left == []


@pytest.mark.parametrize("flag", ["", "0"])
def test_spawn_ranks_write_unbuffered_unless_told_otherwise(flag, monkeypatch):
    from compatmatrix.watch.spawn import SpawnRun

    seen = []
    monkeypatch.setattr(SpawnRun, "_start", lambda self, argv, env: seen.append(env.get("PYTHONUNBUFFERED")) or (_ for _ in ()).throw(OSError(2, "x")))
    spawn = SpawnRun(("-c", "pass"), sys.executable, 1)
    from compatmatrix.errors import CompatError

    with pytest.raises(CompatError, match="Cannot start"):  # FIXTURE: the rank's start refused, after its environment was made
        spawn({"PYTHONUNBUFFERED": flag} if flag else {"COMPAT_WATCH_RUN": "x"})
    assert seen == [flag or "1"]
