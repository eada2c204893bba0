// The seams of the egress gateway (gateway.ts): who is calling, and what secret egress plugs
// in (src/modules/egress/secret-egress.ts implements the interceptor and the ledger).

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
  intercept(
    client: import("node:stream").Duplex,
    target: { host: string; port: number; address: string },
    caller: EgressCaller,
  ): void;
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
