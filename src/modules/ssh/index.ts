// Starts the SSH gateway when configured (WARREN_SSH_LISTEN) with a runtime or a router (an
// `api` replica serves every sandbox through its owner's internal API), and tells
// the sandbox service where it is (each running sandbox's `ssh` field) and how to ask whether
// a session holds a sandbox awake.
import type { RuntimeDriver } from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { IdentityService } from "../identity/service.js";
import type { SandboxLinks, SandboxService } from "../sandboxes/service.js";
import { SshGateway, type SshGatewayOptions } from "./gateway.js";
import type { FailureLimiterOptions } from "./limits.js";

export interface SshGatewaySetup {
  listen: { host: string; port: number };
  /** The host clients are told to connect to (ssh_host; the sandbox record's ssh.host). */
  publicHost: string;
  /** The port they are told (the deployment's, WARREN_SSH_PUBLIC_PORT); null: the bound one. */
  publicPort?: number | null;
  /** The host key in OpenSSH format (host-key.ts openHostKey: the deployment's, from the store). */
  hostKey: string;
  identity: IdentityService;
  sandboxes: SandboxService;
  /** Where the sandbox service learns of this gateway (container.sandboxLinks). */
  links: Pick<SandboxLinks, "ssh">;
  runtime: RuntimeDriver | null;
  log: Logger;
  failureLimits?: FailureLimiterOptions;
  /** Verifies IssueSshToken's tokens (the session service); absent: API keys only. */
  tokens?: SshGatewayOptions["tokens"];
  metrics?: SshGatewayOptions["metrics"];
  /** Routes sessions and forwards to the sandbox's owner (container.router). */
  routeOf?: SshGatewayOptions["routeOf"];
}

export async function startSshGateway(setup: SshGatewaySetup): Promise<SshGateway | null> {
  if (!setup.runtime && !setup.routeOf) {
    setup.log.warn("no sandbox runtime and no router: the SSH gateway is off");
    return null;
  }
  const gateway = new SshGateway({
    hostKey: setup.hostKey,
    identity: setup.identity,
    sandboxes: setup.sandboxes,
    runtime: setup.runtime,
    log: setup.log,
    ...(setup.failureLimits ? { failureLimits: setup.failureLimits } : {}),
    tokens: setup.tokens ?? null,
    ...(setup.metrics ? { metrics: setup.metrics } : {}),
    ...(setup.routeOf ? { routeOf: setup.routeOf } : {}),
  });
  const bound = await gateway.listen(setup.listen.host, setup.listen.port);
  setup.links.ssh = {
    endpoint: { host: setup.publicHost, port: setup.publicPort ?? bound.port },
    hasOpenSession: (sandboxId) => gateway.hasOpenSession(sandboxId),
  };
  setup.log.info({ address: `${bound.host}:${bound.port}` }, "ssh gateway is serving");
  return gateway;
}

export { SshGateway } from "./gateway.js";
