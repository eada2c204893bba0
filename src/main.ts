// Entry point: loadConfig() -> createContainer() -> createApp() -> listen, plus first-start
// bootstrap, the controllers, a guard that keeps one callback's bug from ending the process,
// and a clean shutdown on SIGINT/SIGTERM.
import { advertisedAddress, loadConfig } from "./config.js";
import { createApp, createContainer } from "./container.js";
import { startControllers } from "./controllers/index.js";
import { startSessionPlane } from "./http/session-plane.js";
import { busyListenersMessage } from "./lib/listen-check.js";
import { BoundedLogSink, createServerLogger } from "./lib/logger.js";
import { installProcessGuard } from "./lib/process-guard.js";
import { writeServerLock } from "./lib/server-lock.js";
import { apiTargetOf } from "./modules/egress/gateway.js";
import { bootstrapNotice } from "./modules/identity/service.js";
import { startSshGateway } from "./modules/ssh/index.js";

async function main(): Promise<void> {
  const config = loadConfig();
  const logSink = new BoundedLogSink(process.stdout, config.logQueueBytes);
  const log = createServerLogger(config.logLevel, logSink);
  installProcessGuard(log);
  const busy = await busyListenersMessage([
    { setting: "WARREN_LISTEN", host: config.listenHost, port: config.listenPort },
    ...(config.sessionListen ? [{ setting: "WARREN_SESSION_LISTEN", ...config.sessionListen }] : []),
    ...(config.sshListen ? [{ setting: "WARREN_SSH_LISTEN", ...config.sshListen }] : []),
    ...(config.internalListen ? [{ setting: "WARREN_INTERNAL_LISTEN", ...config.internalListen }] : []),
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
  log.info({ address, store: container.db.kind, role: config.role }, "warren is serving");
  const ssh = config.sshListen
    ? await startSshGateway({
        listen: config.sshListen,
        publicHost: config.sshHost,
        publicPort: config.sshPublicPort,
        hostKey: await container.sshHostKey(),
        identity: container.identity,
        sandboxes: container.sandboxes,
        links: container.sandboxLinks,
        runtime: container.runtime,
        tokens: container.sessions,
        log,
        metrics: container.metrics,
        routeOf: (id) => container.router.runtimeOfId(id),
      })
    : null;
  // The other servers reach this host's plane and SSH gateway at these (its hosts row).
  await container.host?.publishEdges({
    planeAddress: sessionPlane ? advertisedAddress(config, sessionPlane.address.host, sessionPlane.address.port) : null,
    sshAddress: ssh?.port && config.sshListen ? advertisedAddress(config, config.sshListen.host, ssh.port) : null,
  });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second signal: the operator will not wait for the first shutdown.
      log.warn({ signal }, "second signal during shutdown, exiting now");
      logSink.flush();
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, "shutting down");
    // Whatever hangs (a stream whose client stopped reading, a host tool), the process ends.
    setTimeout(() => {
      log.error({ timeoutMs: config.shutdownTimeoutMs }, "shutdown did not finish in time, exiting");
      logSink.flush();
      process.exit(1);
    }, config.shutdownTimeoutMs);
    await ssh?.close();
    await sessionPlane?.close();
    await controllers.stop();
    await container.runtime?.close();
    await container.egress?.close();
    // Tails are ended by the app's preClose hook; a connection still open after half the
    // budget (a client that stopped reading holds its socket's buffers) is cut.
    const cut = setTimeout(() => app.server.closeAllConnections(), config.shutdownTimeoutMs / 2);
    await app.close();
    clearTimeout(cut);
    await releaseLock();
    await container.db.close();
    await logSink.drained(1000);
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

main().catch((error: unknown) => {
  process.stderr.write(`warren failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
