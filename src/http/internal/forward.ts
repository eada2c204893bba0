// The owner's side of a routed SSH port forward (docs/hosts.md "Routing"): the grant is checked
// over the forward request's JSON (`{"port": n}`), the owner connects to the sandbox's port
// with the checks a forward on one host makes (node-api.ts openForward), and only then answers
// 101; after it the upgraded socket is the raw TCP stream, both ways. The sandbox's bytes are
// never buffered beyond the sockets' own high-water marks (pipe pauses the faster side), and
// either end closing closes both.
import type { Socket } from "node:net";
import { joinStreams } from "../../lib/tcp-connect.js";
import type { NodeApi } from "../../modules/hosts/node-api.js";
import { FORWARD_UPGRADE, type RoutedForwardRequest } from "../../modules/hosts/node-wire.js";
import { refuse } from "./session.js";

/** The longest forward request JSON (`{"port":65535}` and nothing else is expected). */
const MAX_REQUEST_BYTES = 256;

function parseRequest(json: string): RoutedForwardRequest {
  if (json.length > MAX_REQUEST_BYTES) throw new SyntaxError("forward request");
  const raw = JSON.parse(json) as Partial<RoutedForwardRequest>;
  if (typeof raw.port !== "number") throw new SyntaxError("port");
  return { port: raw.port };
}

export function serveRoutedForward(
  api: NodeApi,
  sandboxId: string,
  authorization: string | undefined,
  encoded: string,
  socket: Socket,
  head: Buffer,
): void {
  let request: RoutedForwardRequest;
  let claims: ReturnType<NodeApi["authorize"]>;
  try {
    const json = Buffer.from(encoded, "base64url").toString("utf8");
    claims = api.authorize(authorization, "forward", sandboxId, Buffer.from(json));
    request = parseRequest(json);
  } catch (error) {
    refuse(socket, error);
    return;
  }
  socket.setNoDelay(true);
  // A caller that vanished without a word (its host lost) is found out, and the sandbox released.
  socket.setKeepAlive(true, 30_000);
  // Nothing is read from the caller until the sandbox's port is connected.
  socket.pause();
  api.operations.openForward(claims, request.port).then(
    (target) => {
      if (socket.destroyed) {
        target.destroy();
        return;
      }
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${FORWARD_UPGRADE}\r\nconnection: Upgrade\r\n\r\n`);
      if (head.length > 0) target.write(head);
      joinStreams(socket, target);
      socket.resume();
    },
    (error: unknown) => refuse(socket, error),
  );
}
