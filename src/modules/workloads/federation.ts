// Cloud federation descriptors: which fields each cloud takes, how they are validated, and
// the audience the server derives from them in each provider's canonical form:
//   aws   -> "sts.amazonaws.com" (the audience AWS STS AssumeRoleWithWebIdentity expects)
//   gcp   -> "//iam.googleapis.com/projects/<number>/locations/global/workloadIdentityPools/<pool>/providers/<provider>"
//            (the workload identity pool provider's full resource name)
//   azure -> "api://AzureADTokenExchange" (the Entra federated-credential convention)
import { AppError } from "../../lib/errors.js";
import type { CloudJson as Cloud, FederationDescriptorJson as FederationDescriptor } from "./schemas.js";

// The wire types, under the names this module's callers use.
export type { CloudJson as Cloud, FederationDescriptorJson as FederationDescriptor } from "./schemas.js";

export const DESCRIPTOR_FIELDS: Record<
  Cloud,
  { required: (keyof FederationDescriptor)[]; optional: (keyof FederationDescriptor)[] }
> = {
  aws: { required: ["role_arn"], optional: ["region"] },
  gcp: { required: ["project_id", "project_number", "pool_id", "provider_id"], optional: ["service_account_email"] },
  azure: { required: ["application_id", "entra_tenant_id"], optional: [] },
};

export const AWS_DEFAULT_REGION = "us-east-1";

// IAM role ARN: partition, empty region, 12-digit account, role path and name.
const ROLE_ARN = /^arn:aws(?:-cn|-us-gov|-iso|-iso-b)?:iam::\d{12}:role\/(?:[\x21-\x7e]{1,510}\/)?[\w+=,.@-]{1,64}$/;
const AWS_REGION = /^[a-z]{2}(?:-gov|-iso|-isob)?-[a-z]+-\d{1,2}$/;
const GCP_PROJECT_ID = /^[a-z][a-z0-9-]{4,28}[a-z0-9]$/;
const GCP_PROJECT_NUMBER = /^[1-9]\d{0,19}$/;
const GCP_POOL_OR_PROVIDER = /^[a-z0-9-]{4,32}$/;
const EMAIL = /^[^\s@]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,}$/;
const GUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

const FIELD_RULES: Record<keyof FederationDescriptor, { pattern: RegExp; hint: string }> = {
  role_arn: { pattern: ROLE_ARN, hint: "an IAM role ARN such as arn:aws:iam::123456789012:role/deploy" },
  region: { pattern: AWS_REGION, hint: "an AWS region such as us-east-1" },
  project_id: {
    pattern: GCP_PROJECT_ID,
    hint: "a Google Cloud project id (6 to 30 lowercase letters, digits, dashes)",
  },
  project_number: { pattern: GCP_PROJECT_NUMBER, hint: "a Google Cloud project number (digits)" },
  pool_id: {
    pattern: GCP_POOL_OR_PROVIDER,
    hint: "a workload identity pool id (4 to 32 lowercase letters, digits, dashes)",
  },
  provider_id: {
    pattern: GCP_POOL_OR_PROVIDER,
    hint: "a pool provider id (4 to 32 lowercase letters, digits, dashes)",
  },
  service_account_email: { pattern: EMAIL, hint: "a service account email" },
  application_id: { pattern: GUID, hint: "an Entra application (client) id GUID" },
  entra_tenant_id: { pattern: GUID, hint: "an Entra tenant id GUID" },
};

/** Validates a descriptor for its cloud and returns it normalized (defaults applied, other clouds' fields refused). */
export function normalizeDescriptor(cloud: Cloud, input: FederationDescriptor): FederationDescriptor {
  const allowed = DESCRIPTOR_FIELDS[cloud];
  const out: FederationDescriptor = {};
  for (const [field, raw] of Object.entries(input) as [keyof FederationDescriptor, string | undefined][]) {
    if (raw === undefined || raw === "") continue;
    if (!allowed.required.includes(field) && !allowed.optional.includes(field)) {
      throw new AppError("invalid_argument", `descriptor.${field} does not apply to cloud ${cloud}`);
    }
    const rule = FIELD_RULES[field];
    if (!rule.pattern.test(raw) || (field === "pool_id" && raw.startsWith("gcp-"))) {
      throw new AppError("invalid_argument", `descriptor.${field} must be ${rule.hint}`);
    }
    out[field] = raw;
  }
  for (const field of allowed.required) {
    if (!out[field]) throw new AppError("invalid_argument", `descriptor.${field} is required for cloud ${cloud}`);
  }
  if (cloud === "aws" && !out.region) out.region = AWS_DEFAULT_REGION;
  return out;
}

export function deriveAudience(cloud: Cloud, descriptor: FederationDescriptor): string {
  switch (cloud) {
    case "aws":
      return "sts.amazonaws.com";
    case "gcp":
      return `//iam.googleapis.com/projects/${descriptor.project_number}/locations/global/workloadIdentityPools/${descriptor.pool_id}/providers/${descriptor.provider_id}`;
    case "azure":
      return "api://AzureADTokenExchange";
  }
}
