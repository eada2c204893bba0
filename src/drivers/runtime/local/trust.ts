// The deployment's egress CA in every sandbox's trust store (docs/secret-egress.md): the CA
// at /etc/warren/ca.pem, and each CA bundle file the image has replaced by the image's own
// bundle plus the CA, so curl, openssl, Python and Go trust it with no flags. Both are
// read-only bind mounts of files on the sandbox's root image beside the overlay's upper dir,
// out of the sandbox's reach (runc resolves the targets inside the rootfs, so an image's
// symlinks cannot point a write at the host); the image's files
// are read without following symlinks and only when small. NODE_EXTRA_CA_CERTS names the
// CA for Node, which reads no system bundle.
import { lstat, mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import type { SandboxMount } from "../interface.js";
import { readRootfsFile } from "./spec.js";

export const SANDBOX_CA_PATH = "/etc/warren/ca.pem";
/** Where images keep their CA bundle (Debian/Ubuntu/Alpine, Fedora/RHEL, and the OpenSSL default of some). */
export const CA_BUNDLE_PATHS = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/cert.pem",
];
/** An image bundle larger than this is left alone (Mozilla's whole store is ~220 KB). */
const MAX_BUNDLE_BYTES = 4 * 1024 * 1024;

/** A sandbox's environment: NODE_EXTRA_CA_CERTS when it trusts a CA, under the spec's own entries. */
export function trustedEnv(caPem: string | undefined, env: Record<string, string> | undefined) {
  return caPem ? { NODE_EXTRA_CA_CERTS: SANDBOX_CA_PATH, ...env } : env;
}

/**
 * Writes the CA and the extended bundles into `<dir>/trust/` and returns the read-only
 * mounts that put them in place in the sandbox.
 */
export async function prepareTrust(rootfs: string, dir: string, caPem: string): Promise<SandboxMount[]> {
  const trustDir = path.join(dir, "trust");
  await mkdir(trustDir, { recursive: true, mode: 0o755 });
  const ca = caPem.endsWith("\n") ? caPem : `${caPem}\n`;
  const caFile = path.join(trustDir, "ca.pem");
  await writeFile(caFile, ca, { mode: 0o644 });
  const mounts: SandboxMount[] = [{ source: caFile, target: SANDBOX_CA_PATH, readOnly: true }];
  for (const [index, target] of CA_BUNDLE_PATHS.entries()) {
    const relative = target.slice(1);
    const info = await lstat(path.join(rootfs, relative)).catch(() => null);
    if (!info?.isFile() || info.size > MAX_BUNDLE_BYTES) continue;
    const bundle = await readRootfsFile(rootfs, relative);
    if (!bundle) continue;
    const file = path.join(trustDir, `bundle-${index}.crt`);
    await writeFile(file, `${bundle}${bundle.endsWith("\n") ? "" : "\n"}${ca}`, { mode: 0o644 });
    mounts.push({ source: file, target, readOnly: true });
  }
  return mounts;
}
