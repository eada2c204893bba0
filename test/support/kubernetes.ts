// Kubernetes manifests read as kubectl reads them and checked against the Kubernetes API's
// own definitions, with no cluster: the JSON schemas of the `kubernetes-models` package (types,
// required fields, enums, formats: its models' validate()) and, for fields a kind does not
// define (which those schemas let through), the same package's TypeScript interfaces, checked
// by the TypeScript compiler (an object literal's excess property is an error at any depth).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { parseAllDocuments } from "yaml";

export interface Manifest {
  /** Relative to the directory read. */
  file: string;
  /** Its place among the file's documents. */
  index: number;
  // biome-ignore lint/suspicious/noExplicitAny: a manifest is any JSON the YAML holds
  doc: any;
}

const REPO = path.resolve(import.meta.dirname, "..", "..");
const MODELS = path.dirname(createRequire(import.meta.url).resolve("kubernetes-models/package.json"));

/** Every `.yaml`/`.yml` file under `dir` (subdirectories too), each document of it. */
export function loadManifests(dir: string): Manifest[] {
  const files = readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((file) => /\.ya?ml$/.test(file))
    .sort();
  return files.flatMap((file) => parseManifests(readFileSync(path.join(dir, file), "utf8"), file));
}

/**
 * The documents of one file, parsed as YAML 1.1 (kubectl's sigs.k8s.io/yaml reads `on`, `yes`
 * and `off` as booleans, as this does) with duplicate keys an error; empty documents skipped.
 */
export function parseManifests(text: string, file: string): Manifest[] {
  const manifests: Manifest[] = [];
  parseAllDocuments(text, { version: "1.1", uniqueKeys: true, prettyErrors: true }).forEach((document, index) => {
    const problems = [...document.errors, ...document.warnings];
    if (problems.length > 0) throw new Error(`${file} document ${index}: ${problems.map((p) => p.message).join("; ")}`);
    const doc = document.toJS({ maxAliasCount: 0 });
    if (doc !== null && doc !== undefined) manifests.push({ file, index, doc });
  });
  return manifests;
}

export function nameOf(manifest: Manifest): string {
  return `${manifest.file}#${manifest.index} ${manifest.doc?.kind}/${manifest.doc?.metadata?.name}`;
}

/** The kubernetes-models module of an apiVersion and kind ("apps/v1", "Deployment"), or null. */
function modelModule(apiVersion: unknown, kind: unknown): string | null {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (!/^([a-z0-9.-]+\/)?v\d+((alpha|beta)\d+)?$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  const base = path.join(MODELS, apiVersion, kind);
  return existsSync(`${base}.mjs`) && existsSync(`${base}.d.ts`) ? `kubernetes-models/${apiVersion}/${kind}` : null;
}

/** What the kind's JSON schema finds wrong with the document (empty: valid). */
export async function schemaErrors(doc: Manifest["doc"]): Promise<string[]> {
  const module = modelModule(doc?.apiVersion, doc?.kind);
  if (!module) return [`no Kubernetes kind ${doc?.apiVersion} ${doc?.kind}`];
  const url = pathToFileURL(path.join(MODELS, `${module.slice("kubernetes-models/".length)}.mjs`)).href;
  const Model = (await import(url))[doc.kind];
  try {
    new Model(doc).validate();
    return [];
  } catch (error) {
    return [(error as Error).message];
  }
}

/**
 * Fields no definition of the kind names (and any other type error), per manifest: each is
 * written as a TypeScript object literal typed by the kind's interface and compiled.
 */
export function strictFieldErrors(manifests: Manifest[]): Map<Manifest, string[]> {
  const sources = new Map<string, { manifest: Manifest; text: string }>();
  const found = new Map<Manifest, string[]>();
  manifests.forEach((manifest, i) => {
    const module = modelModule(manifest.doc?.apiVersion, manifest.doc?.kind);
    if (!module) {
      found.set(manifest, [`no Kubernetes kind ${manifest.doc?.apiVersion} ${manifest.doc?.kind}`]);
      return;
    }
    const text = [
      `import type { I${manifest.doc.kind} as Kind } from "${module}";`,
      `export const manifest: Kind = ${JSON.stringify(manifest.doc, null, 2)};`,
      "",
    ].join("\n");
    // In the repository's root, so the package resolves as from any file of it; never written.
    sources.set(path.join(REPO, `.kubernetes-manifest-check-${i}.ts`), { manifest, text });
  });
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts"],
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, language, ...rest) => {
    const source = sources.get(name);
    return source
      ? ts.createSourceFile(name, source.text, language)
      : getSourceFile.call(host, name, language, ...rest);
  };
  host.fileExists = (name) => sources.has(name) || fileExists.call(host, name);
  host.readFile = (name) => sources.get(name)?.text ?? readFile.call(host, name);
  const program = ts.createProgram([...sources.keys()], options, host);
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const source = diagnostic.file ? sources.get(diagnostic.file.fileName) : undefined;
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n");
    if (!source) throw new Error(`the manifest check itself does not compile: ${message}`);
    const { line } = diagnostic.file?.getLineAndCharacterOfPosition(diagnostic.start ?? 0) ?? { line: 0 };
    const at = source.text.split("\n")[line]?.trim() ?? "";
    found.set(source.manifest, [...(found.get(source.manifest) ?? []), `${message} (at ${at})`]);
  }
  for (const manifest of manifests) if (!found.has(manifest)) found.set(manifest, []);
  return found;
}

// biome-ignore lint/suspicious/noExplicitAny: pod specs are read as the JSON they are
export type PodSpec = any;

/** The pod template of a workload (Deployment, DaemonSet, StatefulSet), else null. */
export function podTemplateOf(doc: Manifest["doc"]): { labels: Record<string, string>; spec: PodSpec } | null {
  const template = doc?.spec?.template;
  if (!["Deployment", "DaemonSet", "StatefulSet"].includes(doc?.kind) || !template) return null;
  return { labels: template.metadata?.labels ?? {}, spec: template.spec };
}

/** Whether a matchLabels-style selector selects these labels. */
export function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  const entries = Object.entries(selector ?? {});
  return entries.length > 0 && entries.every(([key, value]) => labels[key] === value);
}

/**
 * A container's environment as the kubelet makes it: envFrom first, then env in order with
 * `$(NAME)` of a variable defined before it substituted; secret and field references taken
 * from `lookups` (an optional secret key that is absent is left out).
 */
export function containerEnv(
  container: PodSpec,
  lookups: {
    configMap: (name: string) => Record<string, string>;
    secret: (name: string) => Record<string, string>;
    field: (path: string) => string;
  },
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const source of container.envFrom ?? []) {
    if (source.configMapRef) Object.assign(env, lookups.configMap(source.configMapRef.name));
    if (source.secretRef) Object.assign(env, lookups.secret(source.secretRef.name));
  }
  const expand = (value: string) =>
    value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string) => env[name] ?? whole);
  for (const entry of container.env ?? []) {
    if (entry.value !== undefined) env[entry.name] = expand(entry.value);
    else if (entry.valueFrom?.fieldRef) env[entry.name] = lookups.field(entry.valueFrom.fieldRef.fieldPath);
    else if (entry.valueFrom?.configMapKeyRef) {
      const { name, key, optional } = entry.valueFrom.configMapKeyRef;
      const value = lookups.configMap(name)[key];
      if (value !== undefined) env[entry.name] = value;
      else if (!optional) throw new Error(`${entry.name}: ConfigMap ${name} has no key ${key}`);
    } else if (entry.valueFrom?.secretKeyRef) {
      const { name, key, optional } = entry.valueFrom.secretKeyRef;
      const value = lookups.secret(name)[key];
      if (value !== undefined) env[entry.name] = value;
      else if (!optional) throw new Error(`${entry.name}: Secret ${name} has no key ${key}`);
    } else throw new Error(`${entry.name}: a source this check does not know`);
  }
  return env;
}
