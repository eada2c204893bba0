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
