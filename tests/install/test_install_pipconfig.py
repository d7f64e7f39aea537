"""pip's configuration is read once per run (pipconfig.py), also when a thread reads it ahead while the install's
steps begin: the first caller waits for that reading instead of starting a second pip."""

from __future__ import annotations

import threading

from compatmatrix.install import pipconfig


def test_a_reading_ahead_is_the_one_reading(monkeypatch):
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow_pip():  # a named stand-in for `pip config list`, held until the test lets it answer
        calls.append(1)
        started.set()
        release.wait(10)
        return (("PIP_CERT", "/etc/ca.pem"),)

    monkeypatch.setattr(pipconfig, "_ask_pip", slow_pip)
    pipconfig.forget()
    try:
        pipconfig.read_ahead()
        assert started.wait(10)
        pipconfig.read_ahead()  # under way: no second reading
        threading.Timer(0.2, release.set).start()
        assert pipconfig.config_cert() == "/etc/ca.pem"  # waited for the reading under way
        assert pipconfig.configured_transport() == (("PIP_CERT", "/etc/ca.pem"),)
        assert calls == [1]
    finally:
        release.set()
        pipconfig.forget()
