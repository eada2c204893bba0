// Volume routes (VolumeService). Paths and the shapes the contract leaves "not shown" are
// recorded in docs/api-decisions.md "Volumes".
import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { EmptyObject, PageOf, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import {
  StartVolumePushResponse,
  VOLUME_NAME_PATTERN,
  Volume,
  VolumeBlobRef,
  VolumeBlobUpload,
  VolumeVersion,
} from "./schemas.js";
import type { VolumeService } from "./service.js";

const TAGS = ["VolumeService"];
/** RequestVolumeBlobUploads: blobs per call. */
export const MAX_BLOBS_PER_REQUEST = 1000;
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
const PushParams = Type.Object({ push_id: Type.String({ minLength: 1, maxLength: 64 }) });
const VolumeResponse = Type.Object({ volume: Volume }, { additionalProperties: false });
const PushEcho = Type.Optional(
  Type.String({ maxLength: 64, description: "When present, must equal the path's push_id" }),
);

function checkEcho(field: string, body: string | undefined, path: string): void {
  if (body !== undefined && body !== path) throw invalid(`body ${field} must equal the path's`);
}

export function registerVolumeRoutes(app: App, volumes: VolumeService): void {
  app.post(
    "/v1/volumes",
    {
      config: { idempotentOperation: "CreateVolume" },
      schema: {
        operationId: "CreateVolume",
        description:
          "Creates a volume in a project with a quota of at most 2 TiB (decimal string). 409 already_exists when the name is taken in the project.",
        tags: TAGS,
        summary: "Create a volume (no version until the first publish)",
        body: Type.Object(
          {
            name: Type.String({ pattern: VOLUME_NAME_PATTERN, description: "Unique in the project" }),
            project_id: Type.Optional(Type.String({ maxLength: 64, description: "Default: the credential's project" })),
            quota_bytes: Type.String({
              maxLength: 20,
              description: "Decimal string, at most 2 TiB; a cap, not an allocation",
            }),
            description: Type.Optional(Type.String({ maxLength: 4096, description: "At most 4 KiB (UTF-8 bytes)" })),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: VolumeResponse }),
      },
    },
    async (request) => ({ volume: await volumes.create(credentialOf(request), request.body) }),
  );

  app.get(
    "/v1/volumes/:id",
    {
      schema: {
        operationId: "GetVolume",
        description: "Gets one volume. 404 not_found for an unknown id or another organization's.",
        tags: TAGS,
        summary: "Get a volume",
        params: IdParams,
        response: standardResponses({ 200: VolumeResponse }),
      },
    },
    async (request) => ({ volume: await volumes.get(credentialOf(request), request.params.id) }),
  );

  app.get(
    "/v1/volumes",
    {
      schema: {
        operationId: "ListVolumes",
        description: "Lists the organization's volumes, newest first, a page at a time.",
        tags: TAGS,
        summary: "List a project's volumes, newest first",
        querystring: Type.Object(
          { ...PageQuery, project_id: Type.Optional(Type.String({ maxLength: 64 })) },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: PageOf("volumes", Volume) }),
      },
    },
    async (request) =>
      volumes.list(credentialOf(request), {
        projectId: request.query.project_id,
        pageSize: request.query.page_size ?? DEFAULT_PAGE_SIZE,
        ...(request.query.page_token ? { pageToken: request.query.page_token } : {}),
      }),
  );

  app.delete(
    "/v1/volumes/:id",
    {
      schema: {
        operationId: "DeleteVolume",
        description:
          "Deletes a volume and its versions (their content is collected later). 404 not_found for an unknown id.",
        tags: TAGS,
        summary: "Delete a volume; sandboxes that pinned one of its versions keep it",
        params: IdParams,
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => volumes.delete(credentialOf(request), request.params.id),
  );

  app.post(
    "/v1/volumes/:id/pushes",
    {
      schema: {
        operationId: "StartVolumePush",
        description:
          "Starts a push of a new version of a volume: a manifest upload URL and its byte limit. Upload the manifest, then the blobs RequestVolumeBlobUploads asks for, then PublishVolumeVersion. 404 not_found for an unknown volume.",
        tags: TAGS,
        summary: "Open a push: the manifest's upload URL, how long the push stays open, the manifest's size limit",
        params: IdParams,
        body: Type.Object(
          {
            volume_id: Type.Optional(
              Type.String({ maxLength: 64, description: "When present, must equal the path id" }),
            ),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: StartVolumePushResponse }),
      },
    },
    async (request) => {
      const cred = credentialOf(request);
      if (request.body.volume_id !== undefined && request.body.volume_id !== request.params.id) {
        await volumes.get(cred, request.params.id);
        checkEcho("volume_id", request.body.volume_id, request.params.id);
      }
      return volumes.startPush(cred, request.params.id);
    },
  );

  app.post(
    "/v1/volume-pushes/:push_id/blob-uploads",
    {
      schema: {
        operationId: "RequestVolumeBlobUploads",
        description:
          "For each blob of the pushed manifest, whether it is already stored (present: skip it) or a short-lived presigned PUT URL. 400 failed_precondition when the push expired or its manifest is not uploaded.",
        tags: TAGS,
        summary: "For each blob: present (skip it) or a presigned PUT URL bound to its content address",
        params: PushParams,
        body: Type.Object(
          {
            push_id: PushEcho,
            blobs: Type.Array(VolumeBlobRef, { minItems: 1, maxItems: MAX_BLOBS_PER_REQUEST }),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({
          200: Type.Object({ uploads: Type.Array(VolumeBlobUpload) }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => {
      checkEcho("push_id", request.body.push_id, request.params.push_id);
      const cred = credentialOf(request);
      return { uploads: await volumes.requestUploads(cred, request.params.push_id, request.body.blobs) };
    },
  );

  app.post(
    "/v1/volume-pushes/:push_id/publish",
    {
      schema: {
        operationId: "PublishVolumeVersion",
        description:
          "Publishes the push's version once its manifest and every blob are stored and verified: it becomes the volume's current version. 400 failed_precondition when blobs are missing, the push expired or was already published; 429 quota_exceeded past the volume's quota.",
        tags: TAGS,
        summary: "Verify the push's manifest and blobs and make it the volume's current version",
        params: PushParams,
        body: Type.Object({ push_id: PushEcho }, { additionalProperties: false }),
        response: standardResponses({
          200: Type.Object({ version: VolumeVersion }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => {
      checkEcho("push_id", request.body.push_id, request.params.push_id);
      return { version: await volumes.publish(credentialOf(request), request.params.push_id) };
    },
  );
}
