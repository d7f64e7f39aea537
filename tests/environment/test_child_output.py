"""run_child (environment/child.py) reads a child's output as it comes and keeps only the last OUTPUT_LIMIT bytes of
each stream, so a child that writes without end cannot fill compat's memory; its other guarantees stay (timeout,
a child that ended while something it started holds the pipes). Every child here is small and bounded in time."""

from __future__ import annotations

import resource
import sys
import time

from compatmatrix.environment.child import OUTPUT_LIMIT, dropped_note, run_child

SPEW = ("import sys, time\nchunk = b'x' * (4 << 20)\nsys.stderr.write('first line\\n'); sys.stderr.flush()\n"
        "for _ in range(24):\n    sys.stdout.buffer.write(chunk); sys.stdout.flush(); sys.stderr.write('e' * 100000 + '\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('\\nlast words\\n'); sys.stdout.flush()\ntime.sleep(3600)\n")


def test_a_child_spewing_output_then_hanging_keeps_the_last_bytes_only():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    ended = run_child([sys.executable, "-c", SPEW], 8.0)
    assert time.monotonic() - started < 30
    assert ended.timed_out and ended.returncode is None
    assert ended.stdout_dropped >= 90 << 20 and ended.stderr_dropped > 0  # 96 MB written, all read
    for stream, dropped in ((ended.stdout, ended.stdout_dropped), (ended.stderr, ended.stderr_dropped)):
        note = dropped_note(dropped)
        assert stream.startswith(note) and len(stream) == len(note) + OUTPUT_LIMIT
    assert ended.stdout.endswith(b"\nlast words\n")
    assert b"first line" not in ended.stderr
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # kB
    assert grown < 32 << 10, f"compat grew by {grown} kB reading 96 MB"


def test_small_output_is_kept_whole():
    ended = run_child(["sh", "-c", "printf 'out\\n'; printf 'err\\n' >&2; exit 3"], 10.0)
    assert (ended.returncode, ended.stdout, ended.stderr, ended.timed_out) == (3, b"out\n", b"err\n", False)
    assert (ended.stdout_dropped, ended.stderr_dropped) == (0, 0)


def test_output_of_exactly_the_limit_is_not_cut():
    ended = run_child([sys.executable, "-c", f"import sys; sys.stdout.write('y' * {OUTPUT_LIMIT})"], 30.0)
    assert ended.returncode == 0 and ended.stdout == b"y" * OUTPUT_LIMIT and ended.stdout_dropped == 0


def test_a_child_that_closed_its_pipes_still_gets_its_timeout():
    started = time.monotonic()
    ended = run_child(["sh", "-c", "exec >&- 2>&-; sleep 60"], 1.5)
    assert ended.timed_out and time.monotonic() - started < 15


def test_a_child_that_ended_while_a_leftover_holds_its_pipes_has_ended():
    started = time.monotonic()
    ended = run_child(["sh", "-c", "(sleep 60 &); echo done"], 30.0)
    assert (ended.returncode, ended.stdout, ended.timed_out) == (0, b"done\n", False)
    assert time.monotonic() - started < 15
