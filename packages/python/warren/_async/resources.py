"""Every contract group other than sandboxes: thin typed calls over the transport.

Every call takes ``timeout`` (seconds for the whole logical call, its retries included) and
``cancel`` (a CancelToken); mutating calls take ``idempotency_key`` (one is minted otherwise).
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable, Generic, Mapping, Optional, TypeVar, Union, cast

from .. import models as m
from .._shared import CancelToken, QueryValue, TailEvent, new_event_id, seg
from ..numbers import wire_int64
from .tail import tail_run
from .transport import AsyncTransport
from .volume_push import PushProgress, PushResult, default_hash_cache, push_directory

Timeout = Optional[float]
Cancel = Optional[CancelToken]
Key = Optional[str]


async def pages(
    t: AsyncTransport,
    route: str,
    query: Optional[Mapping[str, QueryValue]],
    key: str,
    timeout: Timeout = None,
    cancel: Cancel = None,
) -> AsyncIterator[Any]:
    """A list operation as an iterator: pages are fetched as the iteration reaches them."""
    token = ""
    while True:
        page = await t.json(
            "GET", route, query={**(query or {}), **({"page_token": token} if token else {})}, timeout=timeout, cancel=cancel
        )
        for item in page.get(key, []):
            yield item
        token = str(page.get("next_page_token") or "")
        if not token:
            return


R = TypeVar("R")


class AsyncRecords(Generic[R]):
    """A group whose records live at ``route`` (``/v1/volumes``): a call answers one as
    ``{item: record}``, a list as ``{items: [...], next_page_token}``. ``list`` is the same in
    every such group, and so are a get and a delete by id where the API has them (``_get``,
    ``_delete``); each group adds its own calls over ``_record``."""

    route = ""
    item = ""
    items = ""

    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def _record(
        self,
        method: str,
        path: str = "",
        *,
        body: object = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
        retry_on_connection_error: bool = True,
    ) -> R:
        """The record answered by ``method`` on ``route + path``."""
        r = await self._t.json(
            method,
            self.route + path,
            body=body,
            headers=headers,
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
            retry_on_connection_error=retry_on_connection_error,
        )
        return cast(R, r[self.item])

    async def _get(self, id: str, timeout: Timeout, cancel: Cancel) -> R:
        return await self._record("GET", f"/{seg(id)}", timeout=timeout, cancel=cancel)

    def list(
        self, query: Optional[Mapping[str, QueryValue]] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> AsyncIterator[R]:
        return pages(self._t, self.route, query, self.items, timeout, cancel)

    async def _delete(self, id: str, timeout: Timeout, cancel: Cancel, idempotency_key: Key) -> None:
        await self._t.json(
            "DELETE", f"{self.route}/{seg(id)}", timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )


class AsyncProjects(AsyncRecords[m.Project]):
    route, item, items = "/v1/projects", "project", "projects"

    async def create(
        self, body: m.CreateProjectBody, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Project:
        return await self._record("POST", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def get(self, id: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.Project:
        return await self._get(id, timeout, cancel)

    async def update(
        self,
        id: str,
        body: m.UpdateProjectBody,
        *,
        if_match: Union[str, int, None] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.Project:
        """``if_match``: the project's ``version``; a change meanwhile is PreconditionFailedError."""
        headers = {"if-match": str(if_match)} if if_match is not None else None
        return await self._record(
            "PATCH",
            f"/{seg(id)}",
            body=body,
            headers=headers,
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def delete(
        self, id: str, *, cascade: bool = False, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.DeleteProjectResponse:
        """``cascade``: also delete its runs, keys and volumes."""
        return await self._t.json(  # type: ignore[no-any-return]
            "DELETE",
            f"/v1/projects/{seg(id)}",
            query={"cascade": "true" if cascade else None},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )


class AsyncRuns(AsyncRecords[m.Run]):
    route, item, items = "/v1/runs", "run", "runs"

    async def start(
        self,
        body: Optional[m.StartRunBody] = None,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.Run:
        return await self._record("POST", body=body or {}, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def complete(
        self, id: str, status: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Run:
        return await self._record(
            "POST",
            f"/{seg(id)}:complete",
            body={"status": status},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def get(self, id: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.Run:
        return await self._get(id, timeout, cancel)

    def tail(
        self,
        run_id: str,
        *,
        cursor: Optional[str] = None,
        lineage_path: Optional[str] = None,
        max_reconnects: int = 10,
        idle_timeout: Optional[float] = None,
        cancel: Cancel = None,
        on_reconnect: Optional[Callable[[Optional[str], BaseException], None]] = None,
    ) -> AsyncIterator[TailEvent]:
        """The run's events as they become durable (an iterator of TailEvent); resumes from its
        last cursor (Last-Event-ID) after a dropped connection and ends at the server's ``end``.
        ``idle_timeout``: stop (StopIteration, no error) after this many seconds without an item."""
        return tail_run(
            self._t,
            run_id,
            cursor=cursor,
            lineage_path=lineage_path,
            max_reconnects=max_reconnects,
            idle_timeout=idle_timeout,
            cancel=cancel,
            on_reconnect=on_reconnect,
        )


class AsyncAnnotations:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def annotate(
        self,
        body: Mapping[str, Any],
        *,
        payload: Any = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.AnnotateResponse:
        """Writes one annotation; ``payload`` (when given) is serialized to payload_json; an
        event_id is minted when none is given, so retries converge on one annotation."""
        data = dict(body)
        if payload is not None:
            data["payload_json"] = json.dumps(payload, separators=(",", ":"))
        data.setdefault("event_id", new_event_id())
        return await self._t.json(  # type: ignore[no-any-return]
            "POST", "/v1/annotations", body=data, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )

    async def annotate_range(
        self, body: Mapping[str, Any], *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.AnnotateRangeResponse:
        data = dict(body)
        data.setdefault("event_id", new_event_id())
        return await self._t.json(  # type: ignore[no-any-return]
            "POST", "/v1/annotations:range", body=data, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )

    def list(
        self, query: Optional[Mapping[str, QueryValue]] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> AsyncIterator[Any]:
        return pages(self._t, "/v1/annotations", query, "annotations", timeout, cancel)


class AsyncSchemas:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def register(
        self,
        body: m.RegisterAnnotationSchemaBody,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.AnnotationSchema:
        r = await self._t.json(
            "POST", "/v1/annotation-schemas", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )
        return r["schema"]  # type: ignore[no-any-return]

    async def get(
        self, name: str, version: Optional[int] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.AnnotationSchema:
        r = await self._t.json(
            "GET", f"/v1/annotation-schemas/{seg(name)}", query={"version": version}, timeout=timeout, cancel=cancel
        )
        return r["schema"]  # type: ignore[no-any-return]

    async def list(
        self, query: Optional[Mapping[str, QueryValue]] = None, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> list[m.AnnotationSchema]:
        r = await self._t.json("GET", "/v1/annotation-schemas", query=query, timeout=timeout, cancel=cancel)
        return r["schemas"]  # type: ignore[no-any-return]

    async def archive(
        self,
        name: str,
        version: Union[int, str, None] = None,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.AnnotationSchema:
        """Archives ``version`` (None: the latest live one)."""
        r = await self._t.json(
            "POST",
            f"/v1/annotation-schemas/{seg(name)}:archive",
            body={"version": wire_int64(version)} if version is not None else {},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )
        return r["schema"]  # type: ignore[no-any-return]


class AsyncDataViews:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def put(
        self,
        name: str,
        body: m.PutDataViewBody,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> Any:
        r = await self._t.json(
            "PUT",
            f"/v1/data-views/{seg(name)}",
            body=body,
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )
        return r["view"]

    async def list(self, *, timeout: Timeout = None, cancel: Cancel = None) -> list[Any]:
        r = await self._t.json("GET", "/v1/data-views", timeout=timeout, cancel=cancel)
        return r["views"]  # type: ignore[no-any-return]

    async def run(
        self,
        name: str,
        body: Optional[m.RunDataViewBody] = None,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.RunDataViewResponse:
        return await self._t.json(  # type: ignore[no-any-return]
            "POST",
            f"/v1/data-views/{seg(name)}:run",
            body=body or {},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def delete(
        self, name: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> None:
        await self._t.json(
            "DELETE", f"/v1/data-views/{seg(name)}", timeout=timeout, cancel=cancel, idempotency_key=idempotency_key
        )


class AsyncVolumes(AsyncRecords[m.Volume]):
    route, item, items = "/v1/volumes", "volume", "volumes"

    async def get(self, id: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.Volume:
        return await self._get(id, timeout, cancel)

    async def delete(
        self, id: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> None:
        await self._delete(id, timeout, cancel, idempotency_key)

    async def create(
        self,
        name: str,
        quota_bytes: Union[int, str],
        *,
        project_id: Optional[str] = None,
        description: Optional[str] = None,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.Volume:
        """``quota_bytes``: an int or a decimal string (sent as the wire's decimal string)."""
        body: dict[str, Any] = {"name": name, "quota_bytes": wire_int64(quota_bytes)}
        if project_id is not None:
            body["project_id"] = project_id
        if description is not None:
            body["description"] = description
        return await self._record("POST", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def push(
        self,
        volume_id: str,
        directory: str,
        *,
        hash_cache: Union[bool, str] = True,
        on_progress: Optional[Callable[[str, PushProgress], None]] = None,
        cancel: Cancel = None,
    ) -> PushResult:
        """Pushes ``directory`` as the volume's new version: only blobs the organization lacks are
        uploaded. ``hash_cache`` (default on, as the CLI's): reuse digests of files unchanged since
        an earlier push (True: under $XDG_CACHE_HOME; a path: that file; False: hash every file)."""
        cache = default_hash_cache(directory) if hash_cache is True else (hash_cache or None)
        return await push_directory(
            self._t, volume_id, directory, hash_cache=cache, on_progress=on_progress, cancel=cancel
        )


class AsyncSecrets(AsyncRecords[m.Secret]):
    route, item, items = "/v1/secrets", "secret", "secrets"

    async def create(
        self,
        body: m.CreateSandboxSecretBody,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> m.Secret:
        """The value is write-only: no answer ever carries it."""
        return await self._record("POST", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def grant(
        self,
        id: str,
        body: Mapping[str, Any],
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> Any:
        r = await self._t.json(
            "POST",
            f"/v1/secrets/{seg(id)}/grants",
            body=dict(body),
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )
        return r["grant"]

    async def grants(self, id: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.ListSandboxSecretGrantsResponse:
        return await self._t.json(  # type: ignore[no-any-return]
            "GET", f"/v1/secrets/{seg(id)}/grants", timeout=timeout, cancel=cancel
        )

    async def ungrant(
        self,
        id: str,
        subject_kind: str,
        subject_id: str,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> None:
        await self._t.json(
            "DELETE",
            f"/v1/secrets/{seg(id)}/grants/{seg(subject_kind)}/{seg(subject_id)}",
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def rotate(
        self, id: str, value: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Secret:
        """Not retried after a connection failure: the server cannot tell a retried rotation from a second one."""
        return await self._record(
            "POST",
            f"/{seg(id)}:rotate",
            body={"value": value},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
            retry_on_connection_error=False,
        )

    async def revoke(
        self, id: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Secret:
        return await self._record(
            "POST",
            f"/{seg(id)}:revoke",
            body={},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )


class AsyncWorkloads(AsyncRecords[m.Workload]):
    route, item, items = "/v1/workloads", "workload", "workloads"

    async def create(
        self, body: m.CreateWorkloadBody, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Workload:
        return await self._record("POST", body=body, timeout=timeout, cancel=cancel, idempotency_key=idempotency_key)

    async def get(self, name: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.Workload:
        return await self._get(name, timeout, cancel)

    async def delete(
        self, name: str, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> None:
        await self._delete(name, timeout, cancel, idempotency_key)

    async def set_launch_acl(
        self, name: str, acl: Any, *, timeout: Timeout = None, cancel: Cancel = None, idempotency_key: Key = None
    ) -> m.Workload:
        return await self._record(
            "PUT",
            f"/{seg(name)}/launch-acl",
            body={"acl": acl},
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )

    async def add_federation(
        self,
        name: str,
        body: Mapping[str, Any],
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> Any:
        r = await self._t.json(
            "POST",
            f"/v1/workloads/{seg(name)}/federation",
            body=dict(body),
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )
        return r["federation_config"]

    async def list_federation(
        self, name: str, *, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.ListWorkloadFederationResponse:
        return await self._t.json(  # type: ignore[no-any-return]
            "GET", f"/v1/workloads/{seg(name)}/federation", timeout=timeout, cancel=cancel
        )

    async def remove_federation(
        self,
        name: str,
        federation_id: str,
        *,
        timeout: Timeout = None,
        cancel: Cancel = None,
        idempotency_key: Key = None,
    ) -> None:
        await self._t.json(
            "DELETE",
            f"/v1/workloads/{seg(name)}/federation/{seg(federation_id)}",
            timeout=timeout,
            cancel=cancel,
            idempotency_key=idempotency_key,
        )
