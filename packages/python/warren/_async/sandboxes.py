"""Sandboxes: ``warren.sandboxes.create(...)`` returns a Sandbox handle (wait, exec, files,
processes, stop, wake, snapshot, update, delete; as a context manager it deletes the sandbox)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Mapping, Optional, Sequence, Union, cast

from .. import models as m
from .._shared import CancelToken, ExecResult, QueryValue, exec_result, seg
from ..errors import NotFoundError, SandboxStateError
from .exec_stream import AsyncExecStream
from .files import AsyncSandboxFiles
from .processes import AsyncSandboxProcesses
from .resources import pages
from .transport import AsyncTransport

Timeout = Optional[float]
Cancel = Optional[CancelToken]
Key = Optional[str]

# States a sandbox never leaves by itself towards running.
DEAD_STATES = frozenset({"failed", "terminated", "terminating", "quarantined"})
WAIT_STEP_SECONDS = 25


def _path(id: str) -> str:
    return f"/v1/sandboxes/{seg(id)}"


class AsyncSandbox:
    """A sandbox by id; ``record`` is the record as last read (create, get, list, wait_until and
    refresh update it), ``run_id`` the ambient run receiving its telemetry (known after create)."""

    def __init__(self, transport: AsyncTransport, id: str, record: Optional[m.SandboxRecord] = None) -> None:
        self._t = transport
        self.id = id
        self.record = record
        self.run_id: Optional[str] = None
        self.files = AsyncSandboxFiles(transport, id)
        self.processes = AsyncSandboxProcesses(transport, id)

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.state!r})"

    @property
    def state(self) -> Optional[str]:
        return self.record["state"] if self.record else None

    async def refresh(self, *, timeout: Timeout = None, cancel: Cancel = None) -> m.SandboxRecord:
        r = await self._t.json("GET", _path(self.id), timeout=timeout, cancel=cancel)
        self.record = r["sandbox"]
        return r["sandbox"]  # type: ignore[no-any-return]

    async def wait_until(
        self,
        state: str,
        *,
        timeout: float = 300,
        cancel: Cancel = None,
        on_state: Optional[Callable[[str], None]] = None,
        on_progress: Optional[Callable[[Mapping[str, Any]], None]] = None,
    ) -> m.SandboxRecord:
        """Long-polls GetSandbox until the sandbox is in ``state`` (``timeout`` seconds, 0: no
        limit). Raises SandboxStateError when it reaches a state it will not leave towards it."""
        deadline = time.monotonic() + timeout if timeout > 0 else None
        last: Optional[str] = None
        while True:
            left = WAIT_STEP_SECONDS if deadline is None else int(deadline - time.monotonic() + 0.999)
            polling = on_progress is not None and last in (None, "materializing") and state != "materializing"
            # With a cancel token, shorter long-polls: a cancel is noticed between them.
            step = max(1, min(1 if polling else (5 if cancel else WAIT_STEP_SECONDS), left))
            r = await self._t.json(
                "GET", _path(self.id), query={"wait_state": state, "wait_timeout_seconds": step}, cancel=cancel
            )
            record = r["sandbox"]
            self.record = record
            seen = str(record["state"])
            if seen != last and on_state:
                on_state(seen)
            if record.get("progress") and on_progress:
                on_progress(record["progress"])
            last = seen
            if seen == state:
                return record  # type: ignore[no-any-return]
            if seen in DEAD_STATES and state not in DEAD_STATES:
                reason = record.get("state_reason")
                detail = f": {reason.get('code')}: {reason.get('message')}" if reason else ""
                raise SandboxStateError(self.id, seen, f"sandbox {self.id} is {seen}{detail}", reason)
            if deadline is not None and time.monotonic() >= deadline:
                raise SandboxStateError(
                    self.id, seen, f"sandbox {self.id} is still {seen} after {timeout} s", None, "sandbox_wait_timeout"
                )

    async def exec(
        self,
        cmd: Sequence[str],
        *,
        timeout_seconds: Optional[int] = None,
        secret_environment: Optional[Sequence[Mapping[str, str]]] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> ExecResult:
        """Runs ``cmd`` (argv, not a shell line); one Idempotency-Key covers every retry, so a
        retried exec replays the recorded outcome instead of running twice."""
        body: dict[str, Any] = {"cmd": list(cmd)}
        if timeout_seconds is not None:
            body["timeout_seconds"] = timeout_seconds
        if secret_environment:
            body["secret_environment"] = [dict(e) for e in secret_environment]
        raw = await self._t.json(
            "POST", f"{_path(self.id)}:exec", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )
        return exec_result(raw)

    async def exec_stream(
        self,
        cmd: Sequence[str],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        tty: Optional[tuple[int, int]] = None,
        timeout_seconds: Optional[int] = None,
        secret_environment: Optional[Sequence[Mapping[str, str]]] = None,
        stdin: Union[str, bytes, None] = None,
        connect_timeout: Optional[float] = 30.0,
    ) -> AsyncExecStream:
        """Runs ``cmd`` over the streaming exec: output as it comes, stdin, an optional terminal
        (``tty=(rows, cols)``). ``stdin`` is written and closed at once. Not retried: a stream
        that broke may have run."""
        start: dict[str, Any] = {"cmd": list(cmd)}
        if env:
            start["env"] = dict(env)
        if cwd:
            start["cwd"] = cwd
        if tty:
            start["tty"] = {"rows": tty[0], "cols": tty[1]}
        if timeout_seconds is not None:
            start["timeout_seconds"] = timeout_seconds
        if secret_environment:
            start["secret_environment"] = [dict(e) for e in secret_environment]
        url = f"{self._t.base_url}{_path(self.id)}/exec/stream"
        stream = await AsyncExecStream.open(url, self._t.api_key, start, timeout=connect_timeout)
        if stdin is not None:
            await stream.write(stdin)
            await stream.close_stdin()
        return stream

    async def update(
        self, body: m.UpdateSandboxBody, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.UpdateSandboxResponse:
        return await self._t.json(  # type: ignore[no-any-return]
            "PATCH", _path(self.id), body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )

    async def stop(self, *, wait: bool = True, timeout: Timeout = None, cancel: Cancel = None) -> None:
        """Asks for ``stopped``; ``wait`` (default) waits until it is."""
        await self.update({"state": "stopped"}, timeout=timeout, cancel=cancel)
        if wait:
            await self.wait_until("stopped", cancel=cancel)

    async def wake(self, *, wait: bool = True, timeout: Timeout = None, cancel: Cancel = None) -> None:
        """Asks for ``running`` again; ``wait`` (default) waits until it is."""
        await self.update({"state": "running"}, timeout=timeout, cancel=cancel)
        if wait:
            await self.wait_until("running", cancel=cancel)

    async def snapshot(
        self,
        *,
        name: Optional[str] = None,
        wait_remote: Optional[bool] = None,
        wait_timeout_seconds: Optional[int] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.SnapshotResult:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if wait_remote is not None:
            body["wait_remote"] = wait_remote
        if wait_timeout_seconds is not None:
            body["wait_timeout_seconds"] = wait_timeout_seconds
        return await self._t.json(  # type: ignore[no-any-return]
            "POST",
            f"{_path(self.id)}:snapshot",
            body=body,
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def ssh_token(
        self, *, ttl_seconds: Optional[int] = None, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.IssueSshTokenResponse:
        """A short-lived token that logs in to the SSH gateway as this sandbox (the SSH password)."""
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds is not None else {}
        return await self._t.json(  # type: ignore[no-any-return]
            "POST", f"{_path(self.id)}:issueSshToken", body=body, timeout=timeout, cancel=cancel
        )

    async def endpoint_token(
        self, port: int, *, ttl_seconds: Optional[int] = None, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.IssueEndpointTokenResponse:
        """A short-lived token that opens one port endpoint of this sandbox."""
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds is not None else {}
        return await self._t.json(  # type: ignore[no-any-return]
            "POST", f"{_path(self.id)}/endpoints/{int(port)}:token", body=body, timeout=timeout, cancel=cancel
        )

    async def delete(self, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None) -> None:
        """Deletes the sandbox (asynchronous on the server: it reads ``terminating`` until gone)."""
        await self._t.json("DELETE", _path(self.id), timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self, kind: Optional[type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            await self.delete()
        except NotFoundError:
            pass



class AsyncSandboxes:
    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(
        self,
        body: Optional[m.CreateSandboxBody] = None,
        *,
        wait: bool = True,
        wait_timeout: float = 300,
        on_state: Optional[Callable[[str], None]] = None,
        on_progress: Optional[Callable[[Mapping[str, Any]], None]] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> AsyncSandbox:
        """Creates a sandbox and (unless ``wait=False``) waits until it is running."""
        created = await self._t.json(
            "POST", "/v1/sandboxes", body=body or {}, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )
        sandbox = AsyncSandbox(self._t, str(created["id"]))
        sandbox.run_id = created.get("run_id")
        if wait:
            await sandbox.wait_until(
                "running", timeout=wait_timeout, cancel=cancel, on_state=on_state, on_progress=on_progress
            )
        else:
            await sandbox.refresh(cancel=cancel)
        return sandbox

    async def from_snapshot(
        self,
        snapshot_id: str,
        body: Optional[m.CreateSandboxBody] = None,
        *,
        wait: bool = True,
        wait_timeout: float = 300,
        on_state: Optional[Callable[[str], None]] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> AsyncSandbox:
        """Restores ``snapshot_id`` into a new sandbox (durable storage by default, as the contract says)."""
        full = cast(m.CreateSandboxBody, {**(body or {}), "snapshot_id": snapshot_id})
        return await self.create(
            full,
            wait=wait,
            wait_timeout=wait_timeout,
            on_state=on_state,
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def get(self, id_or_name: str, *, timeout: Timeout = None, cancel: Cancel = None) -> AsyncSandbox:
        """A sandbox by id, or by name within the credential's project."""
        r = await self._t.json("GET", _path(id_or_name), timeout=timeout, cancel=cancel)
        return AsyncSandbox(self._t, str(r["sandbox"]["id"]), r["sandbox"])

    async def list(
        self, query: Optional[Mapping[str, QueryValue]] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> AsyncIterator[AsyncSandbox]:
        """Every sandbox, newest first, fetching pages as the iteration goes."""
        async for record in pages(self._t, "/v1/sandboxes", query, "sandboxes", timeout, cancel):
            yield AsyncSandbox(self._t, str(record["id"]), record)


class AsyncSnapshots:
    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    def list(
        self, query: Optional[Mapping[str, QueryValue]] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> AsyncIterator[m.SnapshotRecord]:
        return pages(self._t, "/v1/snapshots", query, "snapshots", timeout, cancel)

    async def delete(self, id: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None) -> None:
        await self._t.json(
            "DELETE", f"/v1/snapshots/{seg(id)}", timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )
