# Generated from the async client by packages/python/tools/generate.py: do not edit.
"""Pushes a local directory as a new version of a volume (docs/volumes.md "Pushing a
directory"), the protocol of packages/sdk/src/volume-push.ts: every regular file is cut into
16 MiB chunks hashed with BLAKE3; the manifest is uploaded and published; when blobs are
missing, the push asks which the organization lacks, uploads only those (to their presigned
URLs) and publishes again. A publish that lost a race to another push is rebased. The hash
cache (the same file format and place as the TypeScript SDK's and the CLI's) keeps the
digests of files unchanged since an earlier push (size, mtime, ctime and inode, as git's
index), so a re-push reads none of them."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .. import _shared
from .._blake3 import blake3_hex, hasher
from .._shared import CancelToken, seg
from ..errors import PushError, WarrenApiError
from .transport import Transport

CHUNK_BYTES = 16 * 1_048_576
BLOBS_PER_REQUEST = 1000
MAX_REBASES = 5


@dataclass(frozen=True)
class PushProgress:
    phase: str  # hash, upload, publish, done
    done_bytes: Optional[int] = None
    total_bytes: Optional[int] = None


@dataclass(frozen=True)
class PushResult:
    version: dict[str, Any]
    files: int
    bytes: int
    blobs: int
    uploaded_blobs: int
    uploaded_bytes: int
    rebases: int
    reused_files: int


def default_hash_cache(directory: str) -> str:
    """Where the CLI keeps the hash cache of ``directory``: under $XDG_CACHE_HOME (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:32]
    return os.path.join(base, "warren", "volume-push", f"{name}.json")


def _read_cache(file: Optional[str]) -> dict[str, Any]:
    if not file:
        return {}
    try:
        parsed = json.loads(Path(file).read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(parsed, dict) and parsed.get("version") == 1 and isinstance(parsed.get("files"), dict):
        return parsed["files"]  # type: ignore[no-any-return]
    return {}


def _key(info: os.stat_result) -> dict[str, str]:
    return {
        "size": str(info.st_size),
        "mtimeNs": str(info.st_mtime_ns),
        "ctimeNs": str(info.st_ctime_ns),
        "ino": str(info.st_ino),
    }


def _walk(root: str) -> list[str]:
    """Regular files under ``root`` (relative, ``/``-separated); symlinks and special files are skipped."""
    out: list[str] = []
    for parent, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            full = os.path.join(parent, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(out)


def _hash_file(full: str) -> tuple[str, list[dict[str, Any]], int]:
    chunks: list[dict[str, Any]] = []
    whole = hasher()
    size = 0
    with open(full, "rb") as f:
        single = 0 < os.fstat(f.fileno()).st_size <= CHUNK_BYTES
        while True:
            piece = f.read(CHUNK_BYTES)
            if not piece:
                break
            if single and chunks:
                raise PushError(f"{full} changed while it was pushed")
            if not single:
                whole.update(piece)
            chunks.append({"digest": f"blake3:{blake3_hex(piece)}", "size": len(piece)})
            size += len(piece)
    # A one-chunk file's digest is its chunk's.
    digest = chunks[0]["digest"] if single and chunks else f"blake3:{whole.hexdigest()}"
    return digest, chunks, size


def push_directory(
    t: Transport,
    volume_id: str,
    directory: str,
    *,
    hash_cache: Optional[str] = None,
    on_progress: Optional[Callable[[str, PushProgress], None]] = None,
    cancel: Optional[CancelToken] = None,
) -> PushResult:
    def report(line: str, phase: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        if on_progress:
            on_progress(line, PushProgress(phase, done, total))

    cached = _read_cache(hash_cache)
    fresh: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    where: dict[str, tuple[str, int, int]] = {}  # digest -> (file, offset, size)
    total = 0
    reused = 0
    # Changed this close to the hashing, a file may change again within the same mtime: not cached.
    racy_after_ns = (time.time_ns() // 1_000_000 - 2000) * 1_000_000
    for rel in _walk(directory):
        _shared.check(cancel)
        full = os.path.join(directory, rel)
        info = os.stat(full)
        key = _key(info)
        hit = cached.get(rel)
        if isinstance(hit, dict) and all(hit.get(k) == v for k, v in key.items()):
            digest, chunks, size = str(hit["digest"]), list(hit["chunks"]), info.st_size
            reused += 1
            fresh[rel] = hit
        else:
            digest, chunks, size = _hash_file(full)
            if info.st_mtime_ns < racy_after_ns and info.st_ctime_ns < racy_after_ns and size == info.st_size:
                fresh[rel] = {**key, "digest": digest, "chunks": chunks}
        offset = 0
        for chunk in chunks:
            where.setdefault(str(chunk["digest"]), (full, offset, int(chunk["size"])))
            offset += int(chunk["size"])
        files.append({"path": rel, "mode": info.st_mode & 0o777, "size": size, "digest": digest, "chunks": chunks})
        total += size
    if reused:
        report(f"{reused} files unchanged since the last push (hash cache)", "hash")
    report(f"hashed {len(files)} files, {total} bytes, {len(where)} distinct blobs", "hash")
    manifest = json.dumps({"version": 1, "files": files}, separators=(",", ":")).encode()
    uploaded_blobs = 0
    uploaded_bytes = 0

    def upload_missing(push_id: str) -> None:
        nonlocal uploaded_blobs, uploaded_bytes
        digests = list(where)
        missing: list[tuple[str, str]] = []
        for at in range(0, len(digests), BLOBS_PER_REQUEST):
            blobs = [{"digest": d, "size_bytes": str(where[d][2])} for d in digests[at : at + BLOBS_PER_REQUEST]]
            answer = t.json(
                "POST", f"/v1/volume-pushes/{seg(push_id)}/blob-uploads", body={"blobs": blobs}, cancel=cancel
            )
            for upload in answer.get("uploads", []):
                if not upload.get("present"):
                    missing.append((str(upload["digest"]), str(upload["upload_url"])))
        size = sum(where[d][2] for d, _ in missing)
        report(f"{len(digests) - len(missing)} blobs present, uploading {len(missing)} ({size} bytes)", "upload", 0, size)
        done = 0
        for digest, url in missing:
            file, offset, length = where[digest]
            with open(file, "rb") as f:
                f.seek(offset)
                data = f.read(length)
            if len(data) != length or f"blake3:{blake3_hex(data)}" != digest:
                raise PushError(f"{file} changed while it was pushed")
            t.put_blob(url, data, cancel)
            uploaded_blobs += 1
            uploaded_bytes += length
            done += length
            report(f"uploaded {done} of {size} bytes", "upload", done, size)

    def missing_blobs(error: WarrenApiError) -> bool:
        return error.status == 400 and bool((error.details or {}).get("missing_digests"))

    def publish(push_id: str) -> Any:
        return t.json("POST", f"/v1/volume-pushes/{seg(push_id)}/publish", body={}, cancel=cancel)

    for rebases in range(MAX_REBASES + 1):
        start = t.json("POST", f"/v1/volumes/{seg(volume_id)}/pushes", body={}, cancel=cancel)
        push_id = str(start["push_id"])
        if len(manifest) > int(start.get("max_manifest_bytes", len(manifest))):
            raise PushError(f"the manifest ({len(manifest)} bytes) is over max_manifest_bytes")
        # The manifest and a publish first: a tree whose blobs are all stored costs no upload.
        t.put_blob(str(start["manifest_upload_url"]), manifest, cancel)
        try:
            try:
                published = publish(push_id)
            except WarrenApiError as error:
                if not missing_blobs(error):
                    raise
                upload_missing(push_id)
                published = publish(push_id)
        except WarrenApiError as error:
            # Lost a race to another push (409), or blobs collected meanwhile: again.
            if error.status != 409 and not missing_blobs(error):
                raise PushError(f"PublishVolumeVersion: {error}") from error
            report("another push was published first; rebasing on the new current version", "publish")
            continue
        version = published["version"]
        report(f"published {version.get('version_digest')}", "done")
        if hash_cache and not (reused == len(files) and len(cached) == len(fresh)):
            try:
                os.makedirs(os.path.dirname(hash_cache), exist_ok=True)
                tmp = f"{hash_cache}.tmp-{os.getpid()}"
                Path(tmp).write_text(json.dumps({"version": 1, "files": fresh}))
                os.replace(tmp, hash_cache)
            except OSError as error:
                report(f"the hash cache was not saved: {error}", "done")
        return PushResult(version, len(files), total, len(where), uploaded_blobs, uploaded_bytes, rebases, reused)
    raise PushError(f"gave up after {MAX_REBASES} rebases: the volume keeps changing")
