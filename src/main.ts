// Entry point: loadConfig() -> createContainer() -> createApp() -> listen, plus first-start
// bootstrap, the controllers, a guard that keeps one callback's bug from ending the process,
// and a clean shutdown on SIGINT/SIGTERM.
import { loadConfig } from "./config.js";
import { createApp, createContainer } from "./container.js";
import { startControllers } from "./controllers/index.js";
import { startSessionPlane } from "./http/session-plane.js";
import { busyListenersMessage } from "./lib/listen-check.js";
import { createServerLogger } from "./lib/logger.js";
import { installProcessGuard } from "./lib/process-guard.js";
import { writeServerLock } from "./lib/server-lock.js";
import { apiTargetOf } from "./modules/egress/gateway.js";
import { bootstrapNotice } from "./modules/identity/service.js";
import { startSshGateway } from "./modules/ssh/index.js";

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createServerLogger(config.logLevel);
  installProcessGuard(log);
  const busy = await busyListenersMessage([
    { setting: "WARREN_LISTEN", host: config.listenHost, port: config.listenPort },
    ...(config.sessionListen ? [{ setting: "WARREN_SESSION_LISTEN", ...config.sessionListen }] : []),
    ...(config.sshListen ? [{ setting: "WARREN_SSH_LISTEN", ...config.sshListen }] : []),
  ]);
  if (busy) throw new Error(busy);
  // Claimed before the store opens, so the admin CLI never opens PGlite beside the server.
  const releaseLock = config.databaseUrl
    ? async () => undefined
    : await writeServerLock(
        config.dataDir,
        `http://${config.listenHost.includes(":") ? `[${config.listenHost}]` : config.listenHost}:${config.listenPort}`,
      );
  const container = await createContainer(config, log);
  const boot = await container.identity.bootstrap(config.bootstrapOrgSlug, config.bootstrapApiKey);
  if (boot.created) {
    log.info({ organization: config.bootstrapOrgSlug }, "bootstrapped the operator organization and its owner key");
    if (boot.generatedKey) {
      // Printed once, outside the structured log, so the key never lands in a log pipeline.
      process.stderr.write(bootstrapNotice(config.bootstrapOrgSlug, boot.generatedKey));
    }
  }
  if (boot.configuredKeyIgnored) {
    // Never the key itself: only that it opens nothing here.
    log.warn(
      { data_dir: config.databaseUrl ? undefined : config.dataDir },
      "WARREN_BOOTSTRAP_API_KEY is ignored: this store was bootstrapped before and the key is not one of its API keys (it is read only on the first start): use the key issued then, or, with the server stopped, `npm run admin -- key create --org default --name owner2 --kind user --role owner --email you@example.test`",
    );
  }
  const app = await createApp(container);
  const controllers = await startControllers(container);
  const address = await app.listen({ host: config.listenHost, port: config.listenPort });
  container.egress?.setApiTarget(apiTargetOf(config.listenHost, app.server.address()));
  const sessionPlane = config.sessionListen
    ? await startSessionPlane(container.sessions, { ...config.sessionListen, log, metrics: container.metrics })
    : null;
  log.info({ address, store: container.db.kind }, "warren is serving");
  const ssh = config.sshListen
    ? await startSshGateway({
        listen: config.sshListen,
        publicHost: config.sshHost,
        hostKey: await container.sshHostKey(),
        identity: container.identity,
        sandboxes: container.sandboxes,
        runtime: container.runtime,
        tokens: container.sessions,
        log,
        metrics: container.metrics,
      })
    : null;

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    await ssh?.close();
    await sessionPlane?.close();
    await controllers.stop();
    await container.runtime?.close();
    await container.egress?.close();
    await app.close();
    await releaseLock();
    await container.db.close();
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

main().catch((error: unknown) => {
  process.stderr.write(`warren failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
