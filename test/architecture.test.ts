// Layering rules that a reviewer would otherwise have to catch: SQL lives in repos, a
// module reaches another through its service, and the events table has one writer.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";

const MODULES = path.join("src", "modules");

function sources(): { file: string; text: string }[] {
  return readdirSync(MODULES, { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
    .map((file) => path.join(MODULES, file))
    .map((file) => ({ file, text: readFileSync(file, "utf8") }));
}

const isRepo = (file: string) => /(^|[-/])repo\.ts$/.test(path.basename(file)) || file.endsWith("-repo.ts");
const moduleOf = (file: string) => file.split(path.sep)[2];

describe("architecture", () => {
  it("keeps SQL out of services: only repos run queries", () => {
    const offenders = sources()
      .filter(({ file }) => /(^|-)service\.ts$/.test(path.basename(file)))
      .filter(
        ({ text }) =>
          /\b(q|db|this\.db)\.(query|exec)\s*[<(]/.test(text) || /\b(SELECT|INSERT INTO|DELETE FROM)\b/.test(text),
      )
      .map(({ file }) => file);
    assert.deepEqual(offenders, []);
  });

  it("reaches another module through its service, never its repo", () => {
    const offenders: string[] = [];
    for (const { file, text } of sources()) {
      for (const match of text.matchAll(/from "\.\.\/([a-z-]+)\/([a-z-]*repo)\.js"/g)) {
        // A repo may compose another repo's statement into its own (one statement per
        // annotate batch); everything else goes through the owning service.
        if (isRepo(file) && match[1] === "events") continue;
        if (match[1] !== moduleOf(file)) offenders.push(`${file} imports ${match[1]}/${match[2]}`);
      }
    }
    assert.deepEqual(offenders, []);
  });

  it("has one writer of the events table: the events repo", () => {
    const writers = readdirSync("src", { recursive: true, encoding: "utf8" })
      .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
      .map((file) => path.join("src", file))
      .filter((file) => /\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+events\b/i.test(readFileSync(file, "utf8")));
    assert.deepEqual(writers, [path.join(MODULES, "events", "repo.ts")]);
  });

  it("keeps domain code off the HTTP layer: only routes and wire schemas import src/http", () => {
    const offenders = readdirSync("src", { recursive: true, encoding: "utf8" })
      .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
      .map((file) => path.join("src", file))
      .filter((file) => !file.startsWith(`src${path.sep}http${path.sep}`))
      .filter((file) => !/(^|-)(routes|schemas)\.ts$/.test(path.basename(file)))
      .filter((file) => !["container.ts", "main.ts"].includes(path.relative("src", file)))
      .filter((file) => /from "(\.\.\/)+http\//.test(readFileSync(file, "utf8")));
    assert.deepEqual(offenders, []);
  });

  it("keeps the exec service off the sandbox service: it depends on the router and the repo, not SandboxService", () => {
    const reached = importsReachedFrom(path.join(MODULES, "sandboxes", "exec-service.ts"));
    assert.ok(reached.size > 1, "the walk follows the exec service's imports");
    assert.equal(reached.has(path.join(MODULES, "sandboxes", "service.ts")), false);
  });

  it("keeps the host facets off the wire: what routes names only the SandboxRuntime", () => {
    const wire = [
      path.join(MODULES, "hosts", "node-client.ts"),
      path.join(MODULES, "hosts", "node-wire.ts"),
      path.join(MODULES, "hosts", "node-api.ts"),
      path.join(MODULES, "hosts", "router.ts"),
      ...readdirSync(path.join("src", "http", "internal")).map((file) => path.join("src", "http", "internal", file)),
    ].filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"));
    const facet =
      /\b(RuntimeDriver|HostNetwork|HostStorage|LocalSnapshots|HostCapacity|NetworkReceipt|SnapshotImages)\b/;
    assert.deepEqual(
      wire.filter((file) => facet.test(readFileSync(file, "utf8"))),
      [],
    );
    assert.match(readFileSync(wire[0] as string, "utf8"), /class NodeClient implements Pick<SandboxRuntime,/);
  });
});

/** Every source file `start` imports, directly or through others (type imports included). */
function importsReachedFrom(start: string): Set<string> {
  const seen = new Set<string>([start]);
  const queue = [start];
  for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
    for (const match of readFileSync(file, "utf8").matchAll(/^(?:import|export)\b[^;]*?\bfrom "(\.[^"]+)\.js";/gms)) {
      const target = path.join(path.dirname(file), `${match[1]}.ts`);
      if (!seen.has(target) && existsSync(target)) {
        seen.add(target);
        queue.push(target);
      }
    }
  }
  return seen;
}
