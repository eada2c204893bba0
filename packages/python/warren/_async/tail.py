"""The run tail (GET /v1/runs/{id}/tail, server-sent events) as an iterator that resumes from
its last cursor (Last-Event-ID) after a dropped connection, and ends at the server's
``event: end``. Frames are bounded: a line over 4 MiB ends the stream with an error."""

from __future__ import annotations

from typing import AsyncIterator, Callable, Optional

import httpx

from .. import _shared
from .._shared import CancelToken, SseParser, TailEvent, seg
from ..errors import ConnectionError, WarrenError
from .transport import AsyncTransport, sleep


async def tail_run(
    t: AsyncTransport,
    run_id: str,
    *,
    cursor: Optional[str] = None,
    lineage_path: Optional[str] = None,
    max_reconnects: int = 10,
    idle_timeout: Optional[float] = None,
    cancel: Optional[CancelToken] = None,
    on_reconnect: Optional[Callable[[Optional[str], BaseException], None]] = None,
) -> AsyncIterator[TailEvent]:
    failures = 0
    while True:
        _shared.check(cancel)
        headers = {"accept": "text/event-stream"}
        if cursor:
            headers["last-event-id"] = cursor
        try:
            response = await t.send(
                "GET",
                f"/v1/runs/{seg(run_id)}/tail",
                query={"lineage_path": lineage_path},
                headers=headers,
                cancel=cancel,
                read_timeout=idle_timeout,
            )
        except ConnectionError as error:
            failures += 1
            if failures > max_reconnects:
                raise
            if on_reconnect:
                on_reconnect(cursor, error)
            await sleep(min(5.0, 0.2 * 2**failures), cancel, None)
            continue
        if response.status_code != 200:
            raise await t.error_of(response)
        dropped: BaseException = ConnectionError("the stream ended without an end event")
        parser = SseParser()
        try:
            async for chunk in response.aiter_bytes():
                for item in parser.feed(chunk):
                    failures = 0
                    if item.id is not None:
                        cursor = item.id
                    yield item
                    if item.event == "end":
                        return
                _shared.check(cancel)
        except httpx.ReadTimeout as error:
            if idle_timeout is not None:
                return  # no item for idle_timeout seconds: the iteration ends
            dropped = error
        except (httpx.TransportError, httpx.StreamError) as error:
            dropped = error
        except WarrenError:
            raise
        finally:
            await response.aclose()
        failures += 1
        if failures > max_reconnects:
            raise ConnectionError(f"run tail: gave up after {max_reconnects} reconnects")
        if on_reconnect:
            on_reconnect(cursor, dropped)
        await sleep(min(5.0, 0.1 * 2**failures), cancel, None)

