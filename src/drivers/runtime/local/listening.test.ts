import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ipv4ProcHex, listeningPorts } from "./listening.js";

const HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
const v4 = (local: string, state: string) =>
  `   0: ${local} 00000000:0000 ${state} 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n`;

describe("listening ports from /proc/net/tcp", () => {
  it("counts LISTEN sockets on the wildcard or the sandbox's address, not loopback or connections", () => {
    const address = "10.213.0.6";
    assert.equal(ipv4ProcHex(address), "0600D50A");
    const tcp =
      HEADER +
      v4("00000000:1F90", "0A") + // 0.0.0.0:8080
      v4("0100007F:1F91", "0A") + // 127.0.0.1:8081 (loopback only)
      v4("0600D50A:1F92", "0A") + // 10.213.0.6:8082
      v4("0700D50A:1F93", "0A") + // another address
      v4("0600D50A:1F94", "01") + // an established connection
      "garbage line\n";
    const tcp6 =
      HEADER +
      v4("00000000000000000000000000000000:2328", "0A") + // [::]:9000
      v4("00000000000000000000000001000000:2329", "0A") + // [::1]:9001
      v4("0000000000000000FFFF00000600D50A:232A", "0A"); // [::ffff:10.213.0.6]:9002
    assert.deepEqual(listeningPorts(tcp, tcp6, address), [8080, 8082, 9000, 9002]);
    assert.deepEqual(listeningPorts(tcp, tcp6, null), [8080, 9000]);
    assert.deepEqual(listeningPorts("", "", address), []);
  });
});
