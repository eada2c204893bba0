"""What the sync and async clients share, with no I/O: headers, answers, retry decisions,
exec outcomes, the SSE parser, event ids and the cancel token."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Union
from urllib.parse import quote

from .errors import CancelledError, WarrenApiError, WarrenError, error_from_response

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
USER_AGENT = "warren-python/0.1"
RETRYABLE_STATUS = frozenset({429, 503})
_DIGITS = re.compile(r"^\d{1,6}$")
# An answer's body is read whole: bounded (the largest contract answer, a telemetry SQL page, is far below).
MAX_ANSWER_BYTES = 64 * 1_048_576
MAX_SSE_LINE_BYTES = 4 * 1_048_576

QueryValue = Union[str, int, bool, None]


def seg(value: str) -> str:
    """One path segment, percent-encoded."""
    return quote(value, safe="")


def env_api_key(api_key: Optional[str]) -> str:
    return api_key if api_key is not None else os.environ.get("WARREN_API_KEY", "")


def env_base_url(base_url: Optional[str]) -> str:
    url = base_url if base_url is not None else os.environ.get("WARREN_API_URL", DEFAULT_BASE_URL)
    return url.rstrip("/")


def clean_query(query: Optional[Mapping[str, QueryValue]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in (query or {}).items():
        if value is None:
            continue
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def request_headers(
    api_key: str, method: str, idempotency_key: Optional[str], extra: Optional[Mapping[str, str]]
) -> dict[str, str]:
    headers = {"accept": "application/json", "user-agent": USER_AGENT}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    if extra:
        headers.update(extra)
    if method not in ("GET", "HEAD"):
        # One key per logical call, reused by every retry of it.
        headers["idempotency-key"] = idempotency_key or str(uuid.uuid4())
    return headers


def encode_body(body: object) -> Optional[bytes]:
    if body is None:
        return None
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def decode_answer(status: int, content: bytes, retry_after: Optional[str]) -> Any:
    """The JSON of a 2xx answer; an error status raises its WarrenApiError."""
    parsed: Any = {}
    if content:
        try:
            parsed = json.loads(content)
        except ValueError:
            text = content[:200].decode("utf-8", "replace")
            if 200 <= status < 300:
                raise error_from_response(502, {"code": "internal", "message": text}, None) from None
            parsed = {"message": text}
    if not 200 <= status < 300:
        raise error_from_response(status, parsed, retry_after)
    return parsed


def backoff(base: float, attempt: int) -> float:
    return float(min(8.0, base * 2**attempt))


def retry_delay(retry_after: Optional[str], attempt: int, base: float, max_retry_after: float) -> Optional[float]:
    """The wait before retrying a 429/503, or None when the server's wait is past our ceiling."""
    if retry_after is not None and _DIGITS.match(retry_after):
        seconds = float(retry_after)
        return None if seconds > max_retry_after else seconds
    return backoff(base, attempt)


def in_flight_delay(
    retry_after: Optional[str],
    content: bytes,
    attempt: int,
    elapsed: float,
    base: float,
    max_retry_after: float,
    budget: float,
) -> Optional[float]:
    """The wait before retrying a 409, or None when it is not an in-flight key's or the budget is spent."""
    if retry_after is None or not _DIGITS.match(retry_after):
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("code") != "operation_conflict":
        return None
    delay = min(float(retry_after), max_retry_after) + min(2.0, base * attempt)
    return None if elapsed + delay > budget else delay


class CancelToken:
    """Cancels the calls given it, from any thread: checked before every attempt, during
    retry and long-poll waits, and between tail items (an attempt in flight runs to its own
    ``timeout``). Async code may also cancel its task."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise CancelledError("cancelled")


def check(cancel: Optional[CancelToken]) -> None:
    if cancel is not None:
        cancel.raise_if_cancelled()


def remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else deadline - time.monotonic()


@dataclass(frozen=True)
class ExecResult:
    """The three outcomes of an exec (contract 4.4), told apart by ``kind``."""

    kind: Literal["completed", "timed_out", "indeterminate"]
    stdout: str
    stderr: str
    truncated: bool
    exit: Optional[int] = None


@dataclass(frozen=True)
class ExecStreamResult:
    """How a streamed command ended: ``completed`` (with ``exit``), ``timed_out`` or
    ``indeterminate`` (ExecSandbox's outcomes; nothing streamed is ever truncated)."""

    kind: Literal["completed", "timed_out", "indeterminate"]
    exit: Optional[int] = None


def exec_result(raw: Mapping[str, Any]) -> ExecResult:
    stdout = str(raw.get("stdout", ""))
    stderr = str(raw.get("stderr", ""))
    truncated = bool(raw.get("truncated", False))
    if "exit" in raw:
        return ExecResult("completed", stdout, stderr, truncated, int(raw["exit"]))
    if "timeout" in raw:
        return ExecResult("timed_out", stdout, stderr, truncated)
    return ExecResult("indeterminate", stdout, stderr, truncated)


@dataclass(frozen=True)
class TailEvent:
    """One item of the run tail: ``id`` is its resume cursor (None on ``end``); ``event`` is
    ``end`` on the last item and None on telemetry events."""

    data: dict[str, Any]
    id: Optional[str] = None
    event: Optional[str] = None


class SseParser:
    """An incremental server-sent-events parser (comments skipped); a line over 4 MiB is an error."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._id: Optional[str] = None
        self._event: Optional[str] = None

    def feed(self, chunk: bytes) -> list[TailEvent]:
        self._buffer += chunk
        out: list[TailEvent] = []
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                break
            line = self._buffer[:newline].rstrip(b"\r").decode("utf-8", "replace")
            self._buffer = self._buffer[newline + 1 :]
            item = self._line(line)
            if item is not None:
                out.append(item)
        if len(self._buffer) > MAX_SSE_LINE_BYTES:
            raise WarrenError("run tail: a line over 4 MiB")
        return out

    def _line(self, line: str) -> Optional[TailEvent]:
        if line == "":
            item: Optional[TailEvent] = None
            if self._data or self._event:
                text = "\n".join(self._data)
                try:
                    parsed = json.loads(text) if text else {}
                except ValueError:
                    parsed = {"text": text}
                if not isinstance(parsed, dict):
                    parsed = {"value": parsed}
                item = TailEvent(data=parsed, id=self._id, event=self._event or None)
            self._data, self._id, self._event = [], None, None
            return item
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self._data.append(value)
        elif field == "id":
            self._id = value
        elif field == "event":
            self._event = value
        return None


@dataclass(frozen=True)
class ProcessOutput:
    """One item of a background process's output: a ``stdout``/``stderr`` chunk (``data`` the
    bytes from ``offset`` to ``end``) or a ``gap``: bytes ``offset`` to ``end`` the server no
    longer keeps (the reader fell behind its 1 MiB buffer), ``data`` empty."""

    type: Literal["stdout", "stderr", "gap"]
    offset: int
    end: int
    data: bytes = b""


def process_output(event: TailEvent) -> Optional[ProcessOutput]:
    """The output item of one event of a process's output stream (None for other events)."""
    if event.event in ("stdout", "stderr"):
        data = base64.b64decode(str(event.data.get("data", "")))
        at = int(event.data["offset"])
        return ProcessOutput("stdout" if event.event == "stdout" else "stderr", at, at + len(data), data)
    if event.event == "gap":
        return ProcessOutput("gap", int(event.data["from"]), int(event.data["to"]))
    return None


_ULID = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_event_id(now_ms: Optional[int] = None) -> str:
    """A 26-character ULID-shaped event id, so a retried annotate converges on one annotation."""
    value = int(time.time() * 1000) if now_ms is None else now_ms
    head = ""
    for _ in range(10):
        head = _ULID[value % 32] + head
        value //= 32
    return head + "".join(_ULID[b % 32] for b in secrets.token_bytes(16))


def api_error_code(error: BaseException) -> Optional[str]:
    return error.code if isinstance(error, WarrenApiError) else None
