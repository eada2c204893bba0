// The session plane's addressing (pure): an endpoint is the host `<port>-<sandbox id>.<session
// host>` under the plane's base URL, so a web app inside the sandbox is served at `/` of an
// origin of its own (cookies, absolute paths and WebSockets work unchanged, and two
// endpoints never share an origin).

export interface EndpointAddress {
  port: number;
  sandboxId: string;
}

const LABEL = /^([1-9]\d{0,4})-(sbx-[0-9a-f]{40})$/;

export interface PlaneBase {
  /** `http:` or `https:` */
  protocol: string;
  /** Lowercase host name, no port. */
  hostname: string;
  /** `:<port>`, or "" for the scheme's default. */
  portSuffix: string;
}

export function planeBase(baseUrl: string): PlaneBase {
  const url = new URL(baseUrl);
  return { protocol: url.protocol, hostname: url.hostname.toLowerCase(), portSuffix: url.port ? `:${url.port}` : "" };
}

export function endpointUrl(base: PlaneBase, address: EndpointAddress): string {
  return `${base.protocol}//${address.port}-${address.sandboxId}.${base.hostname}${base.portSuffix}/`;
}

/**
 * The endpoint a request's Host header names, or null (another host, a malformed header,
 * a port out of range). The header's own port is ignored: a proxy in front may change it.
 */
export function parseEndpointHost(hostHeader: string | undefined, sessionHostname: string): EndpointAddress | null {
  if (!hostHeader || hostHeader.length > 300) return null;
  const host = hostHeader
    .toLowerCase()
    .replace(/:\d{1,5}$/, "")
    .replace(/\.$/, "");
  const suffix = `.${sessionHostname}`;
  if (!host.endsWith(suffix)) return null;
  const match = LABEL.exec(host.slice(0, -suffix.length));
  if (!match) return null;
  const port = Number(match[1]);
  if (port > 65_535) return null;
  return { port, sandboxId: match[2] as string };
}
