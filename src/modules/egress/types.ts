// What the egress gateway (the forward proxy sandboxes reach at WARREN_GATEWAY_ADDRESS) and
// secret egress agree on: the gateway identifies the calling sandbox, asks the interceptor
// which CONNECTs it takes over, and records every refusal in the ledger.
import type { Duplex } from "node:stream";

export interface EgressCaller {
  sandboxId: string;
  orgId: string;
  projectId: string;
  runId: string;
  mode: "public" | "gateway_only" | "none";
}

export interface EgressInterceptor {
  /** Hosts this caller may reach because of its bound secrets (allowed in gateway_only). */
  hostsFor(caller: EgressCaller): Promise<string[]>;
  /** True when CONNECT host:port of this caller must be terminated and injected (HTTPS to a bound secret's host). */
  wants(caller: EgressCaller, host: string, port: number): Promise<boolean>;
  /** Takes over the client stream after the gateway answered `200 Connection established`. */
  intercept(client: Duplex, target: { host: string; port: number; address: string }, caller: EgressCaller): void;
}

export interface EgressLedger {
  record(caller: EgressCaller, entry: EgressLedgerEntry): void;
}

export interface EgressLedgerEntry {
  kind: "injected" | "refused";
  host: string;
  port: number;
  method?: string;
  path?: string;
  status?: number;
  bytesIn?: number;
  bytesOut?: number;
  durationMs?: number;
  secretId?: string;
  secretVersion?: number;
  reason?: string;
}
