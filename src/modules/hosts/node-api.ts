// The node internal API's authorization and operations, transport aside (the listener is
// src/http/internal/server.ts; docs/hosts.md "Routing"). Every request carries a grant
// (grants.ts) that must name this host at its current epoch, the operation and sandbox of the
// request and the digest of its body; it is accepted once. A host that cannot act (fenced, its
// lease lapsed) answers 503 host_unavailable. The operations re-read the sandbox from the
// store: the grant's organization must own it and this host must be its owner.
import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import {
  type NetworkApplied,
  type NetworkMode,
  networkApplied,
  type PoolRequest,
  type SandboxRuntime,
  type SandboxSession,
  type SessionHandlers,
  type SessionRequest,
} from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import { connectTcp } from "../../lib/tcp-connect.js";
import { type GrantClaims, GrantReplayGuard, type GrantSigner, type RoutedOperation } from "./grants.js";
import { type HostGate, hostUnavailable } from "./membership.js";
import { GRANT_SCHEME, GrantReplayed, type RoutedExecRequest } from "./node-wire.js";

/** What the owner does for a routed request (built by ownerOperations from the services). */
export interface NodeOperations {
  exec(claims: GrantClaims, request: RoutedExecRequest): Promise<unknown>;
  snapshot(claims: GrantClaims, snapshotId: string): Promise<void>;
  grow(claims: GrantClaims, capacityGiB: number): Promise<void>;
  network(claims: GrantClaims, mode: NetworkMode): Promise<NetworkApplied>;
  openSession(claims: GrantClaims, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession>;
  /**
   * A TCP connection to the sandbox's port from this host (an SSH `direct-tcpip` forward
   * through another server), connected; the sandbox is held awake until the socket closes.
   */
  openForward(claims: GrantClaims, port: number): Promise<Socket>;
  /** One of this host's warm pool members for a create of this shape, taken for the caller; null: none. */
  poolTake(claims: GrantClaims, request: PoolRequest): Promise<string | null>;
  /** A member the caller took and will not use (its create failed): it goes. */
  poolRelease(claims: GrantClaims): void;
}

/** This host's warm pool as other servers' creates take from it (PooledRuntime). */
export interface RemotePool {
  takeForRemote(request: PoolRequest): string | null;
  releaseRemote(id: string): void;
}

/** How long the owner waits for a sandbox's port to accept a routed forward. */
export const FORWARD_CONNECT_TIMEOUT_MS = 5_000;

export class NodeApi {
  constructor(
    private readonly host: HostGate,
    private readonly grants: GrantSigner,
    readonly operations: NodeOperations,
    private readonly replays = new GrantReplayGuard(),
    private readonly now: () => number = () => Date.now(),
  ) {}

  /** The grant's claims, or AppError unauthenticated (or host_unavailable when this host cannot act). */
  authorize(
    authorization: string | undefined,
    operation: RoutedOperation,
    sandboxId: string,
    body: Buffer,
  ): GrantClaims {
    const refused = new AppError("unauthenticated", "the internal grant is invalid, expired or not for this request");
    const prefix = `${GRANT_SCHEME} `;
    if (!authorization?.startsWith(prefix)) throw refused;
    const owner = this.host.owner();
    const claims = this.grants.verify(
      authorization.slice(prefix.length),
      { operation, sandboxId, hostId: owner.hostId, epoch: owner.epoch, body },
      this.now(),
    );
    // A nonce seen before: a copy of a request re-sent after its connection broke (node-client.ts), never run twice.
    if (!this.replays.accept(claims, this.now())) throw new GrantReplayed();
    if (!this.host.canAct()) throw hostUnavailable();
    return claims;
  }
}

export interface OwnerDeps {
  /** The sandbox row by id (SandboxService.rowForHost). */
  sandboxOf(id: string): Promise<{
    org_id: string;
    host_id: string | null;
    quarantined: boolean;
    state: string;
    network_access: string;
  } | null>;
  host: HostGate;
  runtime: Pick<SandboxRuntime, "growWorkspace" | "setNetwork" | "openSession">;
  /**
   * Where this host reaches the sandbox's ports (the local network's address of it; null: no
   * link): a routed forward connects here on the owner, and only the socket is handed on.
   */
  sandboxAddress(sandboxId: string): Promise<string | null>;
  exec(claims: GrantClaims, request: RoutedExecRequest): Promise<unknown>;
  snapshot(claims: GrantClaims, snapshotId: string): Promise<void>;
  /** Holds the sandbox awake while a routed session or forward is open (the reconciler's idle check). */
  sessionBegan(sessionId: string, sandboxId: string, ended: Promise<unknown>): void;
  sessionEnded(sessionId: string): void;
  /** This host's warm pool (null: none, so every pool-take answers null). */
  pool?: RemotePool | null;
}

/** The owner's side of each routed operation. */
export function ownerOperations(deps: OwnerDeps): NodeOperations {
  const owned = async (claims: GrantClaims) => {
    const row = await deps.sandboxOf(claims.sandboxId);
    if (!row || row.org_id !== claims.orgId) throw new AppError("not_found", "sandbox not found");
    if (row.host_id !== deps.host.id || !deps.host.canAct()) throw hostUnavailable();
    return row;
  };
  return {
    exec: (claims, request) => deps.exec(claims, request),
    snapshot: (claims, snapshotId) => deps.snapshot(claims, snapshotId),
    grow: async (claims, capacityGiB) => {
      await owned(claims);
      await deps.runtime.growWorkspace(claims.sandboxId, capacityGiB);
    },
    network: async (claims, mode) => {
      await owned(claims);
      // Only what may leave the host: no namespace path, veth or address.
      return networkApplied(await deps.runtime.setNetwork(claims.sandboxId, mode));
    },
    openSession: async (claims, request, handlers) => {
      const row = await owned(claims);
      if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
      const sessionId = `ses_${randomBytes(8).toString("hex")}`;
      let finish: () => void = () => undefined;
      const ended = new Promise<void>((resolve) => {
        finish = resolve;
      });
      deps.sessionBegan(sessionId, claims.sandboxId, ended);
      try {
        return await deps.runtime.openSession(claims.sandboxId, request, {
          ...handlers,
          onEnd: (end) => {
            finish();
            deps.sessionEnded(sessionId);
            handlers.onEnd(end);
          },
        });
      } catch (error) {
        finish();
        deps.sessionEnded(sessionId);
        throw error;
      }
    },
    poolTake: async (_claims, request) => {
      // A cordoned or draining host serves no create from its pool (as for its own creates).
      const state = deps.host.state?.() ?? null;
      if (!deps.pool || !deps.host.canAct() || state === "cordoned" || state === "draining") return null;
      return deps.pool.takeForRemote(request);
    },
    poolRelease: (claims) => deps.pool?.releaseRemote(claims.sandboxId),
    openForward: async (claims, port) => {
      // The checks of a forward on one host (channels.ts serveForward), made here by the owner.
      if (!Number.isInteger(port) || port < 1 || port > 65535) throw new AppError("invalid_argument", "no such port");
      const row = await owned(claims);
      if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
      if (row.state !== "running") throw new AppError("sandbox_not_running", "the sandbox is not running");
      const address = row.network_access === "none" ? null : await deps.sandboxAddress(claims.sandboxId);
      if (!address) throw new AppError("failed_precondition", "the sandbox has no network link to forward to");
      let socket: Socket;
      try {
        socket = await connectTcp(address, port, FORWARD_CONNECT_TIMEOUT_MS);
      } catch {
        throw new AppError("failed_precondition", "the sandbox's port did not accept the connection");
      }
      const forwardId = `fwd_${randomBytes(8).toString("hex")}`;
      deps.sessionBegan(forwardId, claims.sandboxId, new Promise((resolve) => socket.once("close", resolve)));
      socket.once("close", () => deps.sessionEnded(forwardId));
      return socket;
    },
  };
}
