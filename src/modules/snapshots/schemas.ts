// Wire schemas of the snapshot operations (contract 2.2, 4.1, 4.2, 7.2, 8).
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { Timestamp } from "../../http/schemas.js";

export const SNAPSHOT_ID_PATTERN = "^snp-[0-9a-f]{40}$";

export const Durability = named(
  "SnapshotDurability",
  Type.Union([Type.Literal("local"), Type.Literal("replicated")], {
    description: "Strongest durability confirmed: local once sealed on the host, replicated once in the blob store",
  }),
);

export const CreateSnapshotRequest = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    wait_remote: Type.Optional(
      Type.Boolean({ description: "Answer once the snapshot is replicated, or at wait_timeout_seconds" }),
    ),
    wait_timeout_seconds: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 25, description: "How long wait_remote waits (default 25)" }),
    ),
  },
  { additionalProperties: false },
);

export const CreateSnapshotResponse = Type.Object(
  { snapshot_id: Type.String({ pattern: SNAPSHOT_ID_PATTERN }), durability: Durability },
  { additionalProperties: false },
);

export const Snapshot = named(
  "SandboxSnapshot",
  Type.Object(
    {
      id: Type.String({ pattern: SNAPSHOT_ID_PATTERN }),
      created_at: Timestamp,
      durability: Durability,
      image: Type.String({ description: "Workload image of the lineage, inherited by children" }),
      lineage_path: Type.String({ description: "The source sandbox's lineage_path" }),
      source_sandbox_id: Type.String(),
      name: Type.Optional(Type.String()),
      parent_snapshot_id: Type.Optional(
        Type.String({
          description: "Snapshot the source sandbox was restored from; omitted for an image-created root",
        }),
      ),
    },
    { additionalProperties: false },
  ),
);

export const SnapshotEdge = named(
  "SandboxSnapshotEdge",
  Type.Object(
    {
      snapshot_id: Type.String(),
      parent_snapshot_id: Type.String(),
    },
    {
      additionalProperties: false,
      description: "A parent lineage edge: snapshot_id's source was restored from parent",
    },
  ),
);

export const ListSnapshotsQuery = Type.Object(
  {
    page_size: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, description: "Rows per page; default 50" })),
    page_token: Type.Optional(Type.String({ maxLength: 512 })),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: "Exact snapshot name" })),
    sandbox_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "Only this source sandbox's" })),
    project_id: Type.Optional(Type.String({ maxLength: 64 })),
  },
  { additionalProperties: false },
);

export const ListSnapshotsResponse = Type.Object(
  {
    snapshots: Type.Array(Snapshot),
    edges: Type.Array(SnapshotEdge, { description: "Parent edges of the snapshots on this page" }),
    next_page_token: Type.String(),
  },
  { additionalProperties: false },
);

export type CreateSnapshotBody = Static<typeof CreateSnapshotRequest>;
export type CreateSnapshotResult = Static<typeof CreateSnapshotResponse>;
export type SnapshotJson = Static<typeof Snapshot>;
export type ListSnapshotsQueryJson = Static<typeof ListSnapshotsQuery>;
export type ListSnapshotsResult = Static<typeof ListSnapshotsResponse>;
