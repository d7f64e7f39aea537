"""A session whose open connections can be shut down from another thread: how a read in a thread that cannot take
SIGALRM (limits.deadline) is still bounded. Shutting a socket down wakes a recv blocked on it, however slowly the
server trickles its bytes; the read then fails, and the caller says the deadline passed.

Side effects: none until ``sever`` (a shutdown of each socket the session's connections opened).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import requests


class Severable:
    """Tracks the sockets of the connections ``session`` opens from now on (its mounted adapters, direct or through
    a proxy); ``sever`` shuts them down. Mount the adapters first (trust: the TLS decision mounts one)."""

    def __init__(self, session: requests.Session) -> None:
        self.session = session
        self._sockets: list[Any] = []
        self._lock = threading.Lock()
        self._severed = False
        for adapter in session.adapters.values():
            if isinstance(adapter, requests.adapters.HTTPAdapter):
                self._track_adapter(adapter)

    def _opened(self, sock: Any) -> None:
        with self._lock:
            self._sockets.append(sock)
            late = self._severed
        if late:
            _shut(sock)

    def _track_manager(self, manager: Any) -> None:
        classes = getattr(manager, "pool_classes_by_scheme", None)
        if not isinstance(classes, dict):
            return
        tracked = dict(classes)  # the module's dict is shared by every pool manager: a copy is changed
        for scheme, pool_class in classes.items():
            tracked[scheme] = self._tracked_pool(pool_class)
        manager.pool_classes_by_scheme = tracked

    def _tracked_pool(self, pool_class: type) -> type:
        opened = self._opened
        base = pool_class.ConnectionCls

        class TrackedConnection(base):  # type: ignore[misc,valid-type]
            def connect(self) -> None:
                super().connect()
                if getattr(self, "sock", None) is not None:
                    opened(self.sock)

        return type(f"Tracked{pool_class.__name__}", (pool_class,), {"ConnectionCls": TrackedConnection})

    def _track_adapter(self, adapter: requests.adapters.HTTPAdapter) -> None:
        self._track_manager(adapter.poolmanager)
        original = adapter.proxy_manager_for

        def proxy_manager_for(proxy, **proxy_kwargs):
            fresh = proxy not in adapter.proxy_manager
            manager = original(proxy, **proxy_kwargs)
            if fresh:
                self._track_manager(manager)
            return manager

        adapter.proxy_manager_for = proxy_manager_for  # type: ignore[method-assign]

    def sever(self, forever: bool = False) -> None:
        """Shut down every socket opened so far (the reads on them fail); ``forever``: and any opened later, the
        session being of no further use."""
        with self._lock:
            self._severed = self._severed or forever
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock: Any) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: a TLS socket's own would drop its state under a reader
    except (OSError, TypeError):
        pass
