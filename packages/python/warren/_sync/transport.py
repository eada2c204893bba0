# Generated from the async client by packages/python/tools/generate.py: do not edit.
"""The request layer over httpx. Every logical call gets one Idempotency-Key (a mutating one),
reused by its retries; 429, 503 and connection failures are retried honouring Retry-After; so
is a 409 operation_conflict with Retry-After on a keyed call, for a bounded time. Every call
takes a ``timeout`` (seconds for the whole logical call, retries included) and a ``cancel``
token."""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

import httpx

from .. import _shared
from .._shared import CancelToken, QueryValue
from ..errors import ConnectionError, PushError, WarrenApiError, WarrenTimeoutError


def sleep(seconds: float, cancel: Optional[CancelToken], deadline: Optional[float]) -> None:
    """Sleeps, waking to notice a cancel; a wait past the call's deadline raises at once."""
    left = _shared.remaining(deadline)
    if left is not None and seconds > left:
        raise WarrenTimeoutError("the call's timeout ends before its next retry")
    end = time.monotonic() + seconds
    while True:
        _shared.check(cancel)
        step = end - time.monotonic()
        if step <= 0:
            return
        time.sleep(min(step, 0.05) if cancel is not None else step)


class Transport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_retries: int = 3,
        retry_base_delay: float = 0.25,
        max_retry_after: float = 10.0,
        in_flight_retry: float = 30.0,
        request_timeout: Optional[float] = 300.0,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.max_retry_after = max_retry_after
        self.in_flight_retry = in_flight_retry
        self.request_timeout = request_timeout
        self._own_client = http_client is None
        self.http = http_client or httpx.Client(timeout=httpx.Timeout(request_timeout, connect=10.0))

    def close(self) -> None:
        if self._own_client:
            self.http.close()

    def _timeout(self, deadline: Optional[float], read: Optional[float] = None) -> httpx.Timeout:
        if read is not None:
            return httpx.Timeout(read, connect=10.0)
        left = _shared.remaining(deadline)
        if left is None:
            return httpx.Timeout(self.request_timeout, connect=10.0)
        if left <= 0:
            raise WarrenTimeoutError("the call's timeout ran out")
        per = left if self.request_timeout is None else min(left, self.request_timeout)
        return httpx.Timeout(per, connect=min(per, 10.0))

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        body: object = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
        cancel: Optional[CancelToken] = None,
        retry_on_connection_error: bool = True,
        read_timeout: Optional[float] = None,
        content: Optional[bytes] = None,
        content_type: Optional[str] = None,
    ) -> httpx.Response:
        """Sends one logical call (retrying as described above) and returns the last attempt's
        response, streaming: its body is unread (the caller reads or closes it). ``body`` is
        sent as JSON; ``content`` as raw bytes of ``content_type`` instead."""
        all_headers = _shared.request_headers(self.api_key, method, idempotency_key, headers)
        if content is None:
            content = _shared.encode_body(body)
            if content is not None:
                all_headers["content-type"] = "application/json"
        else:
            all_headers["content-type"] = content_type or "application/octet-stream"
        mutating = method not in ("GET", "HEAD")
        params = _shared.clean_query(query)
        url = self.base_url + path
        started = time.monotonic()
        deadline = started + timeout if timeout is not None else None
        in_flight_attempt = 0
        attempt = 0
        while True:
            _shared.check(cancel)
            request = self.http.build_request(
                method, url, params=params, content=content, headers=all_headers, timeout=self._timeout(deadline, read_timeout)
            )
            try:
                response = self.http.send(request, stream=True)
            except httpx.TransportError as error:
                left = _shared.remaining(deadline)
                if left is not None and left <= 0:
                    raise WarrenTimeoutError(f"{method} {path}: the call's timeout ran out") from error
                if attempt >= self.max_retries or not retry_on_connection_error:
                    raise ConnectionError(f"could not reach {self.base_url} ({method} {path}): {error}") from error
                sleep(_shared.backoff(self.retry_base_delay, attempt), cancel, deadline)
                attempt += 1
                continue
            status = response.status_code
            retry_after = response.headers.get("retry-after")
            if status == 409 and mutating:
                text = self._read(response)
                delay = _shared.in_flight_delay(
                    retry_after,
                    text,
                    in_flight_attempt,
                    time.monotonic() - started,
                    self.retry_base_delay,
                    self.max_retry_after,
                    self.in_flight_retry,
                )
                in_flight_attempt += 1
                if delay is None:
                    return response
                sleep(delay, cancel, deadline)
                continue  # its own budget, not max_retries
            if status not in _shared.RETRYABLE_STATUS or attempt >= self.max_retries:
                return response
            wait = _shared.retry_delay(retry_after, attempt, self.retry_base_delay, self.max_retry_after)
            # A quota refusal names a wait; one past our ceiling is answered now rather than slept through.
            if wait is None:
                return response
            response.close()
            sleep(wait, cancel, deadline)
            attempt += 1

    def read_bounded(self, response: httpx.Response) -> bytes:
        """The body of ``response``, at most 64 MiB (more is an error, never buffered whole)."""
        return self._read(response)

    def _read(self, response: httpx.Response) -> bytes:
        """The body, bounded (a larger one is an error, never buffered whole)."""
        if response.is_stream_consumed:
            return response.content
        parts: list[bytes] = []
        size = 0
        try:
            for part in response.iter_bytes():
                size += len(part)
                if size > _shared.MAX_ANSWER_BYTES:
                    raise WarrenApiError("internal", "an answer over 64 MiB", 502)
                parts.append(part)
        except httpx.TransportError as error:
            raise ConnectionError(f"the answer was cut off: {error}") from error
        finally:
            response.close()
        data = b"".join(parts)
        response._content = data  # noqa: SLF001 - so a second read (409 handling) sees it
        return data

    def json(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        body: object = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
        cancel: Optional[CancelToken] = None,
        retry_on_connection_error: bool = True,
    ) -> Any:
        """One logical call whose JSON answer is returned; an error status raises its WarrenApiError."""
        response = self.send(
            method,
            path,
            query=query,
            body=body,
            headers=headers,
            idempotency_key=idempotency_key,
            timeout=timeout,
            cancel=cancel,
            retry_on_connection_error=retry_on_connection_error,
        )
        content = self._read(response)
        return _shared.decode_answer(response.status_code, content, response.headers.get("retry-after"))

    def error_of(self, response: httpx.Response) -> WarrenApiError:
        content = self._read(response)
        try:
            _shared.decode_answer(response.status_code, content, response.headers.get("retry-after"))
        except WarrenApiError as error:
            return error
        return WarrenApiError("internal", f"unexpected HTTP {response.status_code}", response.status_code)

    def put_blob(self, url: str, data: bytes, cancel: Optional[CancelToken]) -> None:
        """PUTs bytes to a presigned URL (no credential: the URL carries its own signature)."""
        for attempt in range(self.max_retries + 1):
            _shared.check(cancel)
            try:
                response = self.http.put(url, content=data, headers={"content-type": "application/octet-stream"})
            except httpx.TransportError as error:
                if attempt >= self.max_retries:
                    raise PushError(f"upload failed: {error}") from error
                sleep(_shared.backoff(self.retry_base_delay, attempt), cancel, None)
                continue
            if response.status_code in _shared.RETRYABLE_STATUS and attempt < self.max_retries:
                sleep(_shared.backoff(self.retry_base_delay, attempt), cancel, None)
                continue
            if response.status_code >= 300:
                raise PushError(f"upload refused: {response.status_code} {response.text[:2000]}")
            return
