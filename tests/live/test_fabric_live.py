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


@pytest.mark.parametrize("text,seconds", [("60", 60.0), ("1", 1.0), ("3600", 3600.0), ("90.5", 90.5), (" 120 ", 120.0), ("0060", 60.0)])
def test_parse_deadline(text, seconds):
    assert fabric.parse_deadline(text) == seconds


# float() takes every one of these: an exponent, '_' between digits, other scripts' digits, nan/inf, a sign
@pytest.mark.parametrize("text", ["1e-9", "1e3", "1_0", "\u0666\u0660", "nan", "inf", "+60", "-5", "0", "0.5", "3600.001", "3601", "60.", ".5",
                                  "1.0000", "", "60s", "99999"])
def test_parse_deadline_rejects_all_but_plain_decimal_seconds_in_range(text):
    with pytest.raises(ValueError, match="is not plain decimal seconds from 1 to 3600"):
        fabric.parse_deadline(text)


@pytest.mark.parametrize("args,message", [
    (["--fabric"], "--fabric, --sizes, --pairs, --pair-deadline and --fabric-deadline measure the ranks"),
    (["--pair-deadline", "5"], "--fabric, --sizes, --pairs, --pair-deadline and --fabric-deadline measure the ranks"),
    (["--fabric-deadline", "5"], "--fabric, --sizes, --pairs, --pair-deadline and --fabric-deadline measure the ranks"),
    (["--live", "--fabric-deadline", "5"], "--fabric-deadline bounds the --fabric measurements"),
    (["--live", "--fabric", "--fabric-deadline", "3601"], "--fabric-deadline '3601' is not plain decimal seconds from 1 to 3600"),
    (["--live", "--fabric", "--fabric-deadline", "1e-9"], "--fabric-deadline '1e-9' is not plain decimal seconds from 1 to 3600"),
    (["--live", "--fabric", "--fabric-deadline", "280"], "--fabric-deadline 280 does not fit in --live-timeout 300"),
    (["--live", "--pair-deadline", "5"], "--pair-deadline bounds each pair of hosts of the --fabric test"),
    (["--live", "--fabric", "--pair-deadline", "3601"], "--pair-deadline 3601 is more than an hour"),
    (["--live", "--fabric", "--pair-deadline", "60"], "--pair-deadline 60 does not fit in the ranks' own timeout of 60 s"),
    (["--live", "--fabric", "--live-timeout", "40", "--pair-deadline", "16"], "does not fit in the ranks' own timeout of 20 s"),
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
    assert details["fabric"]["backends"] == ["gloo"]  # stock torch from PyPI: no MPI built in, no bindings: nothing to compare


@pytest.mark.integration
def test_the_sweep_compares_the_backends_on_the_same_ranks_in_the_same_run(stock_torch213, tmp_path):
    """With the FIXTURE ccl (gloo underneath, labelled so everywhere) the run's backend is ccl: the same sweep runs again on
    gloo over the same two ranks, every iteration of both checked, the comparison said; a wrong sum on the compared backend
    is named with its backend."""
    from ..fixture_ccl import fixture_ccl_path
    from .test_live_real import live

    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "CCL_WORKER_COUNT": "1"}
    code, checks, details, _ = live(stock_torch213, "--fabric", "--sizes", "1K,64K", "--no-trainer", "--launcher", "spawn", env_extra=env)
    assert code == 0, {k: v["summary"] for k, v in checks.items() if v["status"] != "pass"}
    sweep = details["fabric"]
    assert sweep["backend"] == "ccl" and sweep["backends"] == ["ccl", "gloo"] and sweep["fixture_backends"] == ["ccl"]
    for backend in ("ccl", "gloo"):
        cases = {(r["collective"], r["dtype"], r["bytes"]) for r in sweep["rows"] if r["backend"] == backend}
        assert {(c, d) for c, d, _ in cases} >= {(c, "fp32") for c in fabric.COLLECTIVES}
    summary = checks["live.fabric"]["summary"]
    assert "on ccl (TEST FIXTURE on gloo, not oneCCL) and, for comparison, gloo, every iteration exact on all 2 ranks" in summary
    assert any(line.startswith("all_reduce fp32 at 64 KiB: ccl (TEST FIXTURE on gloo, not oneCCL) ") and ", gloo " in line
               for line in checks["live.fabric"]["evidence"])
    page = tmp_path / "report.html"
    from compatmatrix.render.fabric_html import render_report

    page.write_text(render_report(details_document(checks, details)))
    text = page.read_text()
    assert 'id="sweep-all_reduce-fp32-vs1"' in text and "ccl (TEST FIXTURE on gloo, not oneCCL)" in text


def details_document(checks, details):
    """The --json document's shape the report reads (checks and the live details)."""
    return {"checks": list(checks.values()), "live": details}


@pytest.mark.parametrize("args,timeout", [([], 120.0), (["--fabric"], 300.0), (["--fabric", "--live-timeout", "50"], 50.0), (["--live-timeout", "7"], 7.0)])
def test_fabric_gets_a_longer_default_deadline(args, timeout):
    from compatmatrix.cli import build_parser

    parser = build_parser()
    ns = parser.parse_args(["doctor", "--live", *args])
    assert ns.build(ns).live.timeout == timeout


@pytest.mark.parametrize("args,deadline", [(["--fabric"], 60.0), (["--fabric", "--live-timeout", "50"], 20.0), (["--fabric", "--fabric-deadline", "40"], 40.0),
                                           (["--fabric", "--live-timeout", "20"], 5.0), ([], 0.0)])
def test_the_fabric_deadline_defaults_to_four_hosts_in_two_minutes_and_fits_the_live_timeout(args, deadline):
    from compatmatrix.cli import build_parser, fabric_deadline_for

    parser = build_parser()
    ns = parser.parse_args(["doctor", "--live", *args])
    live = ns.build(ns).live
    assert (fabric_deadline_for(live.fabric_deadline, live.timeout) if live.fabric else 0.0) == deadline


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
    # the rehearsal's numbers: five of six links slow; the judgement names hosts 2 and 3, and those links are measured again
    crawl = [_link(0, 1, 4.9762), _link(0, 2, 0.0012), _link(0, 3, 0.0197), _link(1, 2, 0.0012), _link(1, 3, 0.0012), _link(2, 3, 0.0011)]
    assert sorted(p for pairs in slow_link_rounds(crawl) for p in pairs) == [(0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def test_a_pair_that_ran_out_its_deadline_is_not_measured_again():
    from compatmatrix.live.worker import slow_link_rounds

    links = [_link(0, 1, 1.0), _link(0, 2, 1.0), _link(1, 2, 1.0), _link(0, 3, 0.1), {"a": 1, "b": 3, "out": None, "back": None, "error": "no answer"}]
    assert slow_link_rounds(links) == [[(0, 3)]]


def test_measured_again_keeps_the_faster_each_way_and_sums_segments():
    from compatmatrix.live.worker import merge_again

    links = [{**_link(0, 1, 1.0), "sent": 100, "retransmitted": 5, "allreduce": {"busbw": 2.0, "bytes": 8, "wrong": 0}}, _link(1, 2, 1.0),
             {**_link(0, 2, 1.0), "sent": 10, "retransmitted": 0}]
    merge_again(links, [{**_link(0, 1, 0.5), "back": 3.0, "sent": 50, "retransmitted": 1, "spurious": 1, "allreduce": {"busbw": 4.0, "bytes": 8, "wrong": 1}},
                        {**_link(0, 2, 9.0), "error": "no answer within 2 s", "sent": 20, "retransmitted": 3}])
    assert (links[0]["out"], links[0]["back"], links[0]["sent"], links[0]["retransmitted"], links[0]["measured"]) == (1.0, 3.0, 150, 6, 2)
    assert links[0]["spurious"] == 1  # the first measurement had none recorded (an older worker): 0
    assert links[0]["allreduce"] == {"busbw": 4.0, "bytes": 8, "wrong": 1}  # the faster, and every wrong value of both
    assert links[2]["out"] == 1.0 and links[2]["sent"] == 30  # a repeat that ran out its deadline keeps the first numbers
    assert "measured" not in links[1]


@pytest.mark.parametrize("rate,times", [(None, 1), (0.0, 1), (1e5, 1), (10 * (256 << 10) / 0.25 / 10, 1), (4 * (256 << 10) / 0.25, 4), (1e12, 5)])
def test_the_pair_all_reduce_runs_as_many_times_as_fit_its_quarter_second(rate, times):
    from compatmatrix.live.worker import pair_allreduce_times

    assert pair_allreduce_times(rate) == times


def _pairs_rank(links, tcp=None, deadline=30.0):
    from compatmatrix.live.report import RankRecord

    record = {"hosts": ["n1", "n2", "n3", "n4"], "mode": "all", "rounds": 3, "seconds": 2.0, "deadline": deadline, "links": links,
              "memcpy": [8e9] * 4, "tcp": tcp or [{"out": 1000, "retrans": 0}] * 4}
    return [RankRecord(1, {"rank": 0, "stage": "done", "pairs": record}, "", 0, True)]


def _measured(a, b, rate=1e9, sent=30_000, again=0, wrong=0):
    return {"a": a, "b": b, "out": rate, "back": rate, "latency": 1e-4, "seconds": 0.3, "round": 0,
            "allreduce": {"busbw": rate / 3, "bytes": 262144, "wrong": wrong}, "sent": sent, "retransmitted": again}


def test_the_pair_table_names_slow_lossy_and_silent_hosts_and_a_wrong_pair_sum():
    from compatmatrix.live.report import pair_table, pairs_finding

    healthy = [_measured(0, 1), _measured(0, 2), _measured(1, 2)]
    silent = [{"a": a, "b": 3, "out": None, "back": None, "latency": None, "allreduce": None, "seconds": 3.1, "round": 1,
               "error": "no answer within 3 s (Timed out waiting 3000ms for recv operation to complete)", "sent": 40, "retransmitted": 0} for a in range(3)]
    table = pair_table(_pairs_rank(healthy + silent, deadline=3.0))
    assert table["silent_hosts"] == ["n4"] and table["slow_hosts"] == [] and table["lossy_hosts"] == []
    black_hole = [{**link, "sent": 180, "retransmitted": 75} for link in silent]  # a pair that never answered retransmits into the void
    assert pair_table(_pairs_rank(healthy + black_hole, deadline=3.0))["lossy_hosts"] == []  # named silent, not also lossy
    assert [link["bandwidth"] for link in table["links"][3:]] == [0.0, 0.0, 0.0]
    finding = pairs_finding(_pairs_rank(healthy + silent, deadline=3.0))
    assert finding.status.value == "fail" and finding.summary == "n4: no answer within 3 s on any of its pairs (the host, its NIC or a firewall)"
    assert any(line.startswith("n1 <-> n4: no answer within 3 s") for line in finding.evidence)

    lossy = [_measured(0, 1), _measured(0, 2), _measured(1, 2, wrong=3), _measured(0, 3, again=900), _measured(1, 3, again=800), _measured(2, 3, again=700)]
    table = pair_table(_pairs_rank(lossy))
    assert table["lossy_hosts"] == ["n4"] and table["slow_hosts"] == [] and table["silent_hosts"] == []
    assert table["verdicts"] == ["n4: loses packets on every link: TCP lost 2400 of 90000 segments (2.7%) over its 3 links, 0 of 90000 on the other links",
                                 "n2 <-> n3: the two-rank all_reduce returned 3 wrong values"]


def test_a_healthy_link_whose_retransmissions_the_peer_reported_as_duplicates_is_not_lossy():
    """Measured on a 2-core machine: the one healthy veth link of a 2-node Slurm cluster retransmitted 2-4% of its segments
    (a starved receiver, a sender moved between CPUs); every such retransmission the peer D-SACKed arrived twice."""
    from compatmatrix.live.report import pair_table, pairs_finding

    starved = [{**_measured(a, b, sent=398_753, again=17_486), "spurious": 17_401} for a, b in [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]]
    table = pair_table(_pairs_rank(starved))
    assert table["lossy_hosts"] == table["lossy_links"] == [] and table["verdicts"] == []
    finding = pairs_finding(_pairs_rank(starved))
    assert finding.status.value == "pass"
    assert "n1 <-> n2: " in finding.evidence[0] and "TCP retransmitted 17486 of 398753 segments, 17401 of them arrived after all (D-SACK)" in finding.evidence[0]
    lossy = starved[:3] + [{**link, "spurious": 20} for link in starved[3:]]  # n4's retransmissions were not answered: lost
    table = pair_table(_pairs_rank(lossy))
    assert table["lossy_hosts"] == ["n4"] and table["lossy_links"] == []
    assert table["verdicts"][0].startswith("n4: loses packets on every link: TCP lost 52398 of 1196259 segments (4.4%) over its 3 links "
                                           "(52458 retransmitted, 60 of them arrived after all: D-SACK), 255 of 1196259 on the other links")


def test_a_kernel_that_does_not_count_d_sacks_is_said_on_the_pair_and_in_the_loss_finding():
    """Before Linux 4.19 struct tcp_info ends before tcpi_dsack_dups: the pair record says the D-SACK count is unknown
    (spurious null, dsack_unknown), and a loss judged on such counts says its retransmissions were all counted as lost."""
    import json
    from pathlib import Path

    import jsonschema

    from compatmatrix.live.report import pair_table, pairs_finding

    lossy = [_measured(0, 1), _measured(0, 2), _measured(1, 2)]
    lossy += [{**_measured(a, 3, again=900), "spurious": None, "dsack_unknown": True} for a in range(3)]
    tcp = [{"out": 1000, "retrans": 0, "spurious": 0}] * 3 + [{"out": 1000, "retrans": 90, "spurious": 0, "dsack_unknown": True}]
    table = pair_table(_pairs_rank(lossy, tcp=tcp))
    assert [link.get("dsack_unknown") for link in table["links"]] == [None, None, None, True, True, True]
    assert [link["spurious"] for link in table["links"][3:]] == [None, None, None]
    assert table["tcp"]["n4"]["dsack_unknown"] is True and "dsack_unknown" not in table["tcp"]["n1"]
    assert table["lossy_hosts"] == ["n4"]
    assert table["verdicts"] == [f"n4: loses packets on every link: TCP lost 2700 of 90000 segments (3.0%) over its 3 links ({fabric.DSACK_UNKNOWN}), "
                                 "0 of 90000 on the other links"]
    assert fabric.DSACK_UNKNOWN == "every retransmission counted as lost: this kernel does not count D-SACKs (Linux 4.19+)"
    finding = pairs_finding(_pairs_rank(lossy, tcp=tcp))
    assert any(line.startswith("n1 <-> n4: ") and line.endswith("D-SACKs not counted (this kernel does not count them, Linux 4.19+)") for line in finding.evidence)
    assert not any("D-SACKs not counted" in line for line in finding.evidence if line.startswith("n1 <-> n2: "))
    schema = json.loads((Path(fabric.__file__).parents[1] / "schemas" / "findings-v1.json").read_text())
    jsonschema.validate(table, schema["properties"]["live"]["properties"]["pairs"])
    # a lossy link between two hosts, one of which counted no D-SACKs: the link's sentence says so, a counted one's does not
    one = [_measured(0, 1), _measured(0, 2), _measured(1, 2), _measured(0, 3), {**_measured(1, 3, again=900), "spurious": None, "dsack_unknown": True},
           _measured(2, 3, again=800)]
    table = pair_table(_pairs_rank(one))
    assert table["lossy_links"] == [["n2", "n4"], ["n3", "n4"]]
    assert table["verdicts"][0].startswith(f"n2 <-> n4: loses packets: TCP lost 900 of 30000 segments (3.0%) ({fabric.DSACK_UNKNOWN}), ")
    assert fabric.DSACK_UNKNOWN not in table["verdicts"][1]


def test_tcp_info_of_a_kernel_before_4_19_leaves_the_d_sacks_unknown():
    """A kernel answers TCP_INFO with at most its own struct: one before 4.19 ends before tcpi_dsack_dups (byte 216).
    Asked for only that much, the counts keep sent and retransmitted and say the D-SACKs are unknown (None), never 0;
    tcp_difference, a re-measured link and the peers' exchange keep that unknown."""
    import socket

    from compatmatrix.live.worker import TCP_INFO_DSACK_DUPS, merge_again, tcp_difference, tcp_info_counts

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        client.sendall(b"x" * 100_000)
        got = 0
        while got < 100_000:
            got += len(peer.recv(65536))
        short = tcp_info_counts([client.fileno(), peer.fileno()], size=TCP_INFO_DSACK_DUPS)
        full = tcp_info_counts([client.fileno(), peer.fileno()])
        mixed = tcp_info_counts([client.fileno()], size=TCP_INFO_DSACK_DUPS)
    finally:
        for sock in (client, peer, server):
            sock.close()
    assert short is not None and short[0] > 0 and short[2] is None
    assert full is not None and full[2] is not None and full[0] >= short[0]
    assert mixed[2] is None
    before = {"out": 10, "retrans": 1, "spurious": None}
    assert tcp_difference(before, {"out": 20, "retrans": 4, "spurious": None}) == [10, 3, None]
    assert tcp_difference({**before, "spurious": 0}, {"out": 20, "retrans": 4, "spurious": 2}) == [10, 3, 2]
    from compatmatrix.live.worker import pair_sum

    assert pair_sum([100, 5, 2], [200, 7, 3, 1], True) == {"sent": 300, "retransmitted": 12, "spurious": 5, "tcp_source": "connections"}
    unknown = {"sent": 300, "retransmitted": 12, "spurious": None, "tcp_source": "connections", "dsack_unknown": True}
    assert pair_sum([100, 5, None], [200, 7, 3, 1], True) == unknown  # this end's kernel did not count them
    assert pair_sum([100, 5, 2], [200, 7, -1, 1], True) == unknown  # the peer's did not
    assert pair_sum([100, 5, 2], [-1, -1, -1, 0], True) == {"sent": None, "retransmitted": None, "spurious": None, "tcp_source": None}
    links = [{**_link(0, 1, 1.0), "sent": 100, "retransmitted": 5, "spurious": 2}]
    merge_again(links, [{**_link(0, 1, 1.0), "sent": 50, "retransmitted": 1, "spurious": None, "dsack_unknown": True}])
    assert links[0]["spurious"] is None and links[0]["dsack_unknown"] is True and links[0]["retransmitted"] == 6


def test_the_report_shows_a_silent_pair_and_the_new_columns():
    from compatmatrix.live.report import pair_table
    from compatmatrix.render.fabric_html import _pairs_section

    silent = {"a": 0, "b": 3, "out": None, "back": None, "latency": None, "allreduce": None, "seconds": 3.1, "round": 1,
              "error": "no answer within 3 s <script>", "sent": None, "retransmitted": None}
    table = pair_table(_pairs_rank([_measured(0, 1, again=7), _measured(0, 2), _measured(1, 2), silent, _measured(1, 3), _measured(2, 3)], deadline=3.0))
    page = "".join(_pairs_section(table))
    assert "no answer within 3 s &lt;script&gt;" in page and "<script>" not in page
    assert '<td data-v="7.0">7 of 30000</td>' in page and "two-rank all_reduce GB/s" in page


@pytest.mark.parametrize("pairs", [
    {"hosts": ["a", "b"], "links": [{"a": 0, "b": 1, "out": None, "back": 1.0, "latency": None}]},
    {"hosts": ["a", "b", "c"], "links": [{"a": 0, "b": 5}]},
    {"hosts": "ab", "links": "x", "tcp": [[1, 2]], "deadline": "soon"},
    {"hosts": ["a", "b"], "links": [{"a": 0, "b": 1, "out": 1.0, "back": 1.0, "latency": 1e-4, "sent": "many", "retransmitted": None}]},
])
def test_a_pair_record_not_of_the_workers_shape_is_a_finding_not_a_traceback(pairs):
    """Status files are outside input (a --run-dir may be shared): a malformed one is named, the run's report survives."""
    from compatmatrix.live.report import RankRecord, pair_table, pairs_finding
    from compatmatrix.render.fabric_html import _pairs_section

    ranks = [RankRecord(1, {"rank": 0, "stage": "done", "pairs": pairs}, "", 0, True)]
    finding = pairs_finding(ranks)
    assert finding.status.value == "fail" and finding.summary.startswith("a rank's record of the pairs could not be read ("), finding.summary
    assert "".join(_pairs_section(pair_table(ranks))).startswith("<h2>Pairs of hosts</h2>")  # the page is drawn all the same


@pytest.mark.parametrize("status", [
    {"fabric": {"rows": [{"collective": "all_reduce"}]}},
    {"fabric": {"rows": []}, "fabric_others": ["gloo"]},
    {"fabric": {"rows": [], "cut": [{"collective": "x", "dtype": "y", "after": None, "seconds": 1.0}]}},
    {"fabric": {"rows": []}, "imports": ["ccl"]},
])
def test_a_sweep_record_not_of_the_workers_shape_is_a_finding_not_a_traceback(status):
    from compatmatrix.live.report import Expectation, RankRecord, fabric_finding, fabric_rows

    ranks = [RankRecord(1, {"rank": 0, "stage": "done", "world_size": 2, **status}, "", 0, True)]
    finding = fabric_finding(ranks, Expectation(world_size=2, trainer=False, steps=1, per_device_batch=1, backend="gloo", ccl_installed=False))
    assert finding.status.value == "fail" and finding.summary.startswith("a rank's record of the sweep could not be read ("), finding.summary
    assert isinstance(fabric_rows(ranks), dict)


def test_the_sweep_finding_says_the_deadline_the_link_it_was_sized_to_and_what_it_did_not_measure():
    """live.fabric under --fabric-deadline (the worker's record): the summary names the deadline, the seconds spent, the
    slowest link and how many cases were left out; the evidence has one line per collective and type left out."""
    from compatmatrix.live.report import Expectation, RankRecord, fabric_finding, fabric_rows

    rows = [{"collective": "all_reduce", "dtype": "fp32", "bytes": size, "iterations": 2, "seconds": 0.01, "wrong": 0, "ranks_wrong": 0}
            for size in (1024, 4096)]
    record = {"sizes": [1024, 4096, 16384], "bound": 1 << 30, "dropped": [], "rows": rows, "errors": [], "unsupported": [], "cut": [],
              "deadline": {"seconds": 40.0, "began": 13.2, "budget": 22.8, "link": ["node1", "node3", 2.4e6], "planned": True, "timed": 0.1,
                           "estimate": 16.8, "spent": 36.8},
              "skipped": [{"collective": "all_reduce", "dtype": "fp32", "sizes": [16384], "why": "deadline"},
                          {"collective": "all_gather", "dtype": "bf16", "sizes": [1024, 4096, 16384], "why": "slow link"}]}
    ranks = [RankRecord(1, {"rank": 0, "stage": "done", "world_size": 4, "backend": "gloo", "fabric": record}, "", 0, True)]
    finding = fabric_finding(ranks, Expectation(world_size=4, trainer=False, steps=1, per_device_batch=1, backend="gloo", ccl_installed=False))
    assert finding.status.value == "pass"
    assert finding.summary.endswith("under --fabric-deadline 40 s, 37 s spent: sized to the slowest link, node1 <-> node3 (0.0024 GB/s), "
                                    "4 of 6 cases not measured (--verbose lists them)"), finding.summary
    assert "from 1 KiB to 4 KiB" in finding.summary  # the range measured, not the one asked for
    assert [line for line in finding.evidence if line.startswith("not measured: ")] == [
        "not measured: all_reduce fp32 at 16 KiB (no room left under --fabric-deadline)",
        "not measured: all_gather bf16 at 1 KiB, 4 KiB, 16 KiB (one call over the slowest link would take more than the stop time)"]
    sweep = fabric_rows(ranks)
    assert sweep["deadline"]["link"] == {"a": "node1", "b": "node3", "bandwidth": 2.4e6} and len(sweep["skipped"]) == 2


def test_tcp_info_counts_reads_the_connections_own_counters_and_their_d_sacks():
    """A loopback connection of this process: segments sent, none retransmitted, none D-SACKed (tcpi_dsack_dups at byte
    216 of struct tcp_info); a descriptor that is not TCP is passed over; tcp_difference never calls more spurious than
    retransmitted."""
    import socket

    from compatmatrix.live.worker import tcp_counters, tcp_difference, tcp_info_counts

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        client.sendall(b"x" * 200_000)
        got = 0
        while got < 200_000:
            got += len(peer.recv(65536))
        counts = tcp_info_counts([client.fileno(), peer.fileno(), other.fileno()])
        assert counts is not None and len(counts) == 3 and counts[0] > 0 and 0 <= counts[2] <= counts[1]
        assert tcp_info_counts([other.fileno()]) is None
    finally:
        for sock in (client, peer, server, other):
            sock.close()
    before = tcp_counters()
    if before is not None:  # /proc/net/snmp readable
        assert set(before) == {"out", "retrans", "spurious"}
        assert tcp_difference(before, {**before, "retrans": before["retrans"] + 3, "spurious": before["spurious"] + 9})[1:] == [3, 3]
    assert tcp_difference(None, before) is None
