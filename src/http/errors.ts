// The one mapping from a domain error's stable code (lib/errors.ts) to an HTTP status and
// to the two envelopes of contract section 7.1. Handlers never build error JSON themselves.
import type { AppError, ErrorCode, QuotaDetails } from "../lib/errors.js";

export const ERROR_STATUS: Record<ErrorCode, number> = {
  invalid_argument: 400,
  failed_precondition: 400,
  unauthenticated: 401,
  permission_denied: 403,
  signature_invalid: 403,
  not_found: 404,
  method_not_allowed: 405,
  already_exists: 409,
  idempotency_conflict: 409,
  name_conflict: 409,
  quarantined: 409,
  sandbox_not_running: 409,
  sandbox_stopped: 409,
  sandbox_not_ready: 409,
  snapshot_in_progress: 409,
  snapshot_in_use: 409,
  snapshot_not_restorable: 409,
  workspace_shrink_unsupported: 409,
  spawn_failed: 422,
  operation_conflict: 409,
  precondition_failed: 412,
  payload_too_large: 413,
  request_timeout: 408,
  deadline_exceeded: 504,
  unsupported_media_type: 415,
  unsupported_capability: 422,
  quota_exceeded: 429,
  rate_limited: 429,
  headers_too_large: 431,
  internal: 500,
  unavailable: 503,
  host_unavailable: 503,
};

export function statusOf(error: AppError): number {
  return ERROR_STATUS[error.code];
}

/** Which envelope a route answers errors in (contract 7.1). */
export type EnvelopeKind = "flat" | "standard";

export function errorBody(error: AppError, requestId: string, envelope: EnvelopeKind): Record<string, unknown> {
  if (envelope === "flat") {
    const quota = error.details?.quota as QuotaDetails | undefined;
    if (error.code === "quota_exceeded" && quota) {
      // Contract 7.1: the sandbox admission rejection carries the quota flat and at details.quota.metric.
      return {
        code: error.code,
        message: error.message,
        request_id: requestId,
        metric: quota.metric,
        limit: quota.limit,
        retry_after_seconds: quota.retry_after_seconds,
        details: { quota: { metric: quota.metric } },
      };
    }
    return { code: error.code, message: error.message, request_id: requestId };
  }
  const body: Record<string, unknown> = { code: error.code, message: error.message };
  if (error.details) body.details = error.details;
  body.request_id = requestId;
  return body;
}
