"""One exception class per contract error code (docs/api-decisions.md "Error codes").

Both envelopes (flat on sandbox and snapshot routes, ``{code, message, details}`` elsewhere)
become a :class:`WarrenApiError` subclass carrying the code, the HTTP status and the request id.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from .numbers import int64

_DIGITS = re.compile(r"^\d+$")


class WarrenError(Exception):
    """Base of every error the SDK raises."""


class ConnectionError(WarrenError):  # noqa: A001 - the SDK's own, as the TypeScript SDK's
    """The request never got an answer (connection refused or reset, DNS) after every retry."""


class WarrenTimeoutError(WarrenError):
    """A logical call ran past its ``timeout`` (every retry included)."""


class CancelledError(WarrenError):
    """The call's :class:`~warren.CancelToken` was cancelled."""


class SandboxStateError(WarrenError):
    """A sandbox reached a state it cannot leave for the one awaited.

    ``code`` is the sandbox's ``state_reason.code`` when it has one, else ``sandbox_<state>``
    (``sandbox_wait_timeout`` when the wait ran out).
    """

    def __init__(
        self,
        sandbox_id: str,
        state: str,
        message: str,
        reason: Optional[Mapping[str, Any]] = None,
        code: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.sandbox_id = sandbox_id
        self.state = state
        self.reason = dict(reason) if reason else None
        self.code = code or (str(reason["code"]) if reason and "code" in reason else f"sandbox_{state}")


class PushError(WarrenError):
    """A volume push failed (a refused upload, a file changed while it was pushed, ...)."""


class WarrenApiError(WarrenError):
    """The server answered with an error envelope; ``code`` is the contract's stable code."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int,
        request_id: Optional[str] = None,
        details: Optional[dict[str, Any]] = None,
        retry_after_seconds: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details
        self.retry_after_seconds = retry_after_seconds

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.message}"


class InvalidArgumentError(WarrenApiError): ...
class FailedPreconditionError(WarrenApiError): ...
class UnauthenticatedError(WarrenApiError): ...
class PermissionDeniedError(WarrenApiError): ...
class SignatureInvalidError(WarrenApiError): ...
class NotFoundError(WarrenApiError): ...
class MethodNotAllowedError(WarrenApiError): ...
class AlreadyExistsError(WarrenApiError): ...
class IdempotencyConflictError(WarrenApiError): ...
class NameConflictError(WarrenApiError): ...
class QuarantinedError(WarrenApiError): ...
class SandboxNotRunningError(WarrenApiError): ...
class SandboxStoppedError(WarrenApiError): ...
class SandboxNotReadyError(WarrenApiError): ...
class SnapshotInProgressError(WarrenApiError): ...
class SnapshotInUseError(WarrenApiError): ...
class SnapshotNotRestorableError(WarrenApiError): ...
class WorkspaceShrinkUnsupportedError(WarrenApiError): ...
class SpawnFailedError(WarrenApiError): ...
class OperationConflictError(WarrenApiError): ...
class PreconditionFailedError(WarrenApiError): ...
class PayloadTooLargeError(WarrenApiError): ...
class RequestTimeoutError(WarrenApiError): ...
class DeadlineExceededError(WarrenApiError): ...
class UnsupportedMediaTypeError(WarrenApiError): ...
class UnsupportedCapabilityError(WarrenApiError): ...
class RateLimitedError(WarrenApiError): ...
class HeadersTooLargeError(WarrenApiError): ...
class InternalError(WarrenApiError): ...
class UnavailableError(WarrenApiError): ...


class QuotaExceededError(WarrenApiError):
    """429 quota_exceeded: ``metric`` names the exhausted quota (``sandboxes.running``, ...)."""

    metric: str = ""
    limit: Optional[int] = None


ERROR_CLASSES: dict[str, type[WarrenApiError]] = {
    "invalid_argument": InvalidArgumentError,
    "failed_precondition": FailedPreconditionError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "signature_invalid": SignatureInvalidError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "already_exists": AlreadyExistsError,
    "idempotency_conflict": IdempotencyConflictError,
    "name_conflict": NameConflictError,
    "quarantined": QuarantinedError,
    "sandbox_not_running": SandboxNotRunningError,
    "sandbox_stopped": SandboxStoppedError,
    "sandbox_not_ready": SandboxNotReadyError,
    "snapshot_in_progress": SnapshotInProgressError,
    "snapshot_in_use": SnapshotInUseError,
    "snapshot_not_restorable": SnapshotNotRestorableError,
    "workspace_shrink_unsupported": WorkspaceShrinkUnsupportedError,
    "spawn_failed": SpawnFailedError,
    "operation_conflict": OperationConflictError,
    "precondition_failed": PreconditionFailedError,
    "payload_too_large": PayloadTooLargeError,
    "request_timeout": RequestTimeoutError,
    "deadline_exceeded": DeadlineExceededError,
    "unsupported_media_type": UnsupportedMediaTypeError,
    "unsupported_capability": UnsupportedCapabilityError,
    "rate_limited": RateLimitedError,
    "headers_too_large": HeadersTooLargeError,
    "internal": InternalError,
    "unavailable": UnavailableError,
    "quota_exceeded": QuotaExceededError,
}


def error_from_response(status: int, body: object, retry_after: Optional[str]) -> WarrenApiError:
    """The error of an error response: its envelope's code picks the class (unknown codes: WarrenApiError)."""
    envelope: Mapping[str, Any] = body if isinstance(body, dict) else {}
    raw_code = envelope.get("code")
    code = raw_code if isinstance(raw_code, str) else ("internal" if status >= 500 else "unknown")
    message = envelope.get("message")
    request_id = envelope.get("request_id")
    details = envelope.get("details")
    cls = ERROR_CLASSES.get(code, WarrenApiError)
    error = cls(
        code,
        message[:2000] if isinstance(message, str) else f"HTTP {status}",
        status,
        request_id if isinstance(request_id, str) else None,
        details if isinstance(details, dict) else None,
        int(retry_after) if retry_after is not None and _DIGITS.match(retry_after) else None,
    )
    if isinstance(error, QuotaExceededError):
        # Sandbox admission puts metric and limit flat on the envelope and under details.quota.
        nested = (error.details or {}).get("quota")
        quota: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
        metric = envelope.get("metric", quota.get("metric"))
        error.metric = metric if isinstance(metric, str) else ""
        error.limit = int64(envelope.get("limit", quota.get("limit")))
    return error
