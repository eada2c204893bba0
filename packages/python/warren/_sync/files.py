# Generated from the async client by packages/python/tools/generate.py: do not edit.
"""``sandbox.files``: the file API of a running sandbox (docs/api-decisions.md "Files"): write
and read a file, upload a tar under a directory, download a file or a directory (a tar) to a
local file, stat, list, mkdir, remove, rename, and watch a directory's changes (an iterator
of the server-sent events). read/read_text/write/list keep the names of the exec-based
methods they replace. Reads into memory are bounded (64 MiB); ``download_to`` streams."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Literal, Optional, Union

import httpx

from .. import _shared
from .. import models as m
from .._shared import CancelToken, SseParser, seg
from ..errors import ConnectionError, FailedPreconditionError, WarrenError

if TYPE_CHECKING:
    from .transport import Transport

Timeout = Optional[float]
Cancel = Optional[CancelToken]
Data = Union[str, bytes]


@dataclass(frozen=True)
class FileEntry:
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    info: Optional[m.FileInfo] = None


@dataclass(frozen=True)
class FileEvent:
    """One change of a watched directory: ``ready`` (``path``, ``entries``), then ``created``,
    ``modified`` or ``deleted`` with the entry's FileInfo."""

    type: Literal["ready", "created", "modified", "deleted"]
    path: str
    entries: Optional[int] = None
    entry: Optional[m.FileInfo] = None


def _kind(info: m.FileInfo) -> Literal["file", "dir", "symlink", "other"]:
    kind = info.get("type")
    return "dir" if kind == "directory" else "file" if kind == "file" else "symlink" if kind == "symlink" else "other"


def _bytes(data: Data) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


class SandboxFiles:
    def __init__(self, transport: Transport, sandbox_id: str) -> None:
        self._t = transport
        self._id = sandbox_id

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{seg(self._id)}/files"

    def _up(self, method: str, route: str, query: dict[str, Any], data: Data, timeout: Timeout, cancel: Cancel) -> m.FileInfo:
        response = self._t.send(
            method, route, query=query, content=_bytes(data), content_type="application/octet-stream", timeout=timeout, cancel=cancel
        )
        content = self._t.read_bounded(response)
        info: m.FileInfo = _shared.decode_answer(response.status_code, content, response.headers.get("retry-after"))
        return info

    def upload(
        self, path: str, data: Data, *, mode: Union[str, int, None] = None, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.FileInfo:
        """Writes one file (created or replaced, parents created) and answers its FileInfo;
        ``mode`` is octal (``"644"``, or an int such as ``0o755``)."""
        query: dict[str, Any] = {"path": path}
        if mode is not None:
            query["mode"] = format(mode, "o") if isinstance(mode, int) else mode
        return self._up("PUT", self._base, query, data, timeout, cancel)

    def write(self, path: str, data: Data, *, timeout: Timeout = None, cancel: Cancel = None) -> None:
        self.upload(path, data, timeout=timeout, cancel=cancel)

    def upload_tar(self, dir_path: str, tar: bytes, *, timeout: Timeout = None, cancel: Cancel = None) -> m.FileInfo:
        """Extracts a tar under directory ``dir_path`` (created with its parents); modes kept."""
        return self._up("POST", f"{self._base}:upload", {"path": dir_path}, tar, timeout, cancel)

    def read(self, path: str, *, timeout: Timeout = None, cancel: Cancel = None) -> bytes:
        """A regular file's bytes, whole (at most 64 MiB: use ``download_to`` for more)."""
        response = self._t.send("GET", self._base, query={"path": path}, timeout=timeout, cancel=cancel)
        if response.status_code != 200:
            raise self._t.error_of(response)
        if response.headers.get("x-warren-file-type") == "directory":
            response.close()
            raise FailedPreconditionError("failed_precondition", f"not a file: {path} (download_to takes a directory)", 400)
        return self._t.read_bounded(response)

    def read_text(self, path: str, *, timeout: Timeout = None, cancel: Cancel = None) -> str:
        return (self.read(path, timeout=timeout, cancel=cancel)).decode("utf-8")

    def download_to(self, path: str, destination: Union[str, os.PathLike[str]], *, cancel: Cancel = None) -> Literal["file", "directory"]:
        """Streams a regular file's bytes, or a directory as a tar, into the local file
        ``destination`` (written under a temporary name, renamed once whole); answers which."""
        response = self._t.send("GET", self._base, query={"path": path}, cancel=cancel)
        if response.status_code != 200:
            raise self._t.error_of(response)
        kind: Literal["file", "directory"] = "directory" if response.headers.get("x-warren-file-type") == "directory" else "file"
        length = response.headers.get("content-length")
        expected = int(length) if kind == "file" and length is not None and length.isdigit() else None
        partial = f"{os.fspath(destination)}.partial"
        written = 0
        try:
            with open(partial, "wb") as out:
                for chunk in response.iter_bytes():
                    _shared.check(cancel)
                    out.write(chunk)
                    written += len(chunk)
        except (httpx.TransportError, httpx.StreamError) as error:
            os.unlink(partial)
            raise ConnectionError(f"the download of {path} was cut off: {error}") from error
        except BaseException:
            os.unlink(partial)
            raise
        finally:
            response.close()
        if expected is not None and written != expected:
            os.unlink(partial)
            raise ConnectionError(f"the download of {path} was cut short ({written} of {expected} bytes)")
        os.replace(partial, destination)
        return kind

    def stat(self, path: str, *, timeout: Timeout = None, cancel: Cancel = None) -> m.FileInfo:
        info: m.FileInfo = self._t.json("GET", f"{self._base}:stat", query={"path": path}, timeout=timeout, cancel=cancel)
        return info

    def list(self, path: str, *, limit: int = 10_000, timeout: Timeout = None, cancel: Cancel = None) -> list[FileEntry]:
        """The entries of directory ``path`` (not recursive), sorted by name; at most ``limit``."""
        answer = self._t.json(
            "GET", f"{self._base}:list", query={"path": path, "limit": limit}, timeout=timeout, cancel=cancel
        )
        entries: list[m.FileInfo] = answer["entries"]
        return [FileEntry(e["name"], e["path"], _kind(e), int(e["size"]), e) for e in entries]

    def mkdir(self, path: str, *, mode: Optional[str] = None, timeout: Timeout = None, cancel: Cancel = None) -> m.FileInfo:
        """Creates a directory and its parents (an existing directory is fine)."""
        body: dict[str, Any] = {"path": path, **({"mode": mode} if mode else {})}
        info: m.FileInfo = self._t.json("POST", f"{self._base}:mkdir", body=body, timeout=timeout, cancel=cancel)
        return info

    def remove(self, path: str, *, recursive: bool = False, timeout: Timeout = None, cancel: Cancel = None) -> None:
        """Removes a file, a symlink, an empty directory, or with ``recursive`` a tree."""
        body: dict[str, Any] = {"path": path, **({"recursive": True} if recursive else {})}
        response = self._t.send("POST", f"{self._base}:remove", body=body, timeout=timeout, cancel=cancel)
        if response.status_code != 204:
            raise self._t.error_of(response)
        response.close()

    def rename(
        self, source: str, target: str, *, overwrite: bool = False, timeout: Timeout = None, cancel: Cancel = None
    ) -> m.FileInfo:
        body: dict[str, Any] = {"from": source, "to": target, **({"overwrite": True} if overwrite else {})}
        info: m.FileInfo = self._t.json("POST", f"{self._base}:rename", body=body, timeout=timeout, cancel=cancel)
        return info

    def watch(
        self, path: str, *, interval_seconds: Optional[int] = None, cancel: Cancel = None
    ) -> Iterator[FileEvent]:
        """The directory's changes as they are seen, until ``cancel`` (or the caller stops
        iterating); an ``error`` event of the stream is raised as FailedPreconditionError."""
        query: dict[str, Any] = {"path": path, "interval_seconds": interval_seconds}
        response = self._t.send(
            "GET", f"{self._base}:watch", query=query, headers={"accept": "text/event-stream"}, cancel=cancel, read_timeout=3600
        )
        if response.status_code != 200:
            raise self._t.error_of(response)
        parser = SseParser()
        try:
            for chunk in response.iter_bytes():
                for item in parser.feed(chunk):
                    data = item.data
                    if item.event == "ready":
                        yield FileEvent("ready", str(data.get("path", path)), entries=int(data.get("entries", 0)))
                    elif item.event in ("created", "modified", "deleted"):
                        entry: m.FileInfo = data  # type: ignore[assignment]
                        yield FileEvent(item.event, str(data.get("path", "")), entry=entry)  # type: ignore[arg-type]
                    elif item.event == "error":
                        raise FailedPreconditionError(str(data.get("code", "failed_precondition")), str(data.get("message", "")), 409)
                if cancel is not None and cancel.cancelled:
                    return
        except (httpx.TransportError, httpx.StreamError) as error:
            raise ConnectionError(f"the watch of {path} was cut off: {error}") from error
        except WarrenError:
            raise
        finally:
            response.close()
