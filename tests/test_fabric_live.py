"""compat doctor --live --fabric: the flags (typed at the edge), the report of a sweep, and REAL ranks (the local torch
2.13 CPU wheel, gloo) sweeping every collective with each iteration checked; the one test double is the FIXTURE fault
mode COMPAT_LIVE_FIXTURE_FAULT=wrongsum:RANK (live/worker.py), which makes that rank's all_reduce result off by one."""

from __future__ import annotations

import pytest

from compatmatrix.cli import main
from compatmatrix.live import fabric


@pytest.mark.parametrize("text,sizes", [("1K,64K,4M", (1024, 65536, 4 << 20)), ("4096, 1kib ,1024", (1024, 4096)), ("1G", (1 << 30,)), ("7", (7,))])
def test_parse_sizes(text, sizes):
    assert fabric.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "1K,", "K", "-1K", "1.5M", "1T", "0", "17G", "4\u0664K", "1kk"])
def test_parse_sizes_rejects(text):
    with pytest.raises(ValueError, match="--sizes item"):
        fabric.parse_sizes(text)


@pytest.mark.parametrize("args,message", [
    (["--fabric"], "--fabric, --sizes and --pairs measure the ranks"),
    (["--live", "--sizes", "1K"], "--sizes sets the sizes of the --fabric sweep"),
    (["--live", "--fabric", "--sizes", "1X"], "--sizes item '1X' is not a size"),
])
def test_fabric_flags_are_usage_errors_before_anything_runs(capsys, args, message):
    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.integration
def test_real_sweep_checks_every_collective_and_names_the_rank_with_a_wrong_sum(stock_torch213):
    from .test_live_real import live

    sizes = [1024, 16384, 262144]
    code, checks, details, seconds = live(stock_torch213, "--fabric", "--sizes", "1K,16K,256K", "--no-trainer", "--launcher", "spawn")
    assert code == 0, checks
    sweep = details["fabric"]
    assert checks["live.fabric"]["status"] == "pass"
    assert sweep["sizes"] == sizes and sweep["errors"] == [] and sweep["ranks_swept"] == 2
    cases = {(row["collective"], row["dtype"]) for row in sweep["rows"]} | {(u["collective"], u["dtype"]) for u in sweep["unsupported"]}
    assert cases == {(name, dtype) for name in fabric.COLLECTIVES for dtype in ("fp32", "bf16")}
    for row in sweep["rows"]:
        assert row["seconds"] > 0 and row["busbw"] == pytest.approx(row["bytes"] / row["seconds"] * fabric.bus_factor(row["collective"], 2))
    # the FIXTURE fault: rank 1's all_reduce returns a wrong sum; the sweep names it, with the size, and nothing else
    code, checks, details, _ = live(stock_torch213, "--fabric", "--sizes", "1K,64K", "--no-trainer", "--launcher", "spawn",
                                    env_extra={"COMPAT_LIVE_FIXTURE_FAULT": "wrongsum:1"})
    assert code == 1
    finding = checks["live.fabric"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "the sweep on gloo returned wrong values on rank 1 (first: all_reduce fp32 at 1 KiB)"
    errors = details["fabric"]["errors"]
    assert {(e["rank"], e["collective"], e["bytes"]) for e in errors} == {(1, "all_reduce", 1024), (1, "all_reduce", 65536)}
    assert all(e["iterations_wrong"] == e["iterations"] and e["got"] == e["expected"] + 1 for e in errors)
    assert checks["live.allreduce"]["status"] == "pass"  # the fixture hits the sweep only


@pytest.mark.parametrize("args,timeout", [([], 120.0), (["--fabric"], 300.0), (["--fabric", "--live-timeout", "50"], 50.0), (["--live-timeout", "7"], 7.0)])
def test_fabric_gets_a_longer_default_deadline(args, timeout):
    from compatmatrix.cli import build_parser

    parser = build_parser()
    ns = parser.parse_args(["doctor", "--live", *args])
    assert ns.build(ns).live.timeout == timeout


def _link(a, b, rate):
    return {"a": a, "b": b, "out": rate, "back": rate * 1.1}


def test_the_ranks_measure_again_exactly_the_links_the_judgement_would_call_slow():
    """live/worker.py's second pass: a link below fabric.SLOW_FRACTION of the median is measured once more (a busy
    machine slows a link for a while, a rate limit every time), in rounds where no host is in two pairs."""
    from compatmatrix.live.worker import slow_link_rounds

    even = [_link(0, 1, 1.0), _link(0, 2, 1.0), _link(1, 2, 1.0), _link(0, 3, 1.0), _link(1, 3, 1.0), _link(2, 3, 1.0)]
    assert slow_link_rounds(even) == []
    just_below = fabric.SLOW_FRACTION * 0.99
    just_above = fabric.SLOW_FRACTION * 1.01
    links = [_link(0, 1, just_below), _link(0, 2, 1.0), _link(1, 2, 1.0), _link(0, 3, just_above), _link(1, 3, 1.0), _link(2, 3, 1.0)]
    assert slow_link_rounds(links) == [[(0, 1)]]
    # two slow links that share host 3 go in two rounds; one that does not joins the first
    links = [_link(0, 1, 1.0), _link(0, 2, 1.0), _link(1, 2, 0.1), _link(0, 3, 0.1), _link(1, 3, 1.0), _link(2, 3, 0.1), _link(0, 4, 1.0),
             _link(1, 4, 1.0), _link(2, 4, 1.0), _link(3, 4, 1.0)]
    rounds = slow_link_rounds(links)
    assert sorted(p for pairs in rounds for p in pairs) == [(0, 3), (1, 2), (2, 3)]
    assert all(len({h for pair in pairs for h in pair}) == 2 * len(pairs) for pairs in rounds)
    assert slow_link_rounds([_link(0, 1, 0.1), _link(0, 2, 1.0)]) == []  # two links have no median to be far below
