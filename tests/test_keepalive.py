"""The tick's HTTP client (adapters/keepalive.py): kept connections, the one retry of a connection
the server closed while idle, and failures typed by where they happened. Against small servers on
127.0.0.1 and free ports, each stopped by the test that started it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from autoscaler.adapters.keepalive import ConnectFailed, KeepAlivePool, ProtocolFailed, ReadTimeout
from autoscaler.adapters.prometheus import PrometheusClient


class Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, close_after: bool = False) -> None:
        self.connections = 0
        self.ended = 0
        self.paths: list[str] = []
        self.close_after = close_after
        super().__init__(("127.0.0.1", 0), Handler)

    def process_request(self, request, client_address):  # one call per accepted connection
        self.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request):  # the connection ended (the client closed it, or we did)
        self.ended += 1
        super().shutdown_request(request)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Counting

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.server.paths.append(self.path)
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.server.close_after:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(**kw) -> Iterator[Counting]:
    server = Counting(**kw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url_of(server: Counting) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_requests_share_one_kept_connection_and_the_prefix_and_params_are_sent():
    with serving() as server:
        pool = KeepAlivePool(url_of(server) + "/prom/", timeout_s=2)
        try:
            for i in range(20):
                r = pool.get("/api/v1/query", {"query": 'up{job="a b"}', "time": str(i)})
                assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        finally:
            pool.close()
    assert server.connections == 1
    assert server.paths[0] == "/prom/api/v1/query?query=up%7Bjob%3D%22a+b%22%7D&time=0"


def test_an_answer_that_closes_the_connection_is_not_kept():
    with serving(close_after=True) as server:
        pool = KeepAlivePool(url_of(server), timeout_s=2)
        try:
            for _ in range(3):
                assert pool.get("/x").status_code == 200
        finally:
            pool.close()
    assert server.connections == 3


def test_a_kept_connection_the_server_closed_is_retried_once_on_a_fresh_one():
    # A server that answers one request per connection and then closes it without saying so (no
    # "Connection: close"): the pool keeps the connection, and its next use finds it closed.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        accepted: list[int] = []

        def serve() -> None:
            for n in range(3):
                conn, _ = listener.accept()
                accepted.append(n)
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        pool = KeepAlivePool(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=2)
        try:
            assert pool.get("/a").content == b"ok"
            time.sleep(0.2)  # the server's close reaches the client
            assert pool.get("/b").content == b"ok"  # stale: retried on a new connection
            assert pool.get("/c").content == b"ok"
        finally:
            pool.close()
            thread.join(5)
    assert accepted == [0, 1, 2]


def test_failures_are_typed_by_where_they_happened():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectFailed, match="Connection refused"):
        KeepAlivePool(f"http://127.0.0.1:{port}", timeout_s=1).get("/")
    # Accepts, reads, never answers: a read timeout, within about the timeout.
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(1)
        pool = KeepAlivePool(f"http://127.0.0.1:{hole.getsockname()[1]}", timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(ReadTimeout):
            pool.get("/")
        assert time.monotonic() - started < 5
        pool.close()
    # Answers garbage: not HTTP.
    with socket.socket() as junk:
        junk.bind(("127.0.0.1", 0))
        junk.listen(1)

        def garbage() -> None:
            conn, _ = junk.accept()
            conn.recv(65536)
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            conn.close()

        thread = threading.Thread(target=garbage, daemon=True)
        thread.start()
        with pytest.raises(ProtocolFailed, match="BadStatusLine"):
            KeepAlivePool(f"http://127.0.0.1:{junk.getsockname()[1]}", timeout_s=1).get("/")
        thread.join(5)


def test_the_prometheus_client_names_a_black_hole_as_no_answer_within_the_timeout():
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(1)
        url = f"http://127.0.0.1:{hole.getsockname()[1]}"
        with PrometheusClient(url, timeout_s=0.3) as client:
            answer = client.query("up", time.time())
    # connected (the kernel's backlog accepts), then nothing: slow, not unreachable (issue 35)
    assert answer.kind == "slow" and answer.detail == f"connected, but no answer within 0.3 s from {url}"


def test_a_reload_that_moves_a_worker_closes_the_probes_connection_to_its_old_url():
    from autoscaler.adapters.worker_probe import WorkerProbe

    with serving() as old, serving() as kept:
        probe = WorkerProbe(timeout_s=2, health_timeout_s=2)
        try:
            assert probe.healthy(url_of(old))[0] and probe.healthy(url_of(kept))[0]
            assert old.ended == 0 and kept.ended == 0  # both connections kept open
            probe.retain({url_of(kept)})
            deadline = time.monotonic() + 5
            while old.ended == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert old.ended == 1, "the connection to the URL no policy names is still open"
            assert probe.urls() == [url_of(kept)]
            assert probe.healthy(url_of(kept))[0]
            assert kept.connections == 1 and kept.ended == 0  # the kept one is reused, not reopened
        finally:
            probe.close()
