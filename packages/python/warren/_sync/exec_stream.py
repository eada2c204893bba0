# Generated from the async client by packages/python/tools/generate.py: do not edit.
"""``sandbox.exec_stream(cmd)``: the streaming exec (``GET /v1/sandboxes/{id}/exec/stream``,
a WebSocket; docs/api-decisions.md "Streaming exec"). ``output()`` yields ``(stream, bytes)``
as the command writes (``"stdout"`` or ``"stderr"``; a terminal's output all comes on
stdout); ``write``, ``close_stdin``, ``resize`` and ``kill`` act on the running command;
``wait()`` reads what is left (into ``stdout``/``stderr``) and returns how it ended. An
error before the command started (``spawn_failed``, ``sandbox_not_running``, ``not_found``)
is raised by ``exec_stream`` itself."""

from __future__ import annotations

import json
import struct
from typing import Any, Iterator, Literal, Optional, Union

from .. import _shared
from .._shared import ExecStreamResult
from .._ws import BINARY, TEXT, WsConnection
from ..errors import ConnectionError, WarrenError

STDIN, STDOUT, STDERR, RESIZE, STDIN_CLOSE, KILL = 0, 1, 2, 3, 4, 5


class ExecStream:
    def __init__(self, connection: WsConnection) -> None:
        self._connection = connection
        self.result: Optional[ExecStreamResult] = None
        self._failure: Optional[WarrenError] = None
        self._started = False
        self._early: list[tuple[Literal["stdout", "stderr"], bytes]] = []
        self.stdout = bytearray()
        self.stderr = bytearray()

    @classmethod
    def open(cls, url: str, api_key: str, start: dict[str, Any], *, timeout: Optional[float]) -> ExecStream:
        connection = WsConnection.connect(url, api_key, timeout)
        stream = cls(connection)
        connection.send(TEXT, json.dumps(start).encode())
        while not stream._started:
            message = connection.recv()
            if message is None or stream._failure is not None or stream.result is not None:
                break
            chunk = stream._take(*message)
            if chunk is not None:
                stream._early.append(chunk)
        if not stream._started:
            connection.close()
            raise stream._failure or ConnectionError("the exec stream closed before the command started")
        return stream

    def _take(self, opcode: int, payload: bytes) -> Optional[tuple[Literal["stdout", "stderr"], bytes]]:
        """A message of the server: output to hand on, or a control message recorded."""
        if opcode == BINARY:
            if payload[:1] == bytes([STDOUT]):
                return "stdout", payload[1:]
            if payload[:1] == bytes([STDERR]):
                return "stderr", payload[1:]
            return None
        try:
            message = json.loads(payload)
        except ValueError:
            self._failure = ConnectionError("the exec stream sent a message that is not JSON")
            return None
        if not isinstance(message, dict):
            return None
        kind = message.get("type")
        if kind == "started":
            self._started = True
        elif kind == "exit":
            if "exit" in message:
                self.result = ExecStreamResult("completed", int(message["exit"]))
            else:
                self.result = ExecStreamResult("timed_out" if "timeout" in message else "indeterminate")
            self._started = True
        elif kind == "error":
            envelope = message.get("error") if isinstance(message.get("error"), dict) else {}
            status = message.get("status")
            try:
                _shared.decode_answer(
                    status if isinstance(status, int) and status >= 400 else 500, json.dumps(envelope).encode(), None
                )
            except WarrenError as error:
                self._failure = error
        return None

    def output(self) -> Iterator[tuple[Literal["stdout", "stderr"], bytes]]:
        """The command's output as it comes, until it ends (then ``result`` is set)."""
        while self._early:
            yield self._early.pop(0)
        # Until the server closes (as the TypeScript SDK does): output may still come after
        # the exit message, which is sent once the command ended, not once its pipes drained.
        while True:
            message = self._connection.recv()
            if message is None:
                break
            chunk = self._take(*message)
            if chunk is not None:
                yield chunk
        self._connection.close()
        if self.result is None:
            raise self._failure or ConnectionError("the exec stream closed before the command's end")

    def wait(self) -> ExecStreamResult:
        """Reads the rest of the output into ``stdout`` and ``stderr`` and returns the end."""
        if not self._connection.closed:
            for stream, chunk in self.output():
                (self.stdout if stream == "stdout" else self.stderr).extend(chunk)
        if self.result is None:
            raise self._failure or ConnectionError("the exec stream closed before the command's end")
        return self.result

    def write(self, data: Union[str, bytes]) -> None:
        """Sends bytes to the command's stdin."""
        self._connection.send(BINARY, bytes([STDIN]) + (data.encode() if isinstance(data, str) else data))

    def close_stdin(self) -> None:
        self._connection.send(BINARY, bytes([STDIN_CLOSE]))

    def resize(self, rows: int, cols: int) -> None:
        self._connection.send(BINARY, struct.pack("!BHH", RESIZE, max(1, min(rows, 0xFFFF)), max(1, min(cols, 0xFFFF))))

    def kill(self) -> None:
        """SIGKILL to the command's process group."""
        self._connection.send(BINARY, bytes([KILL]))

    def close(self) -> None:
        self._connection.close()
