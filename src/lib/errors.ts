// Typed domain errors: services throw AppError with a stable code; the HTTP edge maps the
// code to a status and an envelope (http/errors.ts). Nothing here knows HTTP.

export const ERROR_CODES = [
  "invalid_argument",
  "failed_precondition",
  "unauthenticated",
  "permission_denied",
  "signature_invalid",
  "not_found",
  "method_not_allowed",
  "already_exists",
  "idempotency_conflict",
  "name_conflict",
  "quarantined",
  "sandbox_not_running",
  "sandbox_stopped",
  "sandbox_not_ready",
  "snapshot_in_progress",
  "snapshot_in_use",
  "snapshot_not_restorable",
  "workspace_shrink_unsupported",
  "spawn_failed",
  "operation_conflict",
  "precondition_failed",
  "payload_too_large",
  "request_timeout",
  "deadline_exceeded",
  "unsupported_media_type",
  "unsupported_capability",
  "quota_exceeded",
  "rate_limited",
  "headers_too_large",
  "internal",
  "unavailable",
  "host_unavailable",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export interface QuotaDetails {
  metric: string;
  limit: string;
  current: string;
  reserved: string;
  retry_after_seconds: number;
}

export interface ErrorOptions {
  retryAfterSeconds?: number;
  quota?: QuotaDetails;
  details?: Record<string, unknown>;
  /** What went wrong underneath: logged with the error, never sent to the caller. */
  cause?: unknown;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly retryAfterSeconds: number | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, options: ErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryAfterSeconds = options.retryAfterSeconds ?? options.quota?.retry_after_seconds;
    const details = { ...options.details };
    if (options.quota) details.quota = options.quota;
    this.details = Object.keys(details).length > 0 ? details : undefined;
  }
}

export const notFound = (what: string) => new AppError("not_found", `${what} not found`);
export const invalid = (message: string) => new AppError("invalid_argument", message);
export const denied = (message: string) => new AppError("permission_denied", message);
