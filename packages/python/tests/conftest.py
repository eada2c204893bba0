"""Fixtures of the SDK's tests against a real Warren (started by test/python-sdk.test.ts):
WARREN_API_URL and WARREN_API_KEY (organization A's owner), WARREN_TEST_OTHER_KEY
(organization B's owner), WARREN_TEST_MEMBER_KEY (A's member), WARREN_TEST_PROXY_URL (a
misbehaving proxy in front of the server) and WARREN_TEST_CONTROL_URL (what tells it to)."""

from __future__ import annotations

import os
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

import warren


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        # Set by test/python-sdk.test.ts, the only runner of this suite: missing, the run is misconfigured.
        pytest.fail(f"{name} is not set (run this suite through test/python-sdk.test.ts)")
    return value


class Proxy:
    def __init__(self, url: str, control: str) -> None:
        self.url = url
        self._control = control

    def _post(self, action: str, **params: Any) -> None:
        query = urllib.parse.urlencode(params)
        urllib.request.urlopen(urllib.request.Request(f"{self._control}/{action}?{query}", method="POST")).read()

    def refuse_next(self, status: int, retry_after: int) -> None:
        self._post("refuse", status=status, retry_after=retry_after)

    def drop_next_after_request(self, match: str) -> None:
        self._post("drop", match=match)

    def drop_streams(self) -> None:
        self._post("drop-streams")

    def hold_key(self, key: str) -> None:
        """Makes ``key``'s record look held by a request still in flight on the server."""
        self._post("hold", key=key)

    def free_key(self, key: str) -> None:
        """Makes ``key``'s holder gone (a crash the server knows of)."""
        self._post("free", key=key)


@pytest.fixture(scope="session")
def api_url() -> str:
    return _env("WARREN_API_URL")


@pytest.fixture(scope="session")
def owner_key() -> str:
    return _env("WARREN_API_KEY")


@pytest.fixture(scope="session")
def other_key() -> str:
    return _env("WARREN_TEST_OTHER_KEY")


@pytest.fixture(scope="session")
def member_key() -> str:
    return _env("WARREN_TEST_MEMBER_KEY")


@pytest.fixture(scope="session")
def proxy() -> Proxy:
    return Proxy(_env("WARREN_TEST_PROXY_URL"), _env("WARREN_TEST_CONTROL_URL"))


@pytest.fixture()
def client(api_url: str, owner_key: str) -> Iterator[warren.Warren]:
    with warren.Warren(owner_key, api_url, retry_base_delay=0.02) as w:
        yield w


Recorder = Callable[[], list[httpx.Request]]


@pytest.fixture()
def recorded() -> tuple[httpx.Client, list[httpx.Request]]:
    """An httpx client recording every request the SDK sends through it (each attempt)."""
    seen: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [seen.append]}, timeout=60)
    return http, seen


def settle(*files: Path) -> None:
    """Waits until the files are out of the hash cache's racy window (changed over 2 s ago)."""
    while any(time.time_ns() - f.stat().st_ctime_ns < 2_200_000_000 for f in files):
        time.sleep(0.1)
