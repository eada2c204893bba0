// One error class per contract error code (docs/api-decisions.md "Error codes"): both
// envelopes (flat on sandbox and snapshot routes, {code, message, details} elsewhere) become
// a WarrenApiError subclass carrying the code, the HTTP status and the request id.

export interface QuotaDetails {
  metric: string;
  limit: number;
  current?: number;
  reserved?: number;
  retry_after_seconds?: number;
}

export interface ErrorInit {
  code: string;
  message: string;
  status: number;
  requestId?: string | undefined;
  details?: Record<string, unknown> | undefined;
  retryAfterSeconds?: number | undefined;
}

/** Base of every error the SDK throws. */
export class WarrenError extends Error {
  override name = "WarrenError";
}

/** The server answered with an error envelope. `code` is the contract's stable code. */
export class WarrenApiError extends WarrenError {
  override name = "WarrenApiError";
  readonly code: string;
  readonly status: number;
  readonly requestId: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  readonly retryAfterSeconds: number | undefined;
  constructor(init: ErrorInit) {
    super(init.message);
    this.code = init.code;
    this.status = init.status;
    this.requestId = init.requestId;
    this.details = init.details;
    this.retryAfterSeconds = init.retryAfterSeconds;
  }
}

/** The request never got an answer (connection refused or reset, DNS) after every retry. */
export class ConnectionError extends WarrenError {
  override name = "ConnectionError";
}

/**
 * A sandbox reached a state it cannot leave for the one awaited (failed, terminated, ...).
 * `code` is the sandbox's `state_reason.code` when it has one (`image_unavailable`), else
 * `sandbox_<state>` (`sandbox_terminated`, `sandbox_wait_timeout` when the wait ran out).
 */
export class SandboxStateError extends WarrenError {
  override name = "SandboxStateError";
  readonly code: string;
  constructor(
    readonly sandboxId: string,
    readonly state: string,
    message: string,
    readonly reason?: { code: string; message: string },
    code?: string,
  ) {
    super(message);
    this.code = code ?? reason?.code ?? `sandbox_${state}`;
  }
}

const define = (name: string) =>
  class extends WarrenApiError {
    override name = name;
  };

export class InvalidArgumentError extends define("InvalidArgumentError") {}
export class FailedPreconditionError extends define("FailedPreconditionError") {}
export class UnauthenticatedError extends define("UnauthenticatedError") {}
export class PermissionDeniedError extends define("PermissionDeniedError") {}
export class SignatureInvalidError extends define("SignatureInvalidError") {}
export class NotFoundError extends define("NotFoundError") {}
export class MethodNotAllowedError extends define("MethodNotAllowedError") {}
export class AlreadyExistsError extends define("AlreadyExistsError") {}
export class IdempotencyConflictError extends define("IdempotencyConflictError") {}
export class NameConflictError extends define("NameConflictError") {}
export class QuarantinedError extends define("QuarantinedError") {}
export class SandboxNotRunningError extends define("SandboxNotRunningError") {}
export class SandboxStoppedError extends define("SandboxStoppedError") {}
export class SandboxNotReadyError extends define("SandboxNotReadyError") {}
export class SnapshotInProgressError extends define("SnapshotInProgressError") {}
export class SnapshotInUseError extends define("SnapshotInUseError") {}
export class SnapshotNotRestorableError extends define("SnapshotNotRestorableError") {}
export class WorkspaceShrinkUnsupportedError extends define("WorkspaceShrinkUnsupportedError") {}
export class SpawnFailedError extends define("SpawnFailedError") {}
export class OperationConflictError extends define("OperationConflictError") {}
export class PreconditionFailedError extends define("PreconditionFailedError") {}
export class PayloadTooLargeError extends define("PayloadTooLargeError") {}
export class RequestTimeoutError extends define("RequestTimeoutError") {}
export class DeadlineExceededError extends define("DeadlineExceededError") {}
export class UnsupportedMediaTypeError extends define("UnsupportedMediaTypeError") {}
export class UnsupportedCapabilityError extends define("UnsupportedCapabilityError") {}
export class RateLimitedError extends define("RateLimitedError") {}
export class HeadersTooLargeError extends define("HeadersTooLargeError") {}
export class InternalError extends define("InternalError") {}
export class UnavailableError extends define("UnavailableError") {}

/** 429 quota_exceeded: `metric` names the exhausted quota (sandboxes.running, ...). */
export class QuotaExceededError extends WarrenApiError {
  override name = "QuotaExceededError";
  readonly metric: string;
  readonly limit: number | undefined;
  constructor(init: ErrorInit, quota: Partial<QuotaDetails>) {
    super(init);
    this.metric = quota.metric ?? "";
    this.limit = quota.limit;
  }
}

type ErrorClass = new (init: ErrorInit) => WarrenApiError;

export const ERROR_CLASSES: Record<string, ErrorClass> = {
  invalid_argument: InvalidArgumentError,
  failed_precondition: FailedPreconditionError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  signature_invalid: SignatureInvalidError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  already_exists: AlreadyExistsError,
  idempotency_conflict: IdempotencyConflictError,
  name_conflict: NameConflictError,
  quarantined: QuarantinedError,
  sandbox_not_running: SandboxNotRunningError,
  sandbox_stopped: SandboxStoppedError,
  sandbox_not_ready: SandboxNotReadyError,
  snapshot_in_progress: SnapshotInProgressError,
  snapshot_in_use: SnapshotInUseError,
  snapshot_not_restorable: SnapshotNotRestorableError,
  workspace_shrink_unsupported: WorkspaceShrinkUnsupportedError,
  spawn_failed: SpawnFailedError,
  operation_conflict: OperationConflictError,
  precondition_failed: PreconditionFailedError,
  payload_too_large: PayloadTooLargeError,
  request_timeout: RequestTimeoutError,
  deadline_exceeded: DeadlineExceededError,
  unsupported_media_type: UnsupportedMediaTypeError,
  unsupported_capability: UnsupportedCapabilityError,
  rate_limited: RateLimitedError,
  headers_too_large: HeadersTooLargeError,
  internal: InternalError,
  unavailable: UnavailableError,
};

/** 64-bit counts may come as decimal strings. */
function numberOf(value: unknown): number | undefined {
  if (typeof value === "number") return value;
  if (typeof value === "string" && /^\d+$/.test(value)) return Number(value);
  return undefined;
}

/** The error of an error response: its envelope's code picks the class (unknown codes: WarrenApiError). */
export function errorFromResponse(status: number, body: unknown, retryAfter: string | null): WarrenApiError {
  const envelope = (body && typeof body === "object" ? body : {}) as Record<string, unknown>;
  const code = typeof envelope.code === "string" ? envelope.code : status >= 500 ? "internal" : "unknown";
  const retryAfterSeconds = retryAfter !== null && /^\d+$/.test(retryAfter) ? Number(retryAfter) : undefined;
  const init: ErrorInit = {
    code,
    status,
    message: typeof envelope.message === "string" ? envelope.message : `HTTP ${status}`,
    requestId: typeof envelope.request_id === "string" ? envelope.request_id : undefined,
    details: envelope.details && typeof envelope.details === "object" ? (envelope.details as never) : undefined,
    retryAfterSeconds,
  };
  if (code === "quota_exceeded") {
    // Sandbox admission puts metric and limit flat on the envelope and under details.quota; others only there.
    const nested = (init.details?.quota ?? {}) as Partial<QuotaDetails>;
    return new QuotaExceededError(init, {
      metric: typeof envelope.metric === "string" ? envelope.metric : nested.metric,
      limit: numberOf(envelope.limit ?? nested.limit),
    });
  }
  const Class = ERROR_CLASSES[code] ?? WarrenApiError;
  return new Class(init);
}
