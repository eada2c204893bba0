// Cloud federation descriptors without a store: per-cloud fields, validation limits,
// defaults, and the provider-canonical audiences.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AppError } from "../../lib/errors.js";
import { type Cloud, deriveAudience, type FederationDescriptor, normalizeDescriptor } from "./federation.js";

const ARN = "arn:aws:iam::123456789012:role/deploy";
const GCP = { project_id: "my-project-123", project_number: "123456789012", pool_id: "pool-1", provider_id: "oidc-1" };
const AZURE = {
  application_id: "0b8c4f5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f",
  entra_tenant_id: "9F8E7D6C-5B4A-4321-8FED-CBA987654321",
};

function refuses(cloud: Cloud, descriptor: FederationDescriptor, field: RegExp): void {
  assert.throws(
    () => normalizeDescriptor(cloud, descriptor),
    (error: unknown) => error instanceof AppError && error.code === "invalid_argument" && field.test(error.message),
  );
}

describe("normalizeDescriptor", () => {
  it("defaults an absent or empty AWS region to us-east-1 and keeps a given one", () => {
    assert.deepEqual(normalizeDescriptor("aws", { role_arn: ARN }), { role_arn: ARN, region: "us-east-1" });
    assert.deepEqual(normalizeDescriptor("aws", { role_arn: ARN, region: "" }), { role_arn: ARN, region: "us-east-1" });
    for (const region of ["eu-west-2", "ap-southeast-1", "us-gov-west-1", "cn-north-1"]) {
      assert.deepEqual(normalizeDescriptor("aws", { role_arn: ARN, region }), { role_arn: ARN, region });
    }
  });

  it("accepts role ARNs of every partition, with paths, and names up to 64 characters", () => {
    for (const roleArn of [
      "arn:aws-cn:iam::123456789012:role/deploy",
      "arn:aws-us-gov:iam::123456789012:role/deploy",
      "arn:aws:iam::123456789012:role/team/ci/deploy",
      `arn:aws:iam::123456789012:role/${"r".repeat(64)}`,
      "arn:aws:iam::123456789012:role/with+=,.@-chars",
    ]) {
      assert.equal(normalizeDescriptor("aws", { role_arn: roleArn }).role_arn, roleArn);
    }
    for (const roleArn of [
      `arn:aws:iam::123456789012:role/${"r".repeat(65)}`,
      "arn:aws:iam::123456789012:role/",
      "arn:aws:iam::1234567890123:role/deploy",
      "arn:aws:iam::123456789012:user/deploy",
      "arn:azure:iam::123456789012:role/deploy",
      `${ARN} `,
    ]) {
      refuses("aws", { role_arn: roleArn }, /role_arn/);
    }
  });

  it("requires every GCP field but the service account email, within their limits", () => {
    assert.deepEqual(normalizeDescriptor("gcp", GCP), GCP);
    for (const field of Object.keys(GCP) as (keyof typeof GCP)[]) {
      refuses("gcp", { ...GCP, [field]: "" }, new RegExp(`${field} is required`));
    }
    assert.equal(normalizeDescriptor("gcp", { ...GCP, pool_id: "abcd" }).pool_id, "abcd");
    assert.equal(normalizeDescriptor("gcp", { ...GCP, pool_id: "p".repeat(32) }).pool_id, "p".repeat(32));
    refuses("gcp", { ...GCP, pool_id: "abc" }, /pool_id/);
    refuses("gcp", { ...GCP, pool_id: "p".repeat(33) }, /pool_id/);
    refuses("gcp", { ...GCP, pool_id: "gcp-pool" }, /pool_id/);
    assert.equal(normalizeDescriptor("gcp", { ...GCP, project_id: "abcdef" }).project_id, "abcdef");
    assert.equal(normalizeDescriptor("gcp", { ...GCP, project_id: `a${"b".repeat(29)}` }).project_id?.length, 30);
    refuses("gcp", { ...GCP, project_id: "abcde" }, /project_id/);
    refuses("gcp", { ...GCP, project_id: `a${"b".repeat(30)}` }, /project_id/);
    refuses("gcp", { ...GCP, project_id: "1project" }, /project_id/);
    refuses("gcp", { ...GCP, project_id: "project-" }, /project_id/);
    refuses("gcp", { ...GCP, project_number: "0" }, /project_number/);
    refuses("gcp", { ...GCP, provider_id: "UPPER-CASE" }, /provider_id/);
    const email = "runner@my-project-123.iam.gserviceaccount.com";
    assert.equal(normalizeDescriptor("gcp", { ...GCP, service_account_email: email }).service_account_email, email);
    refuses("gcp", { ...GCP, service_account_email: "runner" }, /service_account_email/);
  });

  it("requires both Azure GUIDs", () => {
    assert.deepEqual(normalizeDescriptor("azure", AZURE), AZURE);
    refuses("azure", { application_id: AZURE.application_id }, /entra_tenant_id is required/);
    refuses("azure", { entra_tenant_id: AZURE.entra_tenant_id }, /application_id is required/);
    refuses("azure", { ...AZURE, application_id: AZURE.application_id.replace(/-/g, "") }, /application_id/);
  });

  it("refuses any field of another cloud, and ignores empty ones", () => {
    refuses("aws", { role_arn: ARN, pool_id: "pool-1" }, /pool_id does not apply to cloud aws/);
    refuses("gcp", { ...GCP, region: "us-east-1" }, /region does not apply to cloud gcp/);
    refuses("azure", { ...AZURE, role_arn: ARN }, /role_arn does not apply to cloud azure/);
    refuses("azure", { ...AZURE, service_account_email: "a@b.com" }, /service_account_email/);
    assert.deepEqual(normalizeDescriptor("azure", { ...AZURE, region: "" }), AZURE);
  });
});

describe("deriveAudience", () => {
  it("gives each provider's canonical audience", () => {
    assert.equal(deriveAudience("aws", { role_arn: ARN, region: "eu-west-1" }), "sts.amazonaws.com");
    assert.equal(
      deriveAudience("gcp", GCP),
      "//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/pool-1/providers/oidc-1",
    );
    assert.equal(deriveAudience("azure", AZURE), "api://AzureADTokenExchange");
  });
});
