// What other modules may do with telemetry events. Plain functions over the caller's
// Queryable: an event is written in the same transaction as the change it describes.
import type { Queryable } from "../../store/db.js";
import * as repo from "./repo.js";

export type { EventRow, NewEvent } from "./repo.js";

export function appendEvent(q: Queryable, event: repo.NewEvent): Promise<void> {
  return repo.appendEvent(q, event);
}

/** Events that describe no change of their own (the egress ledger), written as one statement. */
export function appendEvents(q: Queryable, list: repo.NewEvent[]): Promise<void> {
  return repo.appendEvents(q, list);
}

export function listRunEvents(q: Queryable, orgId: string, runId: string): Promise<repo.EventRow[]> {
  return repo.listRunEvents(q, orgId, runId);
}

/** Removes a project's events (telemetry and annotations) inside DeleteProject's transaction. */
export function deleteProjectEvents(q: Queryable, orgId: string, projectId: string): Promise<void> {
  return repo.deleteProjectEvents(q, orgId, projectId);
}

export type { NewSpanEvent } from "./repo.js";

/** Spans as events of their runs (src/modules/otlp/), one statement; returns the rows written. */
export function appendSpanEvents(q: Queryable, list: repo.NewSpanEvent[]): Promise<number> {
  return repo.appendSpanEvents(q, list);
}
