import { Type } from "@sinclair/typebox";
import { idempotencyKeyOf } from "../../http/idempotency.js";
import { EmptyObject, FLAT, flatResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { CreateSnapshotRequest, CreateSnapshotResponse, ListSnapshotsQuery, ListSnapshotsResponse } from "./schemas.js";
import type { SnapshotService } from "./service.js";

const TAGS = ["SandboxService"];

export function registerSnapshotRoutes(app: App, snapshots: SnapshotService): void {
  app.post(
    verbPath("/v1/sandboxes", "id", "snapshot"),
    {
      config: FLAT,
      schema: {
        operationId: "CreateSandboxSnapshot",
        tags: TAGS,
        summary:
          "Snapshot a ready, running or stopped sandbox (copy-on-write; a running one is frozen only for the instant it takes)",
        description:
          "Answers once the snapshot is sealed on the host (durability local); with wait_remote, once it is replicated to the blob store or at wait_timeout_seconds. Repeating the request with the same Idempotency-Key resolves its outcome.",
        params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }) }),
        body: CreateSnapshotRequest,
        response: flatResponses({ 200: CreateSnapshotResponse }, true),
      },
    },
    async (request) =>
      snapshots.create(credentialOf(request), request.params.id, request.body, idempotencyKeyOf(request)),
  );

  app.get(
    "/v1/snapshots",
    {
      config: FLAT,
      schema: {
        operationId: "ListSandboxSnapshots",
        description:
          "Lists snapshots, created_at descending then id descending, with the parent lineage edges of the page; filters: exact name, source sandbox. A sandbox-scoped credential sees its own lineage only.",
        tags: TAGS,
        summary: "List the project's snapshots, created_at descending then id descending, with parent edges",
        querystring: ListSnapshotsQuery,
        response: flatResponses({ 200: ListSnapshotsResponse }),
      },
    },
    async (request) => snapshots.list(credentialOf(request), request.query),
  );

  app.delete(
    "/v1/snapshots/:id",
    {
      config: FLAT,
      schema: {
        operationId: "DeleteSandboxSnapshot",
        description:
          "Deletes a snapshot. 409 snapshot_in_use while a live restore needs it or its replication may still publish; 404 not_found for an unknown id. Not for sandbox-scoped credentials (403 permission_denied).",
        tags: TAGS,
        summary: "Delete a snapshot (409 snapshot_in_use while a restore still reads it)",
        params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: "Snapshot id" }) }),
        response: flatResponses({ 200: EmptyObject }),
      },
    },
    async (request) => snapshots.delete(credentialOf(request), request.params.id),
  );
}
