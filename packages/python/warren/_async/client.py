"""The client: ``AsyncWarren(api_key=..., base_url=...)`` (defaults WARREN_API_KEY and
WARREN_API_URL, so code inside a sandbox works with its own credential), one attribute per
contract group, the same surface as the TypeScript SDK's ``Warren``."""

from __future__ import annotations

from types import TracebackType
from typing import Optional

import httpx

from .. import models as m
from .._shared import CancelToken, env_api_key, env_base_url
from .resources import (
    AsyncAnnotations,
    AsyncDataViews,
    AsyncProjects,
    AsyncRuns,
    AsyncSchemas,
    AsyncSecrets,
    AsyncVolumes,
    AsyncWorkloads,
)
from .sandboxes import AsyncSandboxes, AsyncSnapshots
from .transport import AsyncTransport


class AsyncWarren:
    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        max_retries: int = 3,
        retry_base_delay: float = 0.25,
        max_retry_after: float = 10.0,
        in_flight_retry: float = 30.0,
        request_timeout: Optional[float] = 300.0,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        """``max_retries``: retries after the first attempt (429, 503, connection failures);
        ``retry_base_delay``: seconds before the first retry when the server names none
        (doubled per retry, at most 8); ``max_retry_after``: a longer Retry-After is not slept
        through, the error is raised at once; ``in_flight_retry``: how long a keyed call keeps
        retrying 409 operation_conflict; ``request_timeout``: per attempt (a call's own
        ``timeout`` bounds the whole call)."""
        self.transport = AsyncTransport(
            env_base_url(base_url),
            env_api_key(api_key),
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            max_retry_after=max_retry_after,
            in_flight_retry=in_flight_retry,
            request_timeout=request_timeout,
            http_client=http_client,
        )
        t = self.transport
        self.sandboxes = AsyncSandboxes(t)
        self.snapshots = AsyncSnapshots(t)
        self.projects = AsyncProjects(t)
        self.runs = AsyncRuns(t)
        self.annotations = AsyncAnnotations(t)
        self.schemas = AsyncSchemas(t)
        self.views = AsyncDataViews(t)
        self.volumes = AsyncVolumes(t)
        self.secrets = AsyncSecrets(t)
        self.workloads = AsyncWorkloads(t)

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> AsyncWarren:
        return self

    async def __aexit__(
        self, kind: Optional[type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()

    async def whoami(self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None) -> m.WhoAmI:
        return await self.transport.json("GET", "/v1/whoami", timeout=timeout, cancel=cancel)  # type: ignore[no-any-return]

    async def usage(
        self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None
    ) -> m.UsageSnapshot:
        r = await self.transport.json("GET", "/v1/usage", timeout=timeout, cancel=cancel)
        return r["snapshot"]  # type: ignore[no-any-return]

    async def service_config(
        self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None
    ) -> m.GetServiceConfigResponse:
        return await self.transport.json(  # type: ignore[no-any-return]
            "GET", "/v1/service-config", timeout=timeout, cancel=cancel
        )

    async def feedback(
        self,
        body: m.CreateFeedbackBody,
        *,
        timeout: Optional[float] = None,
        cancel: Optional[CancelToken] = None,
        idempotency_key: Optional[str] = None,
    ) -> m.CreateFeedbackResponse:
        return await self.transport.json(  # type: ignore[no-any-return]
            "POST", "/v1/feedback", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )

    async def sql(
        self,
        sql: str,
        *,
        limit: Optional[int] = None,
        timeout: Optional[float] = None,
        cancel: Optional[CancelToken] = None,
    ) -> m.SqlResult:
        """Telemetry SQL (docs/telemetry-sql.md): one read-only SELECT over the organization's telemetry."""
        body: dict[str, object] = {"sql": sql}
        if limit:
            body["limit"] = limit
        return await self.transport.json(  # type: ignore[no-any-return]
            "POST", "/v1/telemetry/sql", body=body, timeout=timeout, cancel=cancel
        )
