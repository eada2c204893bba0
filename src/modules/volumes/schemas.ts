// Wire schemas of volumes (contract 2.3, 4.2) and the shapes the contract leaves "not
// shown" (docs/api-decisions.md "Volumes"): the blob-upload container fields and the
// publish body and wrapper.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { DecimalString, Timestamp } from "../../http/schemas.js";

export const VOLUME_NAME_PATTERN = "^[A-Za-z0-9._-]{1,100}$";
export const DIGEST_SCHEMA_PATTERN = "^blake3:[0-9a-f]{64}$";
/** 2 TiB, the largest quota a volume may have (contract 8). */
export const MAX_QUOTA_BYTES = 2n * 1024n ** 4n;

export const Volume = named(
  "Volume",
  Type.Object(
    {
      id: Type.Optional(Type.String()),
      name: Type.Optional(Type.String()),
      project_id: Type.Optional(Type.String()),
      description: Type.Optional(Type.String()),
      quota_bytes: Type.Optional(DecimalString),
      used_bytes: Type.Optional(DecimalString),
      current_version_digest: Type.Optional(Type.String({ description: "Empty until the first publish" })),
      created_at: Type.Optional(Timestamp),
      updated_at: Type.Optional(Timestamp),
      created_by: Type.Optional(Type.String()),
    },
    { additionalProperties: false },
  ),
);

export const VolumeVersion = named(
  "VolumeVersion",
  Type.Object(
    {
      volume_id: Type.String(),
      version_digest: Type.String({ description: "BLAKE3 of the stored canonical manifest: the version's identity" }),
      parent_version_digest: Type.String({ description: "Empty for the first version" }),
      file_count: DecimalString,
      size_bytes: DecimalString,
      created_at: Timestamp,
      created_by: Type.String(),
    },
    { additionalProperties: false },
  ),
);

export const VolumeBlobRef = named(
  "VolumeBlobRef",
  Type.Object(
    {
      digest: Type.String({ pattern: DIGEST_SCHEMA_PATTERN }),
      size_bytes: Type.String({
        pattern: "^[0-9]{1,12}$",
        description: "Decimal string; verified against the stored bytes",
      }),
    },
    { additionalProperties: false },
  ),
);

export const VolumeBlobUpload = named(
  "VolumeBlobUpload",
  Type.Object(
    {
      digest: Type.String(),
      present: Type.Boolean({ description: "True when the blob is stored and verified: skip its upload" }),
      upload_url: Type.String({ description: "Presigned PUT of this one blob; empty when present" }),
    },
    { additionalProperties: false },
  ),
);

export const StartVolumePushResponse = Type.Object(
  {
    push_id: Type.String(),
    manifest_upload_url: Type.String(),
    expires_in_seconds: Type.Integer(),
    max_manifest_bytes: DecimalString,
  },
  { additionalProperties: false },
);

export type VolumeJson = Static<typeof Volume>;
export type VolumeVersionJson = Static<typeof VolumeVersion>;
export type VolumeBlobRefJson = Static<typeof VolumeBlobRef>;
export type VolumeBlobUploadJson = Static<typeof VolumeBlobUpload>;
export type StartVolumePushJson = Static<typeof StartVolumePushResponse>;
