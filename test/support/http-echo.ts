// The http-echo test image: busybox plus test/support/http-echo.c built static, for the
// endpoint tests and benchmark (a keep-alive server that also echoes a raw upgrade).

import { readFile } from "node:fs/promises";
import { encodeTar } from "../../src/drivers/runtime/image/tar.js";
import { buildStaticBinary } from "../../src/drivers/runtime/local/static-binary.js";
import { projectFile } from "../../src/lib/paths.js";
import { busyboxLayer, pushImage, type TestRegistry } from "./registry.js";

/** Pushes `test/http-echo:latest` to the registry; resolves with its reference. */
export async function pushHttpEchoImage(registry: TestRegistry): Promise<string> {
  const binary = await buildStaticBinary(projectFile("test", "support", "http-echo.c"), "http-echo");
  await pushImage(registry.url, "test/http-echo", "latest", {
    layers: [
      busyboxLayer(),
      encodeTar([{ name: "bin/http-echo", type: "file", mode: 0o755, data: await readFile(binary) }]),
    ],
    config: { Entrypoint: ["/bin/http-echo"], Cmd: ["8080"], Env: ["PATH=/bin"], WorkingDir: "/tmp" },
  });
  return `${registry.host}/test/http-echo:latest`;
}
