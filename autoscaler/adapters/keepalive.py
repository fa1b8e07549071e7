"""A small keep-alive HTTP/1.1 client on the standard library, for the requests a tick makes.

A tick of ``autoscaler run`` makes a dozen small GETs (the Prometheus queries, a worker's
``/health``). With httpx each cost about 1.4 ms of client CPU on loopback, with ``http.client``
0.34 ms (bench/README.md): most of httpx's is building and parsing URLs, headers and cookies
that these requests never need. This keeps what they need: a pool of open connections to one
base URL (thread safe: the Prometheus queries of a tick run concurrently), a timeout per socket
operation as httpx's, one retry of a GET on a kept connection the server had closed (a
keep-alive race, never a second try of a request that was answered or timed out), and failures
typed by where they happened (connecting, or waiting for the answer).
"""

from __future__ import annotations

import http.client
import ssl
import threading
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

# A kept connection the server closed while it sat idle fails on its next use in one of these ways
# before any byte of an answer arrives; a fresh connection is then tried once.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class ConnectFailed(Exception):
    """No connection: refused, unresolvable, unroutable (``str`` is the OS's own text)."""


class ConnectTimeout(Exception):
    """No connection within the timeout."""


class ReadTimeout(Exception):
    """Connected, but no (whole) answer within the timeout."""


class ProtocolFailed(Exception):
    """Connected, but the answer was not HTTP, or the connection broke in the middle of it."""


class _Stale(Exception):
    """A kept connection failed before any answer (the server had closed it)."""


@dataclass(frozen=True, slots=True)
class Response:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class KeepAlivePool:
    """GETs to one base URL (``http(s)://host[:port][/prefix]``) over kept connections."""

    def __init__(self, base_url: str, *, timeout_s: float, max_idle: int = 8,
                 headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s)://host[:port] URL")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.max_idle = max_idle
        self.headers = {"Host": parts.netloc.rpartition("@")[2], "Accept-Encoding": "identity",
                        "Connection": "keep-alive", **(headers or {})}
        self._ssl = ssl.create_default_context() if self.https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _new(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._ssl is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout_s, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(str(exc)) from exc
        except OSError as exc:  # refused, no route, unresolvable (socket.gaierror), a TLS failure
            conn.close()
            raise ConnectFailed(str(exc)) from exc
        return conn

    def _take(self) -> http.client.HTTPConnection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def get(self, path: str, params: dict[str, str] | None = None, *, timeout_s: float | None = None) -> Response:
        """GET ``prefix + path`` (``params`` URL-encoded). Raises ConnectFailed, ConnectTimeout,
        ReadTimeout or ProtocolFailed; any HTTP status is an answer."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        target = self.prefix + path + ("?" + urlencode(params) if params else "")
        conn = self._take()
        if conn is not None:
            try:
                return self._send(conn, target, timeout_s, kept=True)
            except _Stale:
                pass  # closed by the server while idle: once more on a fresh connection
        return self._send(self._new(timeout_s), target, timeout_s, kept=False)

    def _send(self, conn: http.client.HTTPConnection, target: str, timeout_s: float, *, kept: bool) -> Response:
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        try:
            conn.request("GET", target, headers=self.headers)
            answer = conn.getresponse()
            content = answer.read()
        except _STALE as exc:
            conn.close()
            if kept:
                raise _Stale() from exc
            raise ProtocolFailed(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            conn.close()
            raise ReadTimeout(str(exc)) from exc
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            raise ProtocolFailed(f"{type(exc).__name__}: {exc}") from exc
        headers = {k.lower(): v for k, v in answer.getheaders()}
        if answer.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return Response(answer.status, headers, content)
