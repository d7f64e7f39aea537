"""The fabric report opened in a real browser: Debian's chromium, headless (.ci/run installs it; skipped, with the
reason, without it). The page is drawn from a recorded real run (tests/data/fabric/: four network-namespace hosts,
node3 shaped to 10 Mbit/s); chromium renders it, dumps the DOM it built and takes a screenshot (kept in tmp_path, and
named in the failure message); the charts' elements must be in the rendered DOM and the console must hold no error."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from compatmatrix.environment.child import run_child

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

from compatmatrix.render.fabric_html import HEATMAP_ID, SWEEP_ID, render_report  # noqa: E402

pytestmark = pytest.mark.integration  # a real browser: with the other real tests (tests/conftest.py BESIDE: the second worker)

DOCUMENT = Path(__file__).parents[1] / "data" / "fabric" / "four-hosts-node3-shaped.json"
CHROMIUM_S = 60.0  # one chromium run: ~3 s here; the deadline is for a stuck one (run_child kills its whole group)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it when it can)")
    return found


def open_in_chromium(binary: str, page: Path, folder: Path, *extra: str):
    argv = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic", f"--user-data-dir={folder / 'profile'}",
            "--enable-logging=stderr", "--v=0", "--window-size=1300,2400", *extra, page.as_uri()]
    done = run_child(argv, CHROMIUM_S, env={"PATH": "/usr/bin:/bin", "HOME": str(folder)})
    assert not done.timed_out, f"chromium did not finish in {CHROMIUM_S:.0f} s"
    return done


def test_chromium_renders_the_heatmap_and_the_curves_without_a_console_error(tmp_path):
    binary = chromium()
    document = json.loads(DOCUMENT.read_text())
    page = tmp_path / "fabric.html"
    page.write_text(render_report(document), encoding="utf-8")
    shot = tmp_path / "fabric.png"
    dumped = open_in_chromium(binary, page, tmp_path, "--dump-dom")
    pictured = open_in_chromium(binary, page, tmp_path, f"--screenshot={shot}")
    where = f"(screenshot: {shot})"
    assert dumped.returncode == 0 and dumped.stdout_dropped == 0, dumped.stderr[-2000:]
    dom = dumped.stdout.decode("utf-8", "replace")
    console = (dumped.stderr + pictured.stderr).decode("utf-8", "replace")
    # the page has no script: any console line at all (chromium logs "Uncaught ..." as INFO:CONSOLE) is an error
    assert not re.search(r"Uncaught|CONSOLE[:(]", console), f"{console[-3000:]} {where}"
    hosts = len(document["live"]["pairs"]["hosts"])
    # the browser parsed the inline SVG as SVG: the charts' elements are in the DOM it built
    assert re.search(rf'<svg[^>]*\bid="{HEATMAP_ID}"', dom), where
    assert re.search(rf'<svg[^>]*\bid="{SWEEP_ID}"', dom), where
    assert re.search(r'<image\b[^>]*href="data:image/png;base64,[^"]+"[^>]*\bid="heatmap-cells"', dom), where  # the heat-map's cells: an inline PNG
    for a in range(1, hosts + 1):
        for b in range(1, hosts + 1):
            if a != b:
                assert f'id="link-{a}-{b}"' in dom, (a, b, where)
    rows = document["live"]["fabric"]["rows"]
    for collective, dtype in {(r["collective"], r["dtype"]) for r in rows}:
        assert re.search(rf'<g id="sweep-{collective}-{dtype}"[^>]*>\s*<path\b', dom), (collective, dtype, where)  # the curve itself
    assert 'id="memcpy-per_rank-all_reduce"' in dom, where
    assert pictured.returncode == 0 and shot.stat().st_size > 10_000, (pictured.stderr[-2000:], where)
