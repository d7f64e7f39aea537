"""compat doctor --live --fabric --report FILE.html (render/fabric_html.py): a pure function of the --json document.

The documents in tests/data/fabric/ are recorded real runs (this machine, torch 2.13, gloo): two ranks under spawn,
and node1's document of the four network-namespace hosts with node3's cable shaped to 10 Mbit/s and the FIXTURE
wrong sum on node2 (tests/live/test_hosts_netns.py's fabric run). The page must carry every number the document holds,
escape every value from outside, and load nothing from the network; the browser test is test_fabric_report_browser.py.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compatmatrix.console import visible, visible_line

from ..hostile_strings import hostile

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

from compatmatrix.render.fabric_html import HEATMAP_ID, SWEEP_ID, gb, render_report  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "fabric"
RECORDED = sorted(DATA.glob("*.json"))


class Page(HTMLParser):
    """The page read back: every start tag (name, attributes), every text, and the data-v numbers of each table."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.drawn: list[bool] = []  # per tag: inside an <svg> (a chart matplotlib drew)
        self._svg = 0
        self.texts: list[str] = []
        self.numbers: dict[str, list[tuple[float, str]]] = {}
        self._table = ""
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        self.drawn.append(self._svg > 0)
        self._svg += tag == "svg"
        if tag == "table":
            self._table = attributes.get("id") or ""
        if tag == "td" and "data-v" in attributes:
            self._cell = {"v": float(attributes["data-v"]), "text": ""}

    def handle_endtag(self, tag):
        self._svg -= tag == "svg" and self._svg > 0
        if tag == "td" and self._cell is not None:
            self.numbers.setdefault(self._table, []).append((self._cell["v"], self._cell["text"]))
            self._cell = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell["text"] += data


def read(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    return parser


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_documents_are_what_doctor_json_promises(path):
    import jsonschema

    from compatmatrix.render import schema_path

    jsonschema.validate(json.loads(path.read_text()), json.loads(schema_path("doctor").read_text()))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_the_page_carries_every_number_of_the_json_document(path):
    document = json.loads(path.read_text())
    page = read(render_report(document))
    live = document["live"]

    def shown(table: str, value: float, text: str | None = None) -> None:
        cells = [cell for cell in page.numbers.get(table, []) if cell[0] == value]  # the JSON number itself, read back exactly
        assert cells, (table, value)
        if text is not None:
            assert any(cell[1] == text for cell in cells), (table, value, text, cells)

    for row in live["fabric"]["rows"]:
        shown("sweep", row["busbw"], gb(row["busbw"]))
        shown("sweep", row["algbw"], gb(row["algbw"]))
        shown("sweep", row["seconds"], f"{row['seconds'] * 1e6:.1f}")
    assert len(page.numbers["sweep"]) == 3 * len(live["fabric"]["rows"])
    for key in ("per_rank", "all_ranks"):
        shown("memcpy", live["memcpy"][key], gb(live["memcpy"][key]))
    pairs = live.get("pairs")
    if pairs:
        for link in pairs["links"]:
            for key in ("bandwidth", "out", "back"):
                shown("links", link[key], gb(link[key]))
            shown("links", link["latency"], f"{link['latency'] * 1e6:.0f}")
        for value in pairs["memcpy"].values():
            shown("hosts", value, gb(value))
        assert len(page.numbers["links"]) == 4 * len(pairs["links"])
    text = "".join(page.texts)
    for check in document["checks"]:  # the findings, word for word
        assert visible(check["summary"]) in text
        for line in check.get("evidence", []):
            assert visible(line) in text
    for line in (pairs or {}).get("verdicts", []):
        assert line in text


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_the_page_needs_no_network_and_draws_its_charts(path):
    document = json.loads(path.read_text())
    page = read(render_report(document))
    names = [tag for tag, _ in page.tags]
    assert not {"script", "link", "iframe", "object", "embed", "base"} & set(names)  # no JavaScript, no outside style or font
    for tag, attributes in page.tags:
        for key, value in attributes.items():
            if key in ("src", "href", "xlink:href", "action", "srcset"):
                assert value.startswith(("#", "data:")), (tag, key, value[:80])  # only the page itself and inline images
            assert "url(" not in (value or "") or "url(#" in value, (tag, key, value)
    ids = {attributes.get("id") for _, attributes in page.tags}
    assert SWEEP_ID in ids
    assert ("sweep-all_reduce-fp32" in ids) and ("memcpy-per_rank-all_reduce" in ids)
    if document["live"].get("pairs"):
        assert HEATMAP_ID in ids and "heatmap-cells" in ids
        hosts = len(document["live"]["pairs"]["hosts"])
        assert {f"link-{a}-{b}" for a in range(1, hosts + 1) for b in range(1, hosts + 1) if a != b} <= ids


def _shape(page: Page) -> list[tuple[str, tuple]]:
    """The page's elements and their attribute names (what an injection changes), without their values; of a chart
    only its <svg> element: how many elements matplotlib draws follows the labels' lengths (a long legend label leaves
    room for fewer ticks), so what a chart holds is judged by _drawn_vocabulary."""
    return [(tag, tuple(sorted(attributes))) for (tag, attributes), drawn in zip(page.tags, page.drawn) if not drawn]


def _drawn_vocabulary(page: Page) -> tuple[set[str], set[str]]:
    """The element names and attribute names inside the charts."""
    inside = [(tag, attributes) for (tag, attributes), drawn in zip(page.tags, page.drawn) if drawn]
    return {tag for tag, _ in inside}, {name for _, attributes in inside for name in attributes}


BASE = json.loads((DATA / "four-hosts-node3-shaped.json").read_text())


def _with(hosts: list[str], message: str, backend: str) -> dict:
    """BASE with its host names, one finding's summary, evidence and fix, and its backend replaced."""
    document = json.loads(json.dumps(BASE))
    live = document["live"]
    pairs = live["pairs"]
    rename = dict(zip(pairs["hosts"], hosts))
    pairs["hosts"] = hosts
    for link in pairs["links"]:
        link["a"], link["b"] = rename[link["a"]], rename[link["b"]]
    pairs["memcpy"] = {rename[h]: v for h, v in pairs["memcpy"].items()}
    pairs["slow_hosts"] = [rename[h] for h in pairs["slow_hosts"]]
    pairs["tcp"] = {rename[h]: v for h, v in pairs["tcp"].items()}
    pairs["error"] = None
    live["fabric"]["rows"] = live["fabric"]["rows"][:4]  # a smaller chart: the names matter here, not the sizes
    live["backend"] = backend
    finding = next(c for c in document["checks"] if c["id"] == "live.pairs")
    finding.update(summary=message, evidence=[message, "x" + message], fix=message)
    return document


@pytest.fixture(scope="module")
def plain_page() -> Page:
    return read(render_report(_with(["h1", "h2", "h3", "h4"], "m", "gloo")))


#: What breaks out of HTML text, an attribute, a comment, a <pre>, an SVG or a CDATA section.
HTML_PARTS = ["<", ">", "&", "&amp;", "&lt;", '"', "'", "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "</td></tr></table>",
              "</pre>", "<!--", "-->", "<![CDATA[", "]]>", "<svg onload=alert(1)>", "</svg>", "<style>", "javascript:", "\x1b[31m", "$x$"]


def html_hostile():
    return st.one_of(hostile(), st.lists(st.sampled_from(HTML_PARTS + ["node1", "a"]), min_size=1, max_size=5).map("".join))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(hosts=st.lists(html_hostile(), min_size=4, max_size=4, unique=True), message=html_hostile().filter(bool), backend=html_hostile())
@example(hosts=["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "</td></tr></table>", "a&amp;b<!--"],
         message="</pre><b>fix</b>\r\n\x1b[31m", backend="<svg onload=alert(1)>$x$")
@example(hosts=["]", "Óµ9", '"', "\n"], message="m", backend="_x")  # found by hypothesis: matplotlib drops a legend label that starts with "_"
@example(hosts=["? ", "a", "\n", "[[packages]]"], message="\n", backend="\n!!python/object/apply:os.system\n\n\n!!python/object/apply:os.system")  # found: a long label, fewer ticks
def test_hostile_host_names_and_messages_are_text_and_inject_nothing(plain_page, hosts, message, backend):
    plain = plain_page
    page = read(render_report(_with(hosts, message, backend)))  # a lone surrogate too: written as its escape, never an encoding error
    assert _shape(page) == _shape(plain)  # the same elements with the same attributes: nothing injected, nothing broken
    tags, names = _drawn_vocabulary(page)  # the charts: only what matplotlib draws for plain names, nothing that runs
    plain_tags, plain_names = _drawn_vocabulary(plain)
    assert tags <= plain_tags and names <= plain_names, (tags - plain_tags, names - plain_names)
    text = "".join(page.texts)

    def shown(value: str, line: bool = True) -> str:
        return (visible_line(value) if line else visible(value)).encode("utf-8", "backslashreplace").decode()

    for host in hosts:
        assert shown(host) in text
    assert shown(message, line=False) in text and "fix: " + shown(message, line=False) in text
    assert shown(backend) in text


def test_the_deadline_section_says_what_was_not_measured_and_escapes_the_link_names():
    """--fabric-deadline's part of the page: the bound, the slowest link the sweep was sized to (its bandwidth to the last
    digit, data-v), every size not measured with why; host names from outside are text. No deadline: no section."""
    assert 'id="deadline"' not in render_report(BASE)
    document = json.loads(json.dumps(BASE))
    hostile_host = '<script>alert(1)</script>'
    document["live"]["fabric"]["deadline"] = {"seconds": 40.0, "budget": 22.8, "link": {"a": hostile_host, "b": "node3", "bandwidth": 2409326.7960790466},
                                              "timed": 0.1, "estimate": 16.76, "began": 13.2, "spent": 36.805644}
    document["live"]["fabric"]["skipped"] = [{"backend": "gloo", "collective": "all_gather", "dtype": "fp32", "sizes": [4194304], "why": "deadline"},
                                             {"backend": "gloo", "collective": "all_reduce", "dtype": "bf16", "sizes": [4194304, 16777216], "why": "slow link"}]
    document["live"]["pairs"]["skipped"] = ["measuring again 2 slow link(s) (3.1 s more would pass the 16 s the pairs may take under --fabric-deadline)"]
    html = render_report(document)
    page = read(html)
    text = "".join(page.texts)
    assert "<script>alert(1)</script>" not in html and hostile_host in text
    assert "--fabric-deadline 40 s from the pairs' start, the last sweep ended at 36.8 s" in text
    assert 'data-v="2409326.7960790466"' in html
    rows = [tag for tag in page.tags if tag[0] == "tr"]
    assert ("table", {"id": "skipped"}) in page.tags and len(rows) > 2
    assert "4 MiB, 16 MiB" in text and "slow link" in text and "Pairs: not measured: measuring again 2 slow link(s)" in text


def test_no_pairs_and_no_sweep_still_make_a_page():
    document = json.loads(json.dumps(BASE))
    document["live"]["pairs"] = None
    document["live"]["fabric"] = None
    page = read(render_report(document))
    text = "".join(page.texts)
    assert "No pairs measured" in text and "No sweep" in text
    assert HEATMAP_ID not in {a.get("id") for _, a in page.tags}


@pytest.fixture
def matplotlib_missing(monkeypatch):
    """importlib.util.find_spec answering as it does where matplotlib is not installed."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))


def test_report_without_matplotlib_is_one_sentence_and_the_fix(capsys, tmp_path, matplotlib_missing):
    from compatmatrix.cli import main

    assert main(["doctor", "--live", "--fabric", "--report", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib, which is not installed" in err and "compatmatrix[report]" in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("args,message", [
    (["--live", "--report", "r.html"], "--report draws the --fabric measurements"),
    (["--report", "r.html"], "--report draws what compat doctor --live --fabric measures"),
    (["--live", "--fabric", "--report", "/nonexistent-folder/r.html"], "is not a file in an existing folder"),
    (["--live", "--fabric", "--report", "/proc/compat-report.html"], "cannot be written: its folder /proc refuses a new file ("),  # even for root
])
def test_report_flags_are_usage_errors_before_anything_runs(capsys, args, message):
    from compatmatrix.cli import main

    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unwritable_report_folder_is_refused_before_any_rank_starts(capsys, tmp_path, monkeypatch):
    """--report into a folder that cannot be written failed only after the whole fabric run (its JSON and findings lost):
    the folder is probed (a file created, written, removed) before anything runs, exit 2, and nothing is left in it."""
    import os

    from compatmatrix import cli
    from compatmatrix.live import service

    started = []
    monkeypatch.setattr(service, "run_live", lambda *a, **k: started.append(a))  # FIXTURE: a run that must not start
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() == 0:  # root writes through a mode: a folder that refuses files for root too is /proc's kind
        target = "/proc/fabric.html"
    else:
        folder.chmod(0o555)
        target = str(folder / "fabric.html")
    assert cli.main(["doctor", "--live", "--fabric", "--report", target]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and "refuses a new file" in err and "Pass --report a file in a folder you can write to" in err
    assert "Traceback" not in err and started == []
    folder.chmod(0o755)
    assert list(folder.iterdir()) == []
    assert cli.main(["doctor", "--live", "--fabric", "--report", str(folder / "r.html"), "--pair-deadline", "9999"]) == 2  # a writable one passes the probe
    assert list(folder.iterdir()) == [] and "cannot be written" not in capsys.readouterr().err


@pytest.mark.integration
def test_a_real_run_writes_the_report_of_its_own_json(stock_torch213, tmp_path):
    """The real thing: doctor --live --fabric --report --json; the page holds each number of that same --json."""
    from .test_live_real import live

    report = tmp_path / "fabric.html"
    code, checks, details, _ = live(stock_torch213, "--fabric", "--sizes", "1K,16K", "--no-trainer", "--launcher", "spawn", "--report", str(report))
    assert code == 0, checks
    page = read(report.read_text(encoding="utf-8"))
    values = {cell[0] for cell in page.numbers["sweep"]}
    assert {row["busbw"] for row in details["fabric"]["rows"]} <= values
    assert {row["seconds"] for row in details["fabric"]["rows"]} <= values
    assert {details["memcpy"]["per_rank"], details["memcpy"]["all_ranks"]} <= {cell[0] for cell in page.numbers["memcpy"]}
