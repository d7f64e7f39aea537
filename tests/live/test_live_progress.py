"""compat doctor --live's progress line on a terminal (live/progress.py): what it says, and that it is written only to a
terminal, only when the line changes, and cleared at the end."""

import io
import json

import pytest

from compatmatrix.live.progress import TerminalProgress, progress_line, terminal_progress
from compatmatrix.live.protocol import PROTOCOL_VERSION, RankStatus, read_parts


def record(**fields):
    """A status file's text as the worker writes it (the protocol's version first)."""
    return json.dumps({"protocol": PROTOCOL_VERSION, **fields})


@pytest.mark.parametrize("status,line", [
    ({}, None),
    ({"rank": 0, "stage": "init"}, "live: rank 0 at stage init (2 ranks reporting)"),
    ({"rank": 0, "stage": "pairs", "pairs_round": 1, "pairs_rounds": 3}, "live: rank 0 at stage pairs (2 ranks reporting), round 2 of 3 of host pairs"),
    ({"rank": 0, "stage": "pairs", "pairs_round": 0}, "live: rank 0 at stage pairs (2 ranks reporting), round 1 of host pairs"),
    ({"rank": 0, "stage": "fabric", "fabric_case": ["all_gather", "bf16", 4 << 20, 17]},
     "live: rank 0 at stage fabric (2 ranks reporting): all_gather bf16 at 4 MiB (case 17)"),
    ({"rank": 0, "stage": "fabric", "fabric_case": ["x", "y", "1K", 2]}, "live: rank 0 at stage fabric (2 ranks reporting)"),  # not what the worker writes
])
def test_progress_line(status, line):
    assert progress_line(read_parts(RankStatus, status)[0], 2) == line  # a part not of the protocol's shape is left out


class FakeTerminal(io.StringIO):
    """FIXTURE: a text stream that says it is a terminal."""

    def isatty(self):
        return True


def test_the_line_is_rewritten_in_place_only_on_change_and_cleared(tmp_path):
    stream = FakeTerminal()
    progress = TerminalProgress(stream, tmp_path, every=0)
    progress.look()
    assert stream.getvalue() == ""  # no rank has written yet
    (tmp_path / "proc-11.json").write_text(record(rank=1, stage="joined"))
    (tmp_path / "proc-10.json").write_text(record(rank=0, stage="pairs", pairs_round=0, pairs_rounds=3))
    (tmp_path / "proc-13.json").write_text(json.dumps({"protocol": PROTOCOL_VERSION + 1, "rank": -1, "stage": "newer"}))  # another compat's: not shown
    (tmp_path / "proc-12.json").write_text("{half a reco")  # being written: skipped
    progress.look()
    progress.look()
    assert stream.getvalue() == "\r\x1b[Klive: rank 0 at stage pairs (2 ranks reporting), round 1 of 3 of host pairs"
    (tmp_path / "proc-10.json").write_text(record(rank=0, stage="done"))
    progress.look()
    progress.close()
    assert stream.getvalue().endswith("\r\x1b[Klive: rank 0 at stage done (2 ranks reporting)\r\x1b[K")


def test_nothing_is_written_where_stderr_is_not_a_terminal(tmp_path):
    assert terminal_progress(io.StringIO(), tmp_path) is None
    assert isinstance(terminal_progress(FakeTerminal(), tmp_path), TerminalProgress)


def test_a_status_file_cannot_write_controls_to_the_terminal_nor_stop_the_run(tmp_path):
    stream = FakeTerminal()
    progress = TerminalProgress(stream, tmp_path, every=0)
    (tmp_path / "proc-1.json").write_text("[" * 100_000)  # deeper than json's recursion limit
    progress.look()
    (tmp_path / "proc-2.json").write_text(record(rank=0, stage="x\x1b]0;PWNED\x07"))
    progress.look()
    assert "\x1b]" not in stream.getvalue() and "\x07" not in stream.getvalue() and "PWNED" in stream.getvalue()
