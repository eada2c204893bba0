"""The Python SDK of Warren: ``Warren`` (sync) and ``AsyncWarren`` (asyncio), the same surface
as the TypeScript SDK (packages/sdk). See packages/python/README.md."""

from ._async.client import AsyncWarren
from ._async.exec_stream import AsyncExecStream
from ._async.files import AsyncSandboxFiles, FileEntry, FileEvent
from ._async.processes import AsyncProcess, AsyncProcessStdin, AsyncSandboxProcesses
from ._async.sandboxes import AsyncSandbox
from ._async.volume_push import PushProgress, PushResult, default_hash_cache
from ._shared import DEFAULT_BASE_URL, CancelToken, ExecResult, ExecStreamResult, ProcessOutput, TailEvent, new_event_id
from ._sync.client import Warren
from ._sync.exec_stream import ExecStream
from ._sync.files import SandboxFiles
from ._sync.processes import Process, ProcessStdin, SandboxProcesses
from ._sync.sandboxes import Sandbox
from .errors import *  # noqa: F403
from .errors import ERROR_CLASSES, WarrenApiError, WarrenError, error_from_response
from .numbers import int64, wire_int64

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BASE_URL",
    "ERROR_CLASSES",
    "AsyncProcess",
    "AsyncProcessStdin",
    "AsyncSandbox",
    "AsyncSandboxProcesses",
    "AsyncSandboxFiles",
    "AsyncWarren",
    "CancelToken",
    "ExecResult",
    "AsyncExecStream",
    "ExecStream",
    "ExecStreamResult",
    "FileEntry",
    "FileEvent",
    "Process",
    "ProcessOutput",
    "ProcessStdin",
    "PushProgress",
    "PushResult",
    "Sandbox",
    "SandboxFiles",
    "SandboxProcesses",
    "TailEvent",
    "Warren",
    "WarrenApiError",
    "WarrenError",
    "default_hash_cache",
    "error_from_response",
    "int64",
    "new_event_id",
    "wire_int64",
]
__all__ += [name for name in dir() if name.endswith("Error") and name not in __all__]
