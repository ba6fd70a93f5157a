"""A small asyncio HTTP/1.1 client over raw sockets for the fault tests: it
writes requests by hand, reads as much or as little of the answer as a test
wants, and closes politely (FIN) or rudely (RST through SO_LINGER 0).

Every response is read to the end of the connection (requests carry
`Connection: close`), so a server that cuts an answer short is seen as such:
`parse_response` says whether the body was complete.
"""

import asyncio
import json
import socket
import struct
from dataclasses import dataclass, field


def request_bytes(path, body=None, method="POST", headers=(), close=True):
    """The bytes of one request; body: a JSON value, bytes or None."""
    data = b""
    hdrs = [f"{method} {path} HTTP/1.1", "Host: test"]
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    hdrs += [f"{k}: {v}" for k, v in headers]
    if close:
        hdrs.append("Connection: close")
    return ("\r\n".join(hdrs) + "\r\n\r\n").encode() + data


async def connect(host, port):
    return await asyncio.open_connection(host, port)


def close_now(writer, rst):
    """Closes at once: with rst, the kernel sends a RST instead of a FIN."""
    if rst:
        sock = writer.get_extra_info("socket")
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        writer.transport.abort()
    else:
        writer.close()


async def read_head(reader):
    """(status, {lower-case name: value}) of the response head."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    lines = head.split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for ln in lines[1:]:
        if ln:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_chunk(reader):
    """The next chunk of a chunked body, or None for the last (empty) one."""
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    data = await reader.readexactly(size + 2)
    return data[:-2] if size else None


@dataclass
class Response:
    status: int = 0          # 0: no response head at all
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False   # the whole body arrived (framing satisfied)
    raw: bytes = b""

    def json(self):
        return json.loads(self.body)

    def sse(self):
        """The data: payloads of an SSE body, as str."""
        out = []
        for event in self.body.split(b"\n\n"):
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    out.append(line[5:].strip().decode("utf-8"))
        return out


def parse_response(raw):
    """A Response from the raw bytes of a whole connection."""
    r = Response(raw=raw)
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return r
    lines = raw[:end].decode("latin-1").split("\r\n")
    r.status = int(lines[0].split(" ")[1])
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        r.headers[k.strip().lower()] = v.strip()
    rest = raw[end + 4:]
    if r.headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            nl = rest.find(b"\r\n")
            if nl < 0:
                break
            size = int(rest[:nl].split(b";")[0], 16)
            if len(rest) < nl + 2 + size + 2:
                break
            body += rest[nl + 2:nl + 2 + size]
            rest = rest[nl + 2 + size + 2:]
            if size == 0:
                r.complete = True
                break
        r.body = body
    else:
        n = int(r.headers.get("content-length", "-1"))
        r.body = rest if n < 0 else rest[:n]
        r.complete = n >= 0 and len(rest) >= n
    return r


async def fetch(host, port, data, timeout):
    """Sends data on a new connection and reads until the server closes it."""
    reader, writer = await asyncio.wait_for(connect(host, port), timeout)
    try:
        writer.write(data)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    return parse_response(raw)


def stream_text(events):
    """{choice index: text} and {index: finish_reason} of completion SSE events,
    plus the usage chunk (or None) and whether [DONE] ended them."""
    texts, finish, usage, done = {}, {}, None, False
    for e in events:
        if e == "[DONE]":
            done = True
            continue
        chunk = json.loads(e)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices", []):
            i = c["index"]
            piece = c["text"] if "text" in c else (c.get("delta") or {}).get("content") or ""
            texts[i] = texts.get(i, "") + piece
            if c.get("finish_reason"):
                finish[i] = c["finish_reason"]
    return texts, finish, usage, done
