"""A client that behaves like a browser uploading a large form: it sends the
whole request body before it reads a byte of the answer, over a raw socket (httpx
reads while it sends, so it would see an early answer that a browser misses)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

CHUNK = 64 * 1024


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def send_whole_body_then_read(url: str, path: str, size: int, *, chunked: bool) -> Answer:
    """POST ``size`` bytes to ``path``, all of them, then read the answer until the
    server closes. A reset while sending or reading raises ``ConnectionResetError``
    (or ``BrokenPipeError``): that is the failure the caller tests for."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nConnection: close\r\n{framing}\r\n\r\n"
    )
    data = b"1" * CHUNK
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(head.encode())
        sent = 0
        while sent < size:
            n = min(CHUNK, size - sent)
            sock.sendall(b"%x\r\n%s\r\n" % (n, data[:n]) if chunked else data[:n])
            sent += n
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        raw = b""
        while block := sock.recv(CHUNK):
            raw += block
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return Answer(int(lines[0].split()[1]), headers, body)
