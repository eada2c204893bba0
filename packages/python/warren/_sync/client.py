# Generated from the async client by packages/python/tools/generate.py: do not edit.
"""The client: ``Warren(api_key=..., base_url=...)`` (defaults WARREN_API_KEY and
WARREN_API_URL, so code inside a sandbox works with its own credential), one attribute per
contract group, the same surface as the TypeScript SDK's ``Warren``."""

from __future__ import annotations

from types import TracebackType
from typing import Optional

import httpx

from .. import models as m
from .._shared import CancelToken, env_api_key, env_base_url
from .resources import (
    Annotations,
    DataViews,
    Projects,
    Runs,
    Schemas,
    Secrets,
    Volumes,
    Workloads,
)
from .sandboxes import Sandboxes, Snapshots
from .transport import Transport


class Warren:
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
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        """``max_retries``: retries after the first attempt (429, 503, connection failures);
        ``retry_base_delay``: seconds before the first retry when the server names none
        (doubled per retry, at most 8); ``max_retry_after``: a longer Retry-After is not slept
        through, the error is raised at once; ``in_flight_retry``: how long a keyed call keeps
        retrying 409 operation_conflict; ``request_timeout``: per attempt (a call's own
        ``timeout`` bounds the whole call)."""
        self.transport = Transport(
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
        self.sandboxes = Sandboxes(t)
        self.snapshots = Snapshots(t)
        self.projects = Projects(t)
        self.runs = Runs(t)
        self.annotations = Annotations(t)
        self.schemas = Schemas(t)
        self.views = DataViews(t)
        self.volumes = Volumes(t)
        self.secrets = Secrets(t)
        self.workloads = Workloads(t)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Warren:
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def whoami(self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None) -> m.WhoAmI:
        return self.transport.json("GET", "/v1/whoami", timeout=timeout, cancel=cancel)  # type: ignore[no-any-return]

    def usage(
        self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None
    ) -> m.UsageSnapshot:
        r = self.transport.json("GET", "/v1/usage", timeout=timeout, cancel=cancel)
        return r["snapshot"]  # type: ignore[no-any-return]

    def service_config(
        self, *, timeout: Optional[float] = None, cancel: Optional[CancelToken] = None
    ) -> m.GetServiceConfigResponse:
        return self.transport.json(  # type: ignore[no-any-return]
            "GET", "/v1/service-config", timeout=timeout, cancel=cancel
        )

    def feedback(
        self,
        body: m.CreateFeedbackBody,
        *,
        timeout: Optional[float] = None,
        cancel: Optional[CancelToken] = None,
        idempotency_key: Optional[str] = None,
    ) -> m.CreateFeedbackResponse:
        return self.transport.json(  # type: ignore[no-any-return]
            "POST", "/v1/feedback", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )

    def sql(
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
        return self.transport.json(  # type: ignore[no-any-return]
            "POST", "/v1/telemetry/sql", body=body, timeout=timeout, cancel=cancel
        )
