"""Background processes (docs/api-decisions.md "Processes"): ``sandbox.processes.start(...)``
answers at once with a Process handle; the process outlives every connection (and the server's
restart), so a handle can be had again by id (``get``). ``output()`` iterates the output from an
offset over server-sent events, reconnecting from the last offset when the connection drops
(never a byte lost or repeated while the server keeps it); bytes it no longer keeps come as a
``gap`` item, never silently. What is read is bounded: a JSON read is at most 1 MiB of output
(the server's limit) and 64 MiB of answer, an SSE line at most 4 MiB."""

from __future__ import annotations

import base64
import time
from typing import Any, AsyncIterator, List, Mapping, Optional, Sequence, Union

import httpx

from .. import _shared
from .. import models as m
from .._shared import CancelToken, ProcessOutput, SseParser, seg
from ..errors import ConnectionError, WarrenApiError, WarrenError
from .transport import AsyncTransport, sleep

Timeout = Optional[float]
Cancel = Optional[CancelToken]

# The server's limit of one :stdin call.
STDIN_CHUNK_BYTES = 64 << 10
# The server's heartbeat is every 15 s: a stream silent for this long is dropped and reconnected.
STREAM_IDLE_SECONDS = 60.0


class AsyncProcessStdin:
    """The process's stdin (started with ``stdin=True`` or a pty)."""

    def __init__(self, process: AsyncProcess) -> None:
        self._process = process

    async def write(self, data: Union[str, bytes], *, timeout: Timeout = None, cancel: Cancel = None) -> int:
        """Writes ``data`` (64 KiB a call, the server's limit); returns the bytes written."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        written = 0
        for at in range(0, len(raw), STDIN_CHUNK_BYTES):
            piece = raw[at : at + STDIN_CHUNK_BYTES]
            body = {"data_base64": base64.b64encode(piece).decode("ascii")}
            r = await self._process._verb("stdin", body, timeout=timeout, cancel=cancel)  # noqa: SLF001
            written += int(r["written"])
        return written

    async def close(self, *, timeout: Timeout = None, cancel: Cancel = None) -> None:
        """Closes stdin (the process reads end of file)."""
        await self._process._verb("stdin", {"close": True}, timeout=timeout, cancel=cancel)  # noqa: SLF001


class AsyncProcess:
    """A background process by id; ``record`` is its record as last read (start, get, wait,
    signal, kill, resize, refresh and the output stream's end update it)."""

    def __init__(self, transport: AsyncTransport, sandbox_id: str, id: str, record: Optional[m.SandboxProcess] = None) -> None:
        self._t = transport
        self.sandbox_id = sandbox_id
        self.id = id
        self.record = record
        self.stdin = AsyncProcessStdin(self)

    def __repr__(self) -> str:
        return f"Process({self.id!r}, state={self.state!r})"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{seg(self.sandbox_id)}/processes/{seg(self.id)}"

    @property
    def state(self) -> Optional[str]:
        return self.record["state"] if self.record else None

    @property
    def exit_code(self) -> Optional[int]:
        return self.record["exit_code"] if self.record else None

    async def _verb(self, verb: str, body: Mapping[str, Any], *, timeout: Timeout, cancel: Cancel) -> Any:
        return await self._t.json("POST", f"{self._path}:{verb}", body=dict(body), timeout=timeout, cancel=cancel)

    async def _record_verb(
        self, verb: str, body: Mapping[str, Any], *, timeout: Timeout, cancel: Cancel
    ) -> m.SandboxProcess:
        record: m.SandboxProcess = await self._verb(verb, body, timeout=timeout, cancel=cancel)
        self.record = record
        return record

    async def refresh(self, *, timeout: Timeout = None, cancel: Cancel = None) -> m.SandboxProcess:
        record: m.SandboxProcess = await self._t.json("GET", self._path, timeout=timeout, cancel=cancel)
        self.record = record
        return record

    async def wait(self, timeout_seconds: Optional[float] = None, *, cancel: Cancel = None) -> m.SandboxProcess:
        """The record once the process ended (exit, kill, timeout, the sandbox's stop, lost), or
        as it is after ``timeout_seconds`` (None: no limit). Long-polls ``:wait`` (60 s a call)."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while True:
            left = 60 if deadline is None else int(deadline - time.monotonic() + 0.999)
            # With a cancel token, shorter long-polls: a cancel is noticed between them.
            step = max(1, min(5 if cancel else 60, left))
            record = await self._record_verb("wait", {"timeout_seconds": step}, timeout=None, cancel=cancel)
            if record["state"] in ("exited", "lost"):
                return record
            if deadline is not None and time.monotonic() >= deadline:
                return record

    async def signal(self, name: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.SandboxProcess:
        """Sends ``name`` (SIGTERM, SIGINT, SIGHUP, SIGKILL, SIGWINCH...) to the process group."""
        return await self._record_verb("signal", {"signal": name}, timeout=timeout, cancel=cancel)

    async def kill(self, *, timeout: Timeout = None, cancel: Cancel = None) -> m.SandboxProcess:
        """SIGKILL (its end_reason is then ``killed``)."""
        return await self._record_verb("kill", {}, timeout=timeout, cancel=cancel)

    async def resize(self, rows: int, cols: int, *, timeout: Timeout = None, cancel: Cancel = None) -> m.SandboxProcess:
        """Resizes the process's terminal (started with ``pty``)."""
        return await self._record_verb("resize", {"rows": int(rows), "cols": int(cols)}, timeout=timeout, cancel=cancel)

    async def read(
        self,
        offset: int = 0,
        max_bytes: Optional[int] = None,
        wait_seconds: Optional[int] = None,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
    ) -> m.ReadSandboxProcessOutputResponse:
        """One read from ``offset``: what is there now, or within ``wait_seconds`` (0-60).
        ``dropped_bytes`` counts the bytes from ``offset`` no longer kept; go on from
        ``next_offset``; ``complete`` once the process ended and all was read."""
        query: dict[str, _shared.QueryValue] = {"offset": int(offset)}
        if max_bytes:
            query["max_bytes"] = int(max_bytes)
        if wait_seconds:
            query["wait_seconds"] = int(wait_seconds)
        r: m.ReadSandboxProcessOutputResponse = await self._t.json(
            "GET", f"{self._path}/output", query=query, timeout=timeout, cancel=cancel
        )
        self.record = r["process"]
        return r

    async def read_text(self, offset: int = 0, *, cancel: Cancel = None) -> str:
        """All output from ``offset`` until the process ends, as text (by ``read``; raises
        WarrenError on a gap: bytes no longer kept)."""
        parts: list[bytes] = []
        while True:
            r = await self.read(offset, wait_seconds=30, cancel=cancel)
            if r["dropped_bytes"]:
                raise WarrenError(f"process {self.id}: {r['dropped_bytes']} bytes from {offset} are no longer kept")
            parts.extend(base64.b64decode(c["data"]) for c in r["chunks"])
            offset = r["next_offset"]
            if r["complete"]:
                return b"".join(parts).decode("utf-8", "replace")

    async def output(
        self,
        offset: int = 0,
        *,
        max_reconnects: int = 5,
        idle_timeout: float = STREAM_IDLE_SECONDS,
        cancel: Cancel = None,
    ) -> AsyncIterator[ProcessOutput]:
        """The output from ``offset`` until the process ends, over server-sent events: each
        item a ``stdout``/``stderr`` chunk or a ``gap`` (bytes the server no longer keeps).
        A dropped connection (or one silent past ``idle_timeout``: the server's heartbeat is
        every 15 s) reconnects from the last offset (``Last-Event-ID``), at most
        ``max_reconnects`` times in a row without output."""
        failures = 0
        while True:
            _shared.check(cancel)
            dropped: BaseException = ConnectionError("the output stream ended without an end event")
            try:
                response = await self._t.send(
                    "GET",
                    f"{self._path}/output:stream",
                    query={"offset": offset},
                    headers={"accept": "text/event-stream", "last-event-id": str(offset)},
                    cancel=cancel,
                    read_timeout=idle_timeout,
                )
            except ConnectionError as error:
                dropped = error
            else:
                if response.status_code != 200:
                    refused = await self._t.error_of(response)
                    if refused.status < 500:
                        raise refused
                    dropped = refused
                else:
                    parser = SseParser()
                    try:
                        broke = False
                        async for raw in response.aiter_bytes():
                            for event in parser.feed(raw):
                                if event.event == "end":
                                    self.record = event.data.get("process", self.record)
                                    return
                                if event.event == "error":
                                    # The server's side of the stream broke: reconnect from the last offset.
                                    dropped = ConnectionError(str(event.data.get("message", "the stream broke")))
                                    broke = True
                                    break
                                item = _shared.process_output(event)
                                if item is None:
                                    continue
                                offset = item.end
                                if item.type != "gap":
                                    failures = 0
                                yield item
                            if broke:
                                break
                            _shared.check(cancel)
                    except (httpx.TransportError, httpx.StreamError) as error:
                        dropped = error
                    finally:
                        await response.aclose()
            failures += 1
            if failures > max_reconnects:
                if isinstance(dropped, WarrenApiError):
                    raise dropped
                raise ConnectionError(f"process output: gave up after {max_reconnects} reconnects: {dropped}")
            await sleep(min(5.0, 0.1 * 2**failures), cancel, None)

    async def output_text(self, offset: int = 0, *, cancel: Cancel = None) -> str:
        """All output (stdout and stderr as they came) until the end, as text; raises
        WarrenError on a gap (bytes no longer kept)."""
        parts: list[bytes] = []
        async for item in self.output(offset, cancel=cancel):
            if item.type == "gap":
                raise WarrenError(f"process {self.id}: bytes {item.offset}-{item.end} are no longer kept")
            parts.append(item.data)
        return b"".join(parts).decode("utf-8", "replace")


class AsyncSandboxProcesses:
    """``sandbox.processes``: start, get and list the sandbox's background processes."""

    def __init__(self, transport: AsyncTransport, sandbox_id: str) -> None:
        self._t = transport
        self.sandbox_id = sandbox_id

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{seg(self.sandbox_id)}/processes"

    async def start(
        self,
        cmd: Sequence[str],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[bool] = None,
        pty: Optional[tuple[int, int]] = None,
        timeout_seconds: Optional[int] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Optional[str] = None,
    ) -> AsyncProcess:
        """Starts ``cmd`` (argv) in the background and returns its handle as soon as it runs.
        ``stdin=True`` gives it a pipe fed by ``process.stdin``; ``pty=(rows, cols)`` a terminal
        (stdin included; all output is then stdout); ``timeout_seconds`` kills it after that long."""
        body: dict[str, Any] = {"cmd": list(cmd)}
        if env:
            body["env"] = dict(env)
        if cwd:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        if pty:
            body["pty"] = {"rows": int(pty[0]), "cols": int(pty[1])}
        if timeout_seconds is not None:
            body["timeout_seconds"] = int(timeout_seconds)
        record: m.SandboxProcess = await self._t.json(
            "POST", self._base, body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )
        return AsyncProcess(self._t, self.sandbox_id, str(record["id"]), record)

    async def get(self, process_id: str, *, timeout: Timeout = None, cancel: Cancel = None) -> AsyncProcess:
        """A handle on a process by id (re-attach, e.g. after a restart of this program)."""
        process = AsyncProcess(self._t, self.sandbox_id, process_id)
        await process.refresh(timeout=timeout, cancel=cancel)
        return process

    async def list(self, *, timeout: Timeout = None, cancel: Cancel = None) -> List[m.SandboxProcess]:
        """The sandbox's processes, newest first (every page)."""
        out: List[m.SandboxProcess] = []
        token = ""
        while True:
            query: dict[str, _shared.QueryValue] = {"page_size": 200, "page_token": token or None}
            page: m.ListSandboxProcessesResponse = await self._t.json(
                "GET", self._base, query=query, timeout=timeout, cancel=cancel
            )
            out.extend(page["processes"])
            token = page["next_page_token"]
            if not token:
                return out
