#!/usr/bin/python3
"""Writes the Python SDK's generated files, or with --check fails when a committed one is stale:

- ``warren/models.py``: TypedDicts of the document's named schemas (``components.schemas``:
  ``Sandbox``, ``ExecResult``...), of every operation's JSON request body (``<Op>Body``) and
  2xx answer (``<Op>Response``), from docs/openapi.json (a nested object without a name is
  named by its path: ``GetUsageSnapshotResponseSnapshot``), and short names for the common
  records.
- ``warren/_sync/*.py``: the sync client, written from the async one (``warren/_async``) by
  token rewriting (as httpcore's unasync): one implementation, two surfaces.

Run from anywhere: ``/usr/bin/python3 packages/python/tools/generate.py [--check]``.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
REPO = PACKAGE.parent.parent
OPENAPI = REPO / "docs" / "openapi.json"
MODELS = PACKAGE / "warren" / "models.py"
ASYNC_DIR = PACKAGE / "warren" / "_async"
SYNC_DIR = PACKAGE / "warren" / "_sync"

# Short names for the records the SDK's methods return.
ALIASES = {
    "SandboxRecord": "Sandbox",
    "SnapshotRecord": "SandboxSnapshot",
    "CreateSandboxResult": "CreateSandboxResponse",
    "SnapshotResult": "CreateSandboxSnapshotResponse",
    "Secret": "SandboxSecret",
    "UsageSnapshot": "GetUsageSnapshotResponseSnapshot",
    "SqlResult": "QueryResult",
}
REF_PREFIX = "#/components/schemas/"


def pascal(name: str) -> str:
    parts = re.split(r"[^0-9A-Za-z]+", name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


class Writer:
    def __init__(self, components: dict[str, Any]) -> None:
        self.blocks: list[str] = []
        self.names: set[str] = set()
        self.components = components
        self.written: set[str] = set()

    def component(self, name: str) -> str:
        """The named schema ``name``, written (after the ones it refers to) the first time."""
        if name not in self.written:
            self.written.add(name)
            t = self.type_of(self.components[name], name)
            if t != name:
                self.names.add(name)
                self.blocks.append(f"{name} = {t}")
        return name

    def type_of(self, schema: Any, name: str) -> str:
        if not isinstance(schema, dict):
            return "Any"
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            return self.component(ref[len(REF_PREFIX) :])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                literals = [o["enum"] for o in options if isinstance(o, dict) and "enum" in o and len(o) <= 2]
                if len(literals) == len(options):
                    values = [v for enum in literals for v in enum]
                    return "Literal[" + ", ".join(json.dumps(v) for v in values) + "]"
                types = [self.type_of(o, f"{name}Variant{i + 1}") for i, o in enumerate(options)]
                unique = list(dict.fromkeys(types))
                return unique[0] if len(unique) == 1 else "Union[" + ", ".join(unique) + "]"
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return self.type_of(schema["allOf"][0], name)
        if "enum" in schema:
            return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
        if "const" in schema:
            return f"Literal[{json.dumps(schema['const'])}]"
        kind = schema.get("type")
        if isinstance(kind, list):
            types = [self.type_of({**schema, "type": k}, name) for k in kind]
            return "Union[" + ", ".join(dict.fromkeys(types)) + "]"
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            return f"list[{self.type_of(schema.get('items'), name + 'Item')}]"
        if kind == "object" or "properties" in schema:
            props = schema.get("properties")
            if not props:
                extra = schema.get("additionalProperties")
                value = self.type_of(extra, name + "Value") if isinstance(extra, dict) else "Any"
                return f"dict[str, {value}]"
            return self.typed_dict(schema, name)
        return "Any"

    def typed_dict(self, schema: dict[str, Any], name: str) -> str:
        base, n = name, 2
        while name in self.names:
            name, n = f"{base}{n}", n + 1
        self.names.add(name)
        required = set(schema.get("required", []))
        fields = []
        for prop, sub in schema["properties"].items():
            t = self.type_of(sub, name + pascal(prop))
            fields.append((prop, t if prop in required else f"NotRequired[{t}]", sub))
        if all(p.isidentifier() and not keyword.iskeyword(p) for p, _, _ in fields):
            lines = [f"class {name}(TypedDict):"]
            doc = schema.get("description")
            if isinstance(doc, str) and doc:
                lines.append(f"    {json.dumps(doc)}")
            for prop, t, sub in fields:
                lines.append(f"    {prop}: {t}")
                if isinstance(sub, dict) and isinstance(sub.get("description"), str):
                    lines.append(f"    {json.dumps(sub['description'])}")
            if not fields:
                lines.append("    pass")
        else:
            body = ", ".join(f"{json.dumps(p)}: {t}" for p, t, _ in fields)
            lines = [f'{name} = TypedDict("{name}", {{{body}}})']
        self.blocks.append("\n".join(lines))
        return name


def models_text(doc: dict[str, Any]) -> str:
    w = Writer(doc.get("components", {}).get("schemas", {}))
    for name in w.components:
        w.component(name)
    ops: list[str] = []
    for route, methods in doc["paths"].items():
        for method, op in methods.items():
            if not isinstance(op, dict) or "operationId" not in op:
                continue
            op_id = op["operationId"]
            ops.append(f"    {json.dumps(op_id)}: ({json.dumps(method.upper())}, {json.dumps(route)}),")
            content = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
            if content:
                t = w.type_of(content.get("schema"), f"{op_id}Body")
                if t != f"{op_id}Body":
                    w.blocks.append(f"{op_id}Body = {t}")
            for status in ("200", "201", "202"):
                answer = ((op.get("responses") or {}).get(status) or {}).get("content", {}).get("application/json")
                if answer:
                    t = w.type_of(answer.get("schema"), f"{op_id}Response")
                    if t != f"{op_id}Response":
                        w.blocks.append(f"{op_id}Response = {t}")
                    break
    aliases = [f"{short} = {long}" for short, long in ALIASES.items() if long in w.names]
    head = (
        '"""Wire types of the Warren API, generated from docs/openapi.json by\n'
        "packages/python/tools/generate.py: do not edit (a test fails when this file is stale).\n\n"
        "64-bit integers are ``str`` (decimal strings, as on the wire): see warren.numbers.\n"
        '"""\n\n'
        "# ruff: noqa\n"
        "from __future__ import annotations\n\n"
        "from typing import Any, Literal, NotRequired, TypedDict, Union\n"
    )
    body = "\n\n\n".join(w.blocks)
    tail = "\n".join(aliases)
    table = "# Every operation: (method, path).\nOPERATIONS: dict[str, tuple[str, str]] = {\n" + "\n".join(ops) + "\n}\n"
    return f"{head}\n\n{body}\n\n\n{tail}\n\n{table}"


# Token rewrites from the async sources to the sync ones (order matters).
UNASYNC = [
    (r"\basync def ", "def "),
    (r"\basync for ", "for "),
    (r"\basync with ", "with "),
    (r"\bawait ", ""),
    (r"\bimport asyncio\n", ""),
    (r"\basyncio\.sleep\(", "time.sleep("),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncGenerator\b", "Generator"),
    (r"\bAsyncIterable\b", "Iterable"),
    (r"\bhttpx\.AsyncClient\b", "httpx.Client"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\baclose\b", "close"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\basync_", "sync_"),
]


def unasync(text: str) -> str:
    for pattern, replacement in UNASYNC:
        text = re.sub(pattern, replacement, text)
    header = "# Generated from the async client by packages/python/tools/generate.py: do not edit.\n"
    return header + text


def outputs(doc_text: str | None = None) -> dict[Path, str]:
    doc = json.loads(doc_text if doc_text is not None else OPENAPI.read_text())
    out = {MODELS: models_text(doc)}
    for source in sorted(ASYNC_DIR.glob("*.py")):
        out[SYNC_DIR / source.name] = unasync(source.read_text())
    return out


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    expected = outputs()
    for path, text in expected.items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    extra = [p for p in SYNC_DIR.glob("*.py") if p not in expected]
    if check:
        stale += extra
    else:
        for p in extra:
            p.unlink()
    if stale:
        names = ", ".join(str(p.relative_to(REPO)) for p in stale)
        print(f"stale: {names} (run /usr/bin/python3 packages/python/tools/generate.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
