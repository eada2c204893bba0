"""A small WebSocket client (RFC 6455) for the streaming exec, on the standard library only
(Debian's python3-websockets 10 has no sync client): the frame codec and the handshake are
pure functions shared by ``WsConnection`` (a socket) and ``AsyncWsConnection`` (asyncio
streams). What the server sends is bounded: headers 64 KiB, an error answer's body 64 KiB, a
message 16 MiB; anything malformed ends the connection as a ConnectionError."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from . import _shared
from .errors import ConnectionError, WarrenError

TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0
MAX_HEADER_BYTES = 65_536
MAX_ERROR_BODY_BYTES = 65_536
MAX_MESSAGE_BYTES = 16 * 1_048_576
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    tls: bool
    request: bytes
    key: str


def target(url: str, api_key: str) -> Target:
    """The handshake request for ``url`` (http(s) or ws(s)), the key in the Authorization header."""
    parts = urlsplit(url)
    tls = parts.scheme in ("https", "wss")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    key = base64.b64encode(os.urandom(16)).decode()
    host_header = host if parts.port is None else f"{host}:{port}"
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host_header}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"User-Agent: {_shared.USER_AGENT}",
    ]
    if api_key:
        lines.append(f"Authorization: Bearer {api_key}")
    return Target(host, port, tls, ("\r\n".join(lines) + "\r\n\r\n").encode(), key)


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (lowercase names) of an HTTP answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
        raise ConnectionError("the exec stream's answer is not HTTP")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(status_line[1]), headers


def check_upgrade(status: int, headers: dict[str, str], key: str) -> None:
    accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
    if status != 101 or headers.get("upgrade", "").lower() != "websocket" or headers.get("sec-websocket-accept") != accept:
        raise ConnectionError("the server did not accept the WebSocket")


def refusal(status: int, headers: dict[str, str], body: bytes) -> WarrenError:
    """The API's error for an answer other than 101 (its envelope, or the status alone)."""
    try:
        _shared.decode_answer(status if status >= 400 else 502, body, headers.get("retry-after"))
    except WarrenError as error:
        return error
    return ConnectionError(f"the exec stream was answered HTTP {status}")


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    head = bytearray([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 65_536:
        head.append(0x80 | 126)
        head += struct.pack("!H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", n)
    mask = os.urandom(4)
    head += mask
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if n < 4096 else _mask(payload, mask)
    return bytes(head) + masked


def _mask(payload: bytes, mask: bytes) -> bytes:
    # int arithmetic over the whole payload: fast enough for stdin chunks without numpy.
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")


class FrameParser:
    """Server frames in, whole messages out (fragments joined, control frames passed as they come)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._fragments: list[bytes] = []
        self._fragment_opcode = 0
        self._fragment_bytes = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        out: list[tuple[int, bytes]] = []
        while True:
            frame = self._frame()
            if frame is None:
                break
            fin, opcode, payload = frame
            if opcode >= 0x8:
                out.append((opcode, payload))
                continue
            if opcode != CONTINUATION:
                if self._fragments:
                    raise ConnectionError("the exec stream interleaved two messages")
                self._fragment_opcode = opcode
            elif not self._fragments and not self._fragment_opcode:
                raise ConnectionError("the exec stream continued no message")
            self._fragments.append(payload)
            self._fragment_bytes += len(payload)
            if self._fragment_bytes > MAX_MESSAGE_BYTES:
                raise ConnectionError("the exec stream sent a message over 16 MiB")
            if fin:
                out.append((self._fragment_opcode, b"".join(self._fragments)))
                self._fragments, self._fragment_opcode, self._fragment_bytes = [], 0, 0
        return out

    def _frame(self) -> Optional[tuple[bool, int, bytes]]:
        b = self._buffer
        if len(b) < 2:
            return None
        fin, opcode, masked, n = bool(b[0] & 0x80), b[0] & 0x0F, bool(b[1] & 0x80), b[1] & 0x7F
        if b[0] & 0x70 or masked or opcode not in (TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION):
            raise ConnectionError("the exec stream sent a malformed frame")
        at = 2
        if n == 126:
            if len(b) < 4:
                return None
            n, at = struct.unpack("!H", b[2:4])[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, at = struct.unpack("!Q", b[2:10])[0], 10
        if n > MAX_MESSAGE_BYTES or (opcode >= 0x8 and (n > 125 or not fin)):
            raise ConnectionError("the exec stream sent a frame over its bounds")
        if len(b) < at + n:
            return None
        payload = bytes(b[at : at + n])
        del b[: at + n]
        return fin, opcode, payload


def _head_end(buffer: bytes) -> int:
    end = buffer.find(b"\r\n\r\n")
    if end < 0 and len(buffer) > MAX_HEADER_BYTES:
        raise ConnectionError("the exec stream's answer headers are over 64 KiB")
    return end


class WsConnection:
    """A client WebSocket over a socket. ``recv`` answers pings itself and returns
    ``(opcode, payload)`` of a text or binary message, or None once the connection closed."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._parser = FrameParser()
        self._pending: list[tuple[int, bytes]] = []
        self.closed = False

    @classmethod
    def connect(cls, url: str, api_key: str, timeout: Optional[float] = 30.0) -> WsConnection:
        t = target(url, api_key)
        try:
            sock = socket.create_connection((t.host, t.port), timeout=timeout)
            if t.tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=t.host)
            sock.sendall(t.request)
            buffer = b""
            while (end := _head_end(buffer)) < 0:
                chunk = sock.recv(65_536)
                if not chunk:
                    raise ConnectionError("the exec stream closed before its answer")
                buffer += chunk
        except OSError as error:
            raise ConnectionError(f"could not open the exec stream: {error}") from error
        status, headers = parse_head(buffer[:end])
        rest = buffer[end + 4 :]
        if status != 101:
            length = min(int(headers.get("content-length", "0") or 0), MAX_ERROR_BODY_BYTES)
            try:
                while len(rest) < length:
                    chunk = sock.recv(65_536)
                    if not chunk:
                        break
                    rest += chunk
            except OSError:
                pass
            sock.close()
            raise refusal(status, headers, rest[:length])
        check_upgrade(status, headers, t.key)
        sock.settimeout(None)
        connection = cls(sock)
        connection._pending = connection._parser.feed(rest)
        return connection

    def send(self, opcode: int, payload: bytes) -> None:
        try:
            self._sock.sendall(encode_frame(opcode, payload))
        except OSError as error:
            raise ConnectionError(f"the exec stream broke: {error}") from error

    def recv(self) -> Optional[tuple[int, bytes]]:
        while True:
            while self._pending:
                opcode, payload = self._pending.pop(0)
                if opcode == PING:
                    self.send(PONG, payload)
                elif opcode == CLOSE:
                    self.close()
                    return None
                elif opcode in (TEXT, BINARY):
                    return opcode, payload
            if self.closed:
                return None
            try:
                chunk = self._sock.recv(65_536)
            except OSError as error:
                self.closed = True
                raise ConnectionError(f"the exec stream broke: {error}") from error
            if not chunk:
                self.closed = True
                return None
            self._pending = self._parser.feed(chunk)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._sock.sendall(encode_frame(CLOSE, struct.pack("!H", 1000)))
        except OSError:
            pass  # already gone: nothing to tell the server
        self._sock.close()


class AsyncWsConnection:
    """``WsConnection`` over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._parser = FrameParser()
        self._pending: list[tuple[int, bytes]] = []
        self.closed = False

    @classmethod
    async def connect(cls, url: str, api_key: str, timeout: Optional[float] = 30.0) -> AsyncWsConnection:
        t = target(url, api_key)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(t.host, t.port, ssl=ssl.create_default_context() if t.tls else None, limit=MAX_HEADER_BYTES * 2),
                timeout,
            )
            writer.write(t.request)
            await writer.drain()
            buffer = b""
            while (end := _head_end(buffer)) < 0:
                chunk = await asyncio.wait_for(reader.read(65_536), timeout)
                if not chunk:
                    raise ConnectionError("the exec stream closed before its answer")
                buffer += chunk
        except (OSError, asyncio.TimeoutError) as error:
            raise ConnectionError(f"could not open the exec stream: {error}") from error
        status, headers = parse_head(buffer[:end])
        rest = buffer[end + 4 :]
        if status != 101:
            length = min(int(headers.get("content-length", "0") or 0), MAX_ERROR_BODY_BYTES)
            try:
                while len(rest) < length:
                    chunk = await asyncio.wait_for(reader.read(65_536), timeout)
                    if not chunk:
                        break
                    rest += chunk
            except (OSError, asyncio.TimeoutError):
                pass
            writer.close()
            raise refusal(status, headers, rest[:length])
        check_upgrade(status, headers, t.key)
        connection = cls(reader, writer)
        connection._pending = connection._parser.feed(rest)
        return connection

    async def send(self, opcode: int, payload: bytes) -> None:
        try:
            self._writer.write(encode_frame(opcode, payload))
            await self._writer.drain()
        except OSError as error:
            raise ConnectionError(f"the exec stream broke: {error}") from error

    async def recv(self) -> Optional[tuple[int, bytes]]:
        while True:
            while self._pending:
                opcode, payload = self._pending.pop(0)
                if opcode == PING:
                    await self.send(PONG, payload)
                elif opcode == CLOSE:
                    await self.close()
                    return None
                elif opcode in (TEXT, BINARY):
                    return opcode, payload
            if self.closed:
                return None
            try:
                chunk = await self._reader.read(65_536)
            except OSError as error:
                self.closed = True
                raise ConnectionError(f"the exec stream broke: {error}") from error
            if not chunk:
                self.closed = True
                return None
            self._pending = self._parser.feed(chunk)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.write(encode_frame(CLOSE, struct.pack("!H", 1000)))
            await self._writer.drain()
        except OSError:
            pass  # already gone: nothing to tell the server
        self._writer.close()
