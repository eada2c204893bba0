// This server's own runtime, for what runs on its own sandboxes, or the refusal a server
// without one answers (an api replica's is host_unavailable: the sandbox's host can serve it).
import { AppError } from "../../lib/errors.js";
import { hostUnavailable } from "../hosts/membership.js";

export function localRuntime<Runtime>(runtime: Runtime | null, apiReplica: boolean): Runtime {
  if (runtime) return runtime;
  if (apiReplica) {
    throw hostUnavailable(
      "this api replica runs no sandboxes and cannot reach their hosts' runtimes yet; retry through the sandbox's host",
    );
  }
  throw new AppError("unavailable", "this server has no sandbox runtime", { retryAfterSeconds: 30 });
}
