"""The sync client against a real Warren: errors, retries through a misbehaving proxy, timeouts
and cancellation, the Sandbox handle on real runc sandboxes, the run tail resuming, volume push."""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

import warren
from conftest import Proxy, settle


def test_defaults_to_the_environment_and_answers_whoami(api_url: str, member_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARREN_API_URL", api_url)
    monkeypatch.setenv("WARREN_API_KEY", member_key)
    with warren.Warren() as w:
        who = w.whoami()
    assert who["principal"].get("key_id") == os.environ["WARREN_TEST_MEMBER_KEY_ID"]


def test_typed_errors_per_code(client: warren.Warren, api_url: str, other_key: str, member_key: str) -> None:
    with warren.Warren(other_key, api_url) as theirs:
        project = theirs.projects.create({"name": "py-theirs", "slug": f"py-theirs-{int(time.time() * 1000)}"})
    with pytest.raises(warren.NotFoundError) as missing:
        client.projects.get(project["id"])
    assert missing.value.code == "not_found" and missing.value.status == 404
    with warren.Warren("wrn_not_a_key", api_url) as bad, pytest.raises(warren.UnauthenticatedError):
        bad.whoami()
    with warren.Warren(member_key, api_url) as member, pytest.raises(warren.PermissionDeniedError) as denied:
        member.secrets.create({"name": "nope", "value": "x"})
    assert member_key not in str(denied.value)
    with pytest.raises(warren.InvalidArgumentError):
        client.volumes.create("bad name with spaces", quota_bytes=1024)


def test_a_lost_answer_is_retried_under_the_same_key_and_creates_once(
    client: warren.Warren, proxy: Proxy, owner_key: str, recorded: tuple[httpx.Client, list[httpx.Request]]
) -> None:
    http, seen = recorded
    slug = f"py-once-{int(time.time() * 1000)}"
    before = sum(1 for _ in client.projects.list())
    proxy.drop_next_after_request("POST /v1/projects")
    with warren.Warren(owner_key, proxy.url, retry_base_delay=0.02, http_client=http) as through:
        project = through.projects.create({"name": slug, "slug": slug})
    posts = [r for r in seen if r.method == "POST" and r.url.path == "/v1/projects"]
    assert len(posts) == 2, "the first answer was lost, so the SDK sent it again"
    assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
    after = list(client.projects.list())
    assert len(after) == before + 1 and [p["id"] for p in after if p["name"] == slug] == [project["id"]]


def test_honours_retry_after_on_503_and_429_with_one_key(
    proxy: Proxy, owner_key: str, api_url: str, recorded: tuple[httpx.Client, list[httpx.Request]]
) -> None:
    http, seen = recorded
    with warren.Warren(owner_key, proxy.url, http_client=http) as through:
        proxy.refuse_next(503, 1)
        started = time.monotonic()
        run = through.runs.start({"label": "retried"})
        assert time.monotonic() - started >= 0.95
        assert run["id"]
        starts = [r for r in seen if r.method == "POST" and r.url.path == "/v1/runs"]
        assert len(starts) == 2 and len({r.headers["idempotency-key"] for r in starts}) == 1
    with warren.Warren(owner_key, proxy.url, max_retries=0) as no_retry, pytest.raises(warren.RateLimitedError) as limited:
        proxy.refuse_next(429, 1)
        no_retry.whoami()
    assert limited.value.status == 429 and limited.value.retry_after_seconds == 1
    # A Retry-After past max_retry_after is answered at once, not slept through.
    with warren.Warren(owner_key, proxy.url, max_retry_after=2) as short, pytest.raises(warren.UnavailableError):
        proxy.refuse_next(503, 30)
        started = time.monotonic()
        short.whoami()
    assert time.monotonic() - started < 5
    with warren.Warren(owner_key, "http://127.0.0.1:1", retry_base_delay=0.01) as down, pytest.raises(warren.ConnectionError):
        down.whoami()


def test_retries_409_operation_conflict_while_its_key_is_in_flight(
    client: warren.Warren, proxy: Proxy, owner_key: str, api_url: str, recorded: tuple[httpx.Client, list[httpx.Request]]
) -> None:
    http, seen = recorded
    key = f"py-inflight-{time.time_ns()}"
    first = client.runs.start({"label": "in flight"}, idempotency_key=key)
    proxy.hold_key(key)
    with warren.Warren(owner_key, api_url, in_flight_retry=0) as impatient, pytest.raises(warren.OperationConflictError):
        impatient.runs.start({"label": "in flight"}, idempotency_key=key)
    threading.Timer(1.5, proxy.free_key, [key]).start()  # the holder dies while the call waits
    with warren.Warren(owner_key, api_url, http_client=http) as patient:
        run = patient.runs.start({"label": "in flight"}, idempotency_key=key)
    starts = [r for r in seen if r.url.path == "/v1/runs"]
    assert len(starts) >= 2 and {r.headers["idempotency-key"] for r in starts} == {key}
    assert run["id"] != first["id"], "the retry that took the claim over ran the start anew"


def test_a_call_ends_at_its_timeout_or_its_cancel(proxy: Proxy, owner_key: str) -> None:
    with warren.Warren(owner_key, proxy.url) as through:
        proxy.refuse_next(503, 5)
        started = time.monotonic()
        with pytest.raises(warren.WarrenTimeoutError):
            through.whoami(timeout=1)
        assert time.monotonic() - started < 3
        token = warren.CancelToken()
        proxy.refuse_next(503, 5)
        threading.Timer(0.5, token.cancel).start()
        started = time.monotonic()
        with pytest.raises(warren.CancelledError):
            through.whoami(cancel=token)
        assert time.monotonic() - started < 3


def test_sandbox_create_exec_files_stop_wake_snapshot_restore_delete(client: warren.Warren, api_url: str, other_key: str) -> None:
    states: list[str] = []
    with client.sandboxes.create({"name": "py-sync", "command": ["sleep", "3600"]}, on_state=states.append) as sbx:
        assert sbx.state == "running" and states[-1] == "running" and sbx.run_id
        assert client.sandboxes.get("py-sync").id == sbx.id
        hello = sbx.exec(["sh", "-c", "echo hi; echo err >&2; exit 3"])
        assert (hello.kind, hello.exit, hello.stdout, hello.stderr) == ("completed", 3, "hi\n", "err\n")
        slow = sbx.exec(["sleep", "5"], timeout_seconds=1)
        assert slow.kind == "timed_out"
        sbx.files.write("/workspace/note.txt", "kept\n")
        assert sbx.files.read_text("/workspace/note.txt") == "kept\n"
        assert [e.name for e in sbx.files.list("/workspace") if e.type == "file"] == ["note.txt"]
        with warren.Warren(other_key, api_url) as theirs, pytest.raises(warren.NotFoundError):
            theirs.sandboxes.get(sbx.id)
        sbx.stop()
        assert sbx.state == "stopped"
        with pytest.raises(warren.SandboxNotRunningError):
            sbx.exec(["true"])
        sbx.wake()
        assert sbx.files.read_text("/workspace/note.txt") == "kept\n"
        snap = sbx.snapshot(name="py-sync-snap")
        assert snap["snapshot_id"]
        with client.sandboxes.from_snapshot(snap["snapshot_id"], {"command": ["sleep", "3600"]}) as copy:
            assert copy.files.read_text("/workspace/note.txt") == "kept\n"
            ids = {s.id for s in client.sandboxes.list()}
            assert {sbx.id, copy.id} <= ids
            copy_id = copy.id
        assert any(s["id"] == snap["snapshot_id"] for s in client.snapshots.list())
    for gone in (sbx.id, copy_id):
        assert client.sandboxes.get(gone).state in ("terminating", "terminated")
    with pytest.raises(warren.SandboxStateError) as dead:
        client.sandboxes.get(sbx.id).wait_until("running", timeout=30)
    assert dead.value.code.startswith("sandbox_")


def test_the_run_tail_resumes_after_a_dropped_connection(client: warren.Warren, proxy: Proxy, owner_key: str) -> None:
    run = client.runs.start({"label": "py-tailed"})
    name = f"py_note_{int(time.time() * 1000)}"
    client.schemas.register({"name": name, "json_schema": '{"type":"object"}'})
    client.annotations.annotate({"schema_name": name, "run_id": run["id"]}, payload={"n": 1})
    seen: list[warren.TailEvent] = []
    reconnects: list[str | None] = []
    with warren.Warren(owner_key, proxy.url) as through:
        for item in through.runs.tail(run["id"], on_reconnect=lambda cursor, _error: reconnects.append(cursor)):
            seen.append(item)
            if len(seen) == 2:
                proxy.drop_streams()
                client.annotations.annotate({"schema_name": name, "run_id": run["id"]}, payload={"n": 2})
                client.runs.complete(run["id"], "succeeded")
    assert len(reconnects) == 1 and reconnects[0] == seen[1].id, "resumed from the last cursor"
    ids = [item.id for item in seen if item.id]
    assert len(set(ids)) == len(ids), "no duplicates"
    assert [item.data.get("name") for item in seen].count(name) == 2
    assert seen[-1].event == "end"


def test_volume_push_uploads_only_what_is_missing_and_caches_hashes(client: warren.Warren, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(3000))
    settle(tree / "a.txt", tree / "sub" / "b.bin")  # out of the racy window: the hashes are cached
    volume = client.volumes.create(f"py-vol-{int(time.time() * 1000)}", quota_bytes=2**30)
    assert volume["quota_bytes"] == str(2**30)  # 64-bit: decimal strings, as on the wire
    cache = str(tmp_path / "hash-cache.json")
    first = client.volumes.push(volume["id"], str(tree), hash_cache=cache)
    assert (first.files, first.uploaded_blobs, first.reused_files) == (2, 2, 0)
    again = client.volumes.push(volume["id"], str(tree), hash_cache=cache)
    assert (again.uploaded_blobs, again.reused_files) == (0, 2)
    assert again.version["version_digest"] == first.version["version_digest"]
    (tree / "a.txt").write_text("changed\n")
    settle(tree / "a.txt")
    third = client.volumes.push(volume["id"], str(tree), hash_cache=cache)
    assert (third.uploaded_blobs, third.reused_files) == (1, 1)
    assert warren.int64(client.volumes.get(volume["id"])["used_bytes"]) == 3000 + len("changed\n") + len("alpha\n")


def test_sandbox_files_over_the_file_api(client: warren.Warren, tmp_path: Path) -> None:
    import io
    import tarfile

    with client.sandboxes.create({"command": ["sleep", "3600"], "network_access": "none"}) as sbx:
        files = sbx.files
        blob = bytes(range(256)) * 4096  # every byte value, 1 MiB
        info = files.upload("/workspace/deep/blob.bin", blob, mode=0o600)
        assert (info["type"], info["size"], info["mode"][-3:]) == ("file", str(len(blob)), "600")
        assert files.read("/workspace/deep/blob.bin") == blob
        assert files.stat("/workspace/deep/blob.bin")["size"] == str(len(blob))
        files.mkdir("/workspace/tree/a/b")
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w") as tar:
            member = tarfile.TarInfo("x/hello.txt")
            member.size = 6
            tar.addfile(member, io.BytesIO(b"hello\n"))
        files.upload_tar("/workspace/tree", packed.getvalue())
        assert files.read_text("/workspace/tree/x/hello.txt") == "hello\n"
        assert [(e.name, e.type) for e in files.list("/workspace/tree")] == [("a", "dir"), ("x", "dir")]
        moved = files.rename("/workspace/tree/x/hello.txt", "/workspace/tree/a/hello.txt")
        assert moved["path"] == "/workspace/tree/a/hello.txt"
        with pytest.raises(warren.NotFoundError):
            files.stat("/workspace/tree/x/hello.txt")
        local = tmp_path / "tree.tar"
        assert files.download_to("/workspace/tree", local) == "directory"
        with tarfile.open(local) as tar:
            assert any(name.endswith("a/hello.txt") for name in tar.getnames())
        assert files.download_to("/workspace/deep/blob.bin", tmp_path / "blob.bin") == "file"
        assert (tmp_path / "blob.bin").read_bytes() == blob
        with pytest.raises(warren.FailedPreconditionError):
            files.remove("/workspace/tree")  # not empty
        files.remove("/workspace/tree", recursive=True)
        with pytest.raises(warren.NotFoundError):
            files.list("/workspace/tree")
        token = warren.CancelToken()
        seen: list[str] = []
        for event in files.watch("/workspace/deep", interval_seconds=1, cancel=token):
            seen.append(event.type)
            if event.type == "ready":
                files.write("/workspace/deep/new.txt", "new\n")
            elif event.type == "created" and event.entry and event.entry["name"] == "new.txt":
                token.cancel()
                break
        assert seen[0] == "ready" and "created" in seen


def test_sandbox_exec_stream(client: warren.Warren) -> None:
    with client.sandboxes.create({"command": ["sleep", "3600"], "network_access": "none"}) as sbx:
        stream = sbx.exec_stream(
            ["sh", "-c", 'read line; echo "got $line"; echo oops >&2; cat; exit 4'], env={"GREETING": "hi"}, stdin="hello\nrest\n"
        )
        out = bytearray()
        err = bytearray()
        for name, chunk in stream.output():
            (out if name == "stdout" else err).extend(chunk)
        assert (bytes(out), bytes(err)) == (b"got hello\nrest\n", b"oops\n")
        assert stream.wait() == warren.ExecStreamResult("completed", 4)
        echo = sbx.exec_stream(["sh", "-c", 'echo "$GREETING from $(pwd)"'], env={"GREETING": "hi"}, cwd="/tmp")
        assert echo.wait().exit == 0 and bytes(echo.stdout) == b"hi from /tmp\n"
        binary = bytes(range(256)) * 256
        cat = sbx.exec_stream(["cat"], stdin=binary)
        assert cat.wait().kind == "completed" and bytes(cat.stdout) == binary
        slow = sbx.exec_stream(["sleep", "60"], timeout_seconds=1)
        assert slow.wait().kind == "timed_out"
        with pytest.raises(warren.SpawnFailedError):
            sbx.exec_stream(["/no/such/binary"])
        sbx.stop()
        with pytest.raises(warren.SandboxNotRunningError):
            sbx.exec_stream(["true"])


def test_sandbox_background_processes(client: warren.Warren, proxy: Proxy, owner_key: str) -> None:
    with client.sandboxes.create({"command": ["sleep", "3600"]}) as sbx:
        script = 'echo "one $G $(pwd)"; sleep 0.3; echo two >&2; echo "got $(cat)"; exit 3'
        p = sbx.processes.start(["sh", "-c", script], stdin=True, env={"G": "hi"}, cwd="/tmp")
        assert p.id.startswith("proc_") and p.state == "running"
        # read(): from offset 0 until both first lines are there.
        offset, text = 0, b""
        while b"two" not in text:
            r = p.read(offset, max_bytes=1 << 20, wait_seconds=10)
            assert r["dropped_bytes"] == 0 and r["next_offset"] >= offset
            text += b"".join(base64.b64decode(c["data"]) for c in r["chunks"])
            offset = r["next_offset"]
        assert text == b"one hi /tmp\ntwo\n"
        assert p.stdin.write("there\n") == 6
        p.stdin.close()
        # The iterator over the stream: every chunk from 0 with its stream, until the end.
        items = list(p.output())
        assert [i.type for i in items] == ["stdout", "stderr", "stdout"]
        assert b"".join(i.data for i in items) == b"one hi /tmp\ntwo\ngot there\n"
        assert all(a.end == b.offset for a, b in zip(items, items[1:])), "contiguous offsets"
        assert p.record and p.record["state"] == "exited" and p.exit_code == 3
        done = p.wait(10)
        assert (done["state"], done["exit_code"], done["end_reason"]) == ("exited", 3, "exited")
        # Re-attach by id from an offset: the rest, not a byte lost or repeated.
        again = sbx.processes.get(p.id)
        assert again.state == "exited"
        assert again.output_text(items[1].offset) == "two\ngot there\n"
        assert b"".join(base64.b64decode(c["data"]) for c in again.read(items[2].offset)["chunks"]) == b"got there\n"
        # kill(), signal() and a pty's resize().
        sleeper = sbx.processes.start(["sleep", "600"])
        started = time.monotonic()
        assert sleeper.wait(1)["state"] == "running", "as it is at the deadline"
        assert 0.9 <= time.monotonic() - started < 10
        killed = sleeper.kill()
        assert killed["id"] == sleeper.id
        ended = sleeper.wait(30)
        assert (ended["state"], ended["end_reason"], ended["exit_code"]) == ("exited", "killed", 137)
        tty = sbx.processes.start(["sh", "-c", "read x; stty size"], pty=(24, 80))
        assert tty.resize(30, 100)["id"] == tty.id  # (the record keeps the size it started with)
        tty.stdin.write("\n")
        assert "30 100" in tty.output_text()
        term = sbx.processes.start(["sleep", "600"])
        term.signal("SIGTERM")
        assert term.wait(30)["exit_code"] == 143
        ids = [r["id"] for r in sbx.processes.list()]
        assert {p.id, sleeper.id, tty.id, term.id} <= set(ids) and ids[0] == term.id, "newest first"
        with pytest.raises(warren.NotFoundError):
            sbx.processes.get("proc_01JZZZZZZZZZZZZZZZZZZZZZZZ")
        # A dropped stream reconnects from its last offset: every line once, in order.
        ticker = sbx.processes.start(["sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done"])
        with warren.Warren(owner_key, proxy.url) as through:
            seen: list[warren.ProcessOutput] = []
            for item in through.sandboxes.get(sbx.id).processes.get(ticker.id).output():
                seen.append(item)
                if len(seen) == 2:
                    proxy.drop_streams()
        assert b"".join(i.data for i in seen) == b"1\n2\n3\n4\n5\n6\n"
        assert not [i for i in seen if i.type == "gap"]
