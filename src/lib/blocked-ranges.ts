// IPv4 ranges a sandbox never reaches: not directly (the runtime's nftables set) and not
// through the egress gateway (which runs on the host, so it checks itself). Unspecified,
// private (other sandboxes live in 10/8), shared CGNAT, loopback, link-local (metadata
// services), IETF protocol assignments, benchmarking, multicast and reserved.
export const BLOCKED_V4: readonly string[] = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "224.0.0.0/3",
];
