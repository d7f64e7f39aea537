"""The preflight thread (service.preflight_beside) against a real server on 127.0.0.1 that sends its headers one
byte every 0.3 s: off the main thread no SIGALRM can end the read, so the thread's own connections are shut down at
the preflight limit, and the user gets preflight's own sentence for that host, in time."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from compatmatrix.install.errors import InstallError
from compatmatrix.install.indexes import configure_indexes
from compatmatrix.install.limits import TEST_LIMITS_VARIABLE
from compatmatrix.install.plan import make_plan
from compatmatrix.install.service import InstallOptions, preflight_beside
from compatmatrix.install.trust import trusted_session
from compatmatrix.resolve import resolve

from ..conftest import make_request


@pytest.fixture
def trickle_server():
    """A server on 127.0.0.1 (a free port, bound as port 0) that answers every connection with a header line sent one
    byte every 0.3 s, for as long as the client reads; yields its port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    done = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            for byte in (b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000):
                if done.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.3)

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        server.join(5)
        listener.close()


@pytest.fixture
def trickled_plan(matrix, trickle_server, tmp_path):
    """A plan whose torch host (pytorch-cpu, from --index) is the trickling server; its dependency index a local folder."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    url = f"http://127.0.0.1:{trickle_server}/simple/"
    locations = configure_indexes(matrix, [f"pytorch-cpu={url}", f"pypi={wheels}"])
    plan = make_plan(resolve(matrix, make_request(matrix, "3.11", "torch==2.7.0"), explain=False), locations)
    assert {p.location.host_id for p in plan.packages} == {"pytorch-cpu"}
    return plan, url


def test_a_host_trickling_its_headers_gets_preflights_sentence_at_the_preflight_limit(trickled_plan, monkeypatch):
    plan, url = trickled_plan
    monkeypatch.setenv(TEST_LIMITS_VARIABLE, "preflight_s=2")
    with trusted_session() as session:
        start = time.monotonic()
        checks = preflight_beside(session, plan, InstallOptions(say=lambda line: None))
        with pytest.raises(InstallError) as raised:
            checks.wait()
        took = time.monotonic() - start
        assert not session.adapters["http://"].poolmanager.pools, "the thread used the plan's session"
    text = str(raised.value) + " " + raised.value.fix
    assert f"{url} (pytorch-cpu, from --index) cannot be reached (no complete answer within 2 s)" in text, text
    assert "Pass --index pytorch-cpu=URL (or set COMPAT_INDEX_PYTORCH_CPU)" in text and "--torch-from-pypi" in text, text
    assert 1.5 < took < 3.5, f"the answer took {took:.1f} s with preflight_s=2"
    assert checks._failed == [raised.value], "the thread's own read was not bounded: the wait's budget ended it"


def test_a_cancelled_preflight_ends_its_read_at_once(trickled_plan, monkeypatch):
    """A failure of the main thread (any exception, Ctrl-C too) cancels the thread: its connection is shut down
    and it asks no further host, long before the preflight limit."""
    plan, _ = trickled_plan
    monkeypatch.setenv(TEST_LIMITS_VARIABLE, "preflight_s=30")
    with trusted_session() as session:
        checks = preflight_beside(session, plan, InstallOptions(say=lambda line: None))
        time.sleep(0.8)  # the thread is reading the trickled headers
        start = time.monotonic()
        checks.cancel()
        checks._thread.join(5)
        assert not checks._thread.is_alive() and time.monotonic() - start < 2


# ---------------------------------------------------------------- a pip taken on the probe's word that does not start


def test_a_pip_taken_on_the_probes_word_that_does_not_start_is_replaced(tmp_path):
    """pip_for trusts the environment probe's version of pip (no pip start); when that pip's step then fails and
    the pip does not start (its modules broken), with_pip asks pip_for again the old way and runs the step again; a
    failure of a pip that starts, or of a pip that was started already, is raised as it is."""
    import sys

    from compatmatrix.install.runner import pip_for
    from compatmatrix.install.service import with_pip

    broken = [sys.executable, "-m", "compat_test_no_such_pip"]  # starts no pip: a module that is not there
    runs: list[list[str]] = []

    def step(pip: list[str]) -> str:
        runs.append(pip)
        if pip == broken:
            raise InstallError("pip cannot resolve the dependencies.", "Check the dependency index.")
        return "planned"

    said: list[str] = []
    result, used = with_pip(broken, True, sys.executable, step, said.append)
    assert result == "planned" and used == pip_for(sys.executable) != broken and runs == [broken, used], runs
    assert said and "does not start" in said[0]
    with pytest.raises(InstallError):
        with_pip(broken, False, sys.executable, step, said.append)  # not the probe's word: pip_for started it already

    def failing(pip: list[str]) -> str:
        raise InstallError("pip cannot resolve the dependencies.", "Check the dependency index.")

    with pytest.raises(InstallError):
        with_pip(pip_for(sys.executable), True, sys.executable, failing, said.append)  # it starts: its failure stands
