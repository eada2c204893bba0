"""The pieces with no server: the generated files' freshness, SSE parsing, BLAKE3, the 64-bit rule, errors."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

import warren
from warren import _blake3
from warren._shared import SseParser, exec_result, in_flight_delay, process_output, retry_delay


def _generator() -> ModuleType:
    source = os.environ.get("WARREN_PYTHON_SOURCE")
    if not source:
        # Set by test/python-sdk.test.ts, the only runner of this suite: missing, the run is misconfigured.
        pytest.fail("WARREN_PYTHON_SOURCE is not set (run this suite through test/python-sdk.test.ts)")
    spec = importlib.util.spec_from_file_location("generate", Path(source) / "tools" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate"] = module
    spec.loader.exec_module(module)
    return module


def test_the_installed_package_is_the_built_wheel() -> None:
    prefix = os.environ.get("WARREN_EXPECT_PREFIX")
    if prefix:
        assert warren.__file__ and warren.__file__.startswith(prefix), warren.__file__


def test_generated_files_are_up_to_date() -> None:
    gen = _generator()
    for path, text in gen.outputs().items():
        assert path.read_text() == text, f"{path} is stale: run /usr/bin/python3 packages/python/tools/generate.py"


def test_models_change_with_the_document() -> None:
    gen = _generator()
    doc = json.loads(gen.OPENAPI.read_text())
    doc["paths"]["/v1/whoami"]["get"]["operationId"] = "WhoAmIRenamed"
    doc["components"]["schemas"]["WhoAmI"]["properties"]["extra_field"] = {"type": "string"}
    text = gen.models_text(doc)
    # The answer is the named schema WhoAmI: the operation's name is an alias of it.
    assert "WhoAmIRenamedResponse = WhoAmI" in text
    assert "WhoAmIResponse" not in text
    assert "    extra_field: NotRequired[str]" in text


def test_sse_parser_frames_ids_events_and_bounds() -> None:
    parser = SseParser()
    items = parser.feed(b': comment\nid: 1\ndata: {"name":')
    assert items == []
    items = parser.feed(b'"a"}\n\nevent: end\ndata: {}\r\n\r\n')
    assert [(i.id, i.event, i.data) for i in items] == [("1", None, {"name": "a"}), (None, "end", {})]
    with pytest.raises(warren.WarrenError):
        SseParser().feed(b"x" * (4 * 1_048_576 + 1))


def test_process_output_events_become_chunks_and_gaps() -> None:
    parser = SseParser()
    events = parser.feed(
        b'event: stdout\nid: 3\ndata: {"offset":0,"data":"aGkK"}\n\n: heartbeat\n\n'
        b'event: gap\nid: 90\ndata: {"kind":"gap","from":3,"to":90}\n\n'
        b'event: stderr\nid: 92\ndata: {"offset":90,"data":"eQo="}\n\nevent: end\nid: 92\ndata: {"offset":92}\n\n'
    )
    items = [process_output(e) for e in events]
    assert items == [
        warren.ProcessOutput("stdout", 0, 3, b"hi\n"),
        warren.ProcessOutput("gap", 3, 90),
        warren.ProcessOutput("stderr", 90, 92, b"y\n"),
        None,
    ]
    assert [e.id for e in events] == ["3", "90", "92", "92"]


def test_blake3_matches_the_reference_vectors() -> None:
    # From the BLAKE3 reference's test_vectors.json (input: bytes 0..250 repeating).
    vectors = {
        0: "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
        1: "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213",
        1024: "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
        1025: "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
        2048: "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a",
        3072: "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2",
    }
    for size, digest in vectors.items():
        data = bytes(i % 251 for i in range(size))
        h = _blake3.PureBlake3()
        for at in range(0, size, 100):
            h.update(data[at : at + 100])
        assert h.hexdigest() == digest, size


def test_64_bit_integers_are_decimal_strings_on_the_wire() -> None:
    assert warren.wire_int64(2**40) == "1099511627776"
    assert warren.wire_int64("18446744073709551615") == "18446744073709551615"
    assert warren.int64("9007199254740993") == 9007199254740993  # above 2**53: exact
    assert warren.int64("1e3") is None and warren.int64(True) is None and warren.int64("18446744073709551616") is None
    assert warren.wire_int64("12 GiB") == "12 GiB"  # a string is the server's to judge (invalid_argument)
    with pytest.raises(ValueError):
        warren.wire_int64(2**64)
    with pytest.raises(ValueError):
        warren.wire_int64(True)


def test_error_envelopes_map_to_one_class_per_code() -> None:
    flat = warren.error_from_response(
        429, {"code": "quota_exceeded", "message": "no", "metric": "sandboxes.running", "limit": "5"}, "7"
    )
    assert isinstance(flat, warren.QuotaExceededError)
    assert (flat.metric, flat.limit, flat.retry_after_seconds, flat.status) == ("sandboxes.running", 5, 7, 429)
    nested = warren.error_from_response(404, {"code": "not_found", "message": "x", "request_id": "r1"}, None)
    assert isinstance(nested, warren.NotFoundError) and nested.request_id == "r1"
    unknown = warren.error_from_response(418, {"code": "teapot"}, None)
    assert type(unknown) is warren.WarrenApiError and unknown.code == "teapot"
    assert warren.error_from_response(502, "not json", None).code == "internal"
    assert set(warren.ERROR_CLASSES) >= {"sandbox_not_running", "idempotency_conflict", "rate_limited"}


def test_retry_decisions_honour_retry_after_within_the_ceiling() -> None:
    assert retry_delay("2", 0, 0.25, 10) == 2.0
    assert retry_delay("60", 0, 0.25, 10) is None  # past the ceiling: answered at once
    assert retry_delay(None, 2, 0.25, 10) == 1.0
    body = b'{"code":"operation_conflict"}'
    assert in_flight_delay("1", body, 0, 0, 0.25, 10, 30) == 1.0
    assert in_flight_delay("1", b'{"code":"idempotency_conflict"}', 0, 0, 0.25, 10, 30) is None
    assert in_flight_delay("1", body, 0, 29.5, 0.25, 10, 30) is None


def test_exec_outcomes_are_told_apart_by_kind() -> None:
    assert exec_result({"exit": 3, "stdout": "o", "stderr": "", "truncated": False}).exit == 3
    assert exec_result({"timeout": True, "stdout": "", "stderr": "", "truncated": False}).kind == "timed_out"
    assert exec_result({"indeterminate": True, "stdout": "", "stderr": "", "truncated": True}).kind == "indeterminate"


def test_websocket_frames_are_joined_and_bounded() -> None:
    from warren import _ws

    parser = _ws.FrameParser()
    # A text message in two fragments around a ping, fed one byte at a time.
    wire = bytes([0x01, 3]) + b"hel" + bytes([0x89, 1]) + b"p" + bytes([0x80, 2]) + b"lo"
    got: list[tuple[int, bytes]] = []
    for byte in wire:
        got += parser.feed(bytes([byte]))
    assert got == [(_ws.PING, b"p"), (_ws.TEXT, b"hello")]
    # A 16-bit length, and what a client sends decodes as what it meant (unmasked here).
    frame = _ws.encode_frame(_ws.BINARY, b"x" * 300)
    assert frame[1] & 0x80 and frame[1] & 0x7F == 126
    for hostile in (
        bytes([0x82, 0x81, 0, 0, 0, 0, 0]),  # masked by the server
        bytes([0x82, 127]) + (17 * 1_048_576).to_bytes(8, "big"),  # over 16 MiB
        bytes([0x09, 0]),  # a fragmented control frame
        bytes([0x80, 0]),  # a continuation of nothing
        bytes([0xC2, 0]),  # a reserved bit
    ):
        with pytest.raises(warren.ConnectionError):
            _ws.FrameParser().feed(hostile)
    with pytest.raises(warren.ConnectionError):
        _ws.parse_head(b"SSH-2.0-OpenSSH\r\n")
    with pytest.raises(warren.ConnectionError):
        _ws.check_upgrade(101, {"upgrade": "websocket", "sec-websocket-accept": "wrong"}, "key")
