# The README walkthrough with the Python SDK: `python3 packages/python/examples/walkthrough.py`
import time

from warren import Warren

with Warren() as warren:  # WARREN_API_KEY, WARREN_API_URL (default http://127.0.0.1:8080)
    print(warren.whoami())
    with warren.sandboxes.create({"network_access": "none", "command": ["sleep", "infinity"]}) as dev:
        hello = dev.exec(["sh", "-c", "echo hello > /workspace/hello.txt; uname -s"])
        if hello.kind == "completed":
            print("exit", hello.exit, hello.stdout.strip())
        snapshot_id = dev.snapshot(name="walkthrough")["snapshot_id"]
        with warren.sandboxes.from_snapshot(snapshot_id, {"command": ["sleep", "infinity"]}) as copy:
            print("restored:", copy.files.read_text("/workspace/hello.txt").strip())
        volume = warren.volumes.create(f"walkthrough-{int(time.time())}", quota_bytes=1024**3)
        print(warren.volumes.push(volume["id"], "docs", hash_cache=False).version)
        # The ambient run stays open: stop after 1.5 s without an event.
        for event in warren.runs.tail(dev.run_id or "", idle_timeout=1.5):
            print("event", event.data.get("name"))
        print(warren.sql("SELECT name, count(*) AS n FROM events GROUP BY name ORDER BY name")["rows"])
    # Both sandboxes are deleted here, as the `with` blocks end.
