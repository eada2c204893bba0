// Pushes a local directory as a new version of a volume (docs/volumes.md "Pushing a
// directory"); the implementation is the SDK's (packages/sdk/src/volume-push.ts), shared
// with `warren volume push`.
//
//   node --import tsx scripts/volume-push.ts --url http://127.0.0.1:8080 --volume vol_... DIR
//   (the API key comes from WARREN_API_KEY; --quiet drops the progress lines on stderr)
import path from "node:path";
import { defaultHashCache, pushDirectory } from "../packages/sdk/src/volume-push.js";

export {
  CHUNK_BYTES,
  defaultHashCache,
  type PushOptions,
  type PushResult,
  pushDirectory,
} from "../packages/sdk/src/volume-push.js";

async function main(argv: string[]): Promise<void> {
  const args = [...argv];
  let apiUrl = "http://127.0.0.1:8080";
  let volumeId = "";
  let quiet = false;
  let hashCache = true;
  let concurrency = 8;
  const rest: string[] = [];
  while (args.length > 0) {
    const arg = args.shift() as string;
    if (arg === "--url") apiUrl = args.shift() ?? "";
    else if (arg === "--volume") volumeId = args.shift() ?? "";
    else if (arg === "--concurrency") concurrency = Number(args.shift());
    else if (arg === "--quiet") quiet = true;
    else if (arg === "--no-hash-cache") hashCache = false;
    else rest.push(arg);
  }
  const apiKey = process.env.WARREN_API_KEY ?? "";
  if (!volumeId || rest.length !== 1 || !apiKey) {
    process.stderr.write(
      "usage: WARREN_API_KEY=... volume-push.ts [--url URL] --volume VOLUME_ID [--quiet] [--no-hash-cache] DIR\n",
    );
    process.exit(2);
  }
  const result = await pushDirectory({
    apiUrl,
    apiKey,
    volumeId,
    dir: path.resolve(rest[0] as string),
    concurrency,
    ...(hashCache ? { hashCache: defaultHashCache(rest[0] as string) } : {}),
    onProgress: quiet ? () => undefined : (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(1);
  });
}
