#!/usr/bin/python3
"""The Python SDK's overhead per call over raw httpx (bench/README.md "Python SDK"), run by
bench/sdk-python.ts against a real server (or by hand: WARREN_API_URL, WARREN_API_KEY and
PYTHONPATH=packages/python). WhoAmI through ``Warren.whoami()`` beside one ``httpx.Client``
GET of the same route with the same Bearer header, interleaved call by call (the order
swapped every pair), both on kept-alive connections; the same for ``AsyncWarren`` beside
``httpx.AsyncClient``. Prints one JSON object: p50/p95/min in ms, and the overhead (SDK p50
minus raw p50, and the median of the per-pair differences)."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import httpx

import warren

URL = os.environ["WARREN_API_URL"]
KEY = os.environ["WARREN_API_KEY"]
CALLS = int(os.environ.get("BENCH_CALLS", "2000"))
WARMUP = 200
HEADERS = {"authorization": f"Bearer {KEY}", "accept": "application/json"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(pct(values, 50), 3), "p95": round(pct(values, 95), 3), "min": round(min(values), 3)}


def compare(sdk: list[float], raw: list[float]) -> dict[str, Any]:
    diffs = [a - b for a, b in zip(sdk, raw)]
    return {
        "sdk": summary(sdk),
        "raw_httpx": summary(raw),
        "overhead_p50_ms": round(pct(sdk, 50) - pct(raw, 50), 3),
        "overhead_median_of_pairs_ms": round(statistics.median(diffs), 3),
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


async def atimed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


def bench_sync() -> dict[str, Any]:
    sdk_times: list[float] = []
    raw_times: list[float] = []
    with warren.Warren(KEY, URL) as client, httpx.Client() as raw:
        def raw_call() -> object:
            response = raw.get(f"{URL}/v1/whoami", headers=HEADERS)
            response.raise_for_status()
            return response.json()

        for i in range(WARMUP + CALLS):
            pair = [("sdk", client.whoami), ("raw", raw_call)]
            if i % 2:
                pair.reverse()
            for name, fn in pair:
                ms = timed(fn)
                if i >= WARMUP:
                    (sdk_times if name == "sdk" else raw_times).append(ms)
    return compare(sdk_times, raw_times)


async def bench_async() -> dict[str, Any]:
    sdk_times: list[float] = []
    raw_times: list[float] = []
    async with warren.AsyncWarren(KEY, URL) as client, httpx.AsyncClient() as raw:
        async def raw_call() -> object:
            response = await raw.get(f"{URL}/v1/whoami", headers=HEADERS)
            response.raise_for_status()
            return response.json()

        for i in range(WARMUP + CALLS):
            pair: list[tuple[str, Callable[[], Awaitable[object]]]] = [("sdk", client.whoami), ("raw", raw_call)]
            if i % 2:
                pair.reverse()
            for name, fn in pair:
                ms = await atimed(fn)
                if i >= WARMUP:
                    (sdk_times if name == "sdk" else raw_times).append(ms)
    return compare(sdk_times, raw_times)


def main() -> None:
    result = {
        "operation": "WhoAmI",
        "calls": CALLS,
        "python": platform.python_version(),
        "httpx": httpx.__version__,
        "sync": bench_sync(),
        "async": asyncio.run(bench_async()),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
