// The environment every sandbox gets, in every network mode: the egress gateway as its HTTP
// proxy and as Warren's API (with WARREN_SANDBOX_TOKEN, set by the reconciler beside these).

/** The config default (WARREN_GATEWAY_ADDRESS); the local driver's nat chain uses the same by default. */
export const DEFAULT_GATEWAY_ADDRESS = "169.254.213.1";

export function gatewayEnv(gatewayAddress: string): Record<string, string> {
  const proxy = `http://${gatewayAddress}:80`;
  const noProxy = `${gatewayAddress},localhost,127.0.0.1`;
  return {
    HTTP_PROXY: proxy,
    HTTPS_PROXY: proxy,
    http_proxy: proxy,
    https_proxy: proxy,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    WARREN_API_URL: `http://${gatewayAddress}`,
  };
}

/**
 * The OpenTelemetry exporter settings every sandbox gets (OTEL_* are read by every OTLP SDK):
 * spans go over OTLP/HTTP protobuf to Warren's POST /v1/traces through the gateway's API
 * relay, authenticated by the sandbox's own credential, and land in its ambient run. The
 * header value is percent-encoded, as OTEL_EXPORTER_OTLP_HEADERS (W3C baggage form) wants.
 */
export function otlpEnv(gatewayAddress: string, sandboxToken: string): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://${gatewayAddress}`,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
    OTEL_EXPORTER_OTLP_HEADERS: `Authorization=${encodeURIComponent(`Bearer ${sandboxToken}`)}`,
  };
}
