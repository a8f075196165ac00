"""`glassroom serve` under a burst of live streams: the limit holds (the rest get 503 with one line)
and the ordinary API still answers while the streams are open."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

from web_helpers import Server, write_run

from glassroom.web.server import MAX_STREAMS

BURST = 300


def status_line(sock: socket.socket) -> bytes:
    got = b""
    while b"\r\n" not in got:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def body_of(sock: socket.socket, head: bytes) -> bytes:
    """The body of a refused response, by its Content-Length (the connection stays open)."""
    got = head
    while b"\r\n\r\n" not in got:
        got += sock.recv(4096)
    headers, _, body = got.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(4096)
    return body


def test_a_burst_of_streams_stops_at_the_limit_and_the_api_still_answers(tmp_path):
    write_run(tmp_path / "lab" / "r", steps=10)
    with Server(tmp_path / "lab") as server:
        request = (b"GET /api/stream?run=r HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port)
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(BURST)]
        try:
            for sock in socks:   # every request is in flight before any answer is read
                sock.sendall(request)
            heads = [status_line(sock) for sock in socks]
            accepted = [h for h in heads if h.startswith(b"HTTP/1.1 200")]
            refused = [(s, h) for s, h in zip(socks, heads) if h.startswith(b"HTTP/1.1 503")]
            assert 1 <= len(accepted) <= MAX_STREAMS, [h.split(b"\r\n")[0] for h in heads][:5]
            assert len(accepted) + len(refused) == BURST
            for sock, head in refused[:10]:
                body = body_of(sock, head)
                assert body.count(b"\n") == 0 and "live pages are open" in json.loads(body)["error"]
            # The ordinary API answers while the accepted streams are open and polling.
            started = time.monotonic()
            with urllib.request.urlopen(server.url + "/api/run?run=r", timeout=10) as resp:
                assert resp.status == 200 and json.loads(resp.read())
            assert time.monotonic() - started < 10
        finally:
            for sock in socks:
                sock.close()
