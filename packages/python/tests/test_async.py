"""The async client against a real Warren: the same flows as the sync one's, under asyncio."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest

import warren
from conftest import Proxy, settle


def test_async_errors_retries_and_cancellation(api_url: str, owner_key: str, other_key: str, proxy: Proxy) -> None:
    seen: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        seen.append(request)

    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w, warren.AsyncWarren(other_key, api_url) as theirs:
            who = await w.whoami()
            assert who["organization"]
            project = await theirs.projects.create({"name": "py-async", "slug": f"py-async-{time.time_ns()}"})
            with pytest.raises(warren.NotFoundError):
                await w.projects.get(project["id"])
        http = httpx.AsyncClient(event_hooks={"request": [record]})
        async with warren.AsyncWarren(owner_key, proxy.url, http_client=http) as through:
            proxy.refuse_next(503, 1)
            started = time.monotonic()
            await through.runs.start({"label": "async retried"})
            assert time.monotonic() - started >= 0.95
            starts = [r for r in seen if r.method == "POST" and r.url.path == "/v1/runs"]
            assert len(starts) == 2 and starts[0].headers["idempotency-key"] == starts[1].headers["idempotency-key"]
            # Cancelling the task cancels the call, even in a Retry-After wait.
            proxy.refuse_next(503, 5)
            task = asyncio.create_task(through.whoami())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            proxy.refuse_next(503, 5)
            with pytest.raises(warren.WarrenTimeoutError):
                await through.whoami(timeout=1)
        await http.aclose()

    asyncio.run(main())


def test_async_sandbox_lifecycle(api_url: str, owner_key: str) -> None:
    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w:
            async with await w.sandboxes.create({"command": ["sleep", "3600"]}) as sbx:
                assert sbx.state == "running"
                out = await sbx.exec(["sh", "-c", "echo async > /workspace/a.txt; cat /workspace/a.txt"])
                assert (out.kind, out.exit, out.stdout) == ("completed", 0, "async\n")
                await sbx.stop()
                with pytest.raises(warren.SandboxNotRunningError):
                    await sbx.exec(["true"])
                await sbx.wake()
                snap = await sbx.snapshot()
                async with await w.sandboxes.from_snapshot(snap["snapshot_id"], {"command": ["sleep", "3600"]}) as copy:
                    assert await copy.files.read_text("/workspace/a.txt") == "async\n"
                    listed = [s.id async for s in w.sandboxes.list()]
                    assert copy.id in listed and sbx.id in listed
                copy_id = copy.id
            for gone in (sbx.id, copy_id):
                assert (await w.sandboxes.get(gone)).state in ("terminating", "terminated")

    asyncio.run(main())


def test_async_tail_resumes_and_push_caches(api_url: str, owner_key: str, proxy: Proxy, tmp_path: Path) -> None:
    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w, warren.AsyncWarren(owner_key, proxy.url) as through:
            run = await w.runs.start({"label": "py-async-tail"})
            name = f"py_async_note_{time.time_ns()}"
            await w.schemas.register({"name": name, "json_schema": '{"type":"object"}'})
            await w.annotations.annotate({"schema_name": name, "run_id": run["id"]}, payload={"n": 1})
            seen: list[warren.TailEvent] = []
            reconnects: list[str | None] = []
            async for item in through.runs.tail(run["id"], on_reconnect=lambda c, _e: reconnects.append(c)):
                seen.append(item)
                if len(seen) == 2:
                    proxy.drop_streams()
                    await w.annotations.annotate({"schema_name": name, "run_id": run["id"]}, payload={"n": 2})
                    await w.runs.complete(run["id"], "succeeded")
            assert reconnects == [seen[1].id]
            assert [i.data.get("name") for i in seen].count(name) == 2 and seen[-1].event == "end"

            tree = tmp_path / "tree"
            tree.mkdir()
            (tree / "x.bin").write_bytes(os.urandom(5000))
            settle(tree / "x.bin")
            volume = await w.volumes.create(f"py-async-vol-{time.time_ns()}", quota_bytes="1073741824")
            cache = str(tmp_path / "cache.json")
            first = await w.volumes.push(volume["id"], str(tree), hash_cache=cache)
            again = await w.volumes.push(volume["id"], str(tree), hash_cache=cache)
            assert (first.uploaded_blobs, again.uploaded_blobs, again.reused_files) == (1, 0, 1)

    asyncio.run(main())


def test_async_sandbox_files(api_url: str, owner_key: str) -> None:
    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w:
            async with await w.sandboxes.create({"command": ["sleep", "3600"], "network_access": "none"}) as sbx:
                info = await sbx.files.upload("/workspace/a/b.txt", "async file\n")
                assert info["type"] == "file"
                assert await sbx.files.read_text("/workspace/a/b.txt") == "async file\n"
                assert [e.name for e in await sbx.files.list("/workspace/a")] == ["b.txt"]
                await sbx.files.rename("/workspace/a/b.txt", "/workspace/a/c.txt")
                assert (await sbx.files.stat("/workspace/a/c.txt"))["size"] == "11"
                await sbx.files.remove("/workspace/a", recursive=True)
                with pytest.raises(warren.NotFoundError):
                    await sbx.files.stat("/workspace/a")

    asyncio.run(main())


def test_async_exec_stream(api_url: str, owner_key: str) -> None:
    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w:
            async with await w.sandboxes.create({"command": ["sleep", "3600"], "network_access": "none"}) as sbx:
                stream = await sbx.exec_stream(["sh", "-c", "read a; echo $a; echo e >&2; exit 3"])
                await stream.write("streamed\n")
                await stream.close_stdin()
                chunks = [chunk async for chunk in stream.output()]
                assert b"".join(c for s, c in chunks if s == "stdout") == b"streamed\n"
                assert b"".join(c for s, c in chunks if s == "stderr") == b"e\n"
                assert await stream.wait() == warren.ExecStreamResult("completed", 3)
                with pytest.raises(warren.SpawnFailedError):
                    await sbx.exec_stream(["/no/such/binary"])

    asyncio.run(main())


def test_async_background_processes(api_url: str, owner_key: str) -> None:
    async def main() -> None:
        async with warren.AsyncWarren(owner_key, api_url) as w:
            async with await w.sandboxes.create({"command": ["sleep", "3600"]}) as sbx:
                p = await sbx.processes.start(["sh", "-c", 'echo "a $(cat)"; echo b >&2'], stdin=True)
                assert p.state == "running"
                assert await p.stdin.write(b"async\n") == 6
                await p.stdin.close()
                items = [item async for item in p.output()]
                assert b"".join(i.data for i in items) == b"a async\nb\n"
                assert {i.type for i in items} == {"stdout", "stderr"}
                assert (await p.wait(10))["exit_code"] == 0
                r = await p.read(0)
                assert r["complete"] and r["next_offset"] == items[-1].end and r["dropped_bytes"] == 0
                again = await sbx.processes.get(p.id)
                assert await again.output_text(items[-1].offset) == items[-1].data.decode()
                assert await again.read_text(0) == "a async\nb\n"
                sleeper = await sbx.processes.start(["sleep", "600"], timeout_seconds=300)
                assert (await sleeper.signal("SIGKILL"))["id"] == sleeper.id
                ended = await sleeper.wait(30)
                assert (ended["state"], ended["exit_code"]) == ("exited", 137)
                assert [r["id"] for r in await sbx.processes.list()][:2] == [sleeper.id, p.id]
                # 3 MiB with no reader attached: the server keeps the last 1 MiB, and says so.
                big = await sbx.processes.start(["head", "-c", str(3 << 20), "/dev/zero"])
                assert (await big.wait(30))["exit_code"] == 0
                first = await big.read(0)
                assert first["dropped_bytes"] > 0 and first["chunks"][0]["offset"] == first["dropped_bytes"]
                seen = [item async for item in big.output()]
                assert seen[0].type == "gap" and seen[0].offset == 0 and seen[0].end == first["dropped_bytes"]
                assert not [i for i in seen[1:] if i.type == "gap"] and seen[-1].end == 3 << 20
                assert seen[0].end + sum(len(i.data) for i in seen[1:]) == 3 << 20
                with pytest.raises(warren.WarrenError, match="no longer kept"):
                    await big.output_text()

    asyncio.run(main())
