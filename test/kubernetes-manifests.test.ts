// deploy/kubernetes/ without a cluster: every manifest parses as kubectl reads it, validates
// against the Kubernetes schemas and types of its kind (test/support/kubernetes.ts; a broken
// copy is shown to be refused), names only settings src/config.ts reads (and loads through
// loadConfig), and wires up: references resolve, probes hit the health routes the server
// registers, listeners match the declared ports, and the node DaemonSet has what the local
// runtime touches on the machine while the api replicas touch none of it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { DEFAULT_CLAIMS_DIR } from "../src/drivers/runtime/local/namespace-owners.js";
import { NETNS_DIR } from "../src/drivers/runtime/local/network.js";
import {
  containerEnv,
  loadManifests,
  type Manifest,
  nameOf,
  type PodSpec,
  parseManifests,
  podTemplateOf,
  schemaErrors,
  selects,
  strictFieldErrors,
} from "./support/kubernetes.js";

const DIR = path.resolve(import.meta.dirname, "..", "deploy", "kubernetes");
const NAMESPACE = "warren";
const manifests = loadManifests(DIR);

/**
 * Settings the manifests use that docs/hosts.md designs and other work is adding to
 * src/config.ts (the roles; the node's internal API). Each must be named in docs/hosts.md.
 */
const PENDING_SETTINGS = ["WARREN_ROLE", "WARREN_INTERNAL_LISTEN", "WARREN_INTERNAL_URL"];
/** Variables that are no setting of Warren's: libuv's pool size, and one only substituted into others. */
const NOT_SETTINGS = ["UV_THREADPOOL_SIZE", "POD_IP"];
const FAKE_POD_IP = "10.0.0.7";

function configReads(): Set<string> {
  const source = readFileSync(path.resolve(import.meta.dirname, "..", "src", "config.ts"), "utf8");
  const names = new Set<string>();
  for (const match of source.matchAll(/env\.([A-Z][A-Z0-9_]+)|"([A-Z][A-Z0-9_]{2,})"/g))
    names.add(match[1] ?? match[2] ?? "");
  return names;
}

function byKind(kind: string): Manifest[] {
  return manifests.filter((m) => m.doc.kind === kind);
}

function one(kind: string, name: string): Manifest["doc"] {
  const found = byKind(kind).filter((m) => m.doc.metadata?.name === name);
  assert.equal(found.length, 1, `one ${kind} ${name}`);
  return found[0]?.doc;
}

function workload(role: "api" | "node"): { doc: Manifest["doc"]; spec: PodSpec; container: PodSpec } {
  const found = manifests.filter((m) => podTemplateOf(m.doc)?.labels["app.kubernetes.io/component"] === role);
  assert.equal(found.length, 1, `one workload of component ${role}`);
  const doc = found[0]?.doc;
  const spec = podTemplateOf(doc)?.spec;
  assert.equal(spec.containers.length, 1, `${role}: one container`);
  return { doc, spec, container: spec.containers[0] };
}

const lookups = {
  configMap: (name: string) => one("ConfigMap", name).data ?? {},
  secret: (name: string) => ({ ...one("Secret", name).data, ...one("Secret", name).stringData }),
  field: (fieldPath: string) => {
    if (fieldPath === "status.podIP" || fieldPath === "status.hostIP") return FAKE_POD_IP;
    if (fieldPath === "spec.nodeName") return "node-1";
    throw new Error(`field ${fieldPath} is not faked here`);
  },
};

function envOf(role: "api" | "node"): Record<string, string> {
  return containerEnv(workload(role).container, lookups);
}

/** A container port's number by its name or number. */
function portOf(container: PodSpec, port: string | number): number | undefined {
  if (typeof port === "number") return port;
  return container.ports?.find((p: PodSpec) => p.name === port)?.containerPort;
}

describe("Kubernetes manifests (deploy/kubernetes)", () => {
  it("parse as kubectl reads them, each object in Warren's namespace", () => {
    assert.ok(manifests.length >= 9, `found ${manifests.length} objects`);
    for (const manifest of manifests) {
      const { doc } = manifest;
      assert.equal(typeof doc.apiVersion, "string", nameOf(manifest));
      assert.equal(typeof doc.kind, "string", nameOf(manifest));
      assert.match(doc.metadata?.name ?? "", /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, nameOf(manifest));
      if (doc.kind === "Namespace") assert.equal(doc.metadata.name, NAMESPACE);
      else assert.equal(doc.metadata.namespace, NAMESPACE, nameOf(manifest));
    }
    const names = manifests.map((m) => `${m.doc.kind}/${m.doc.metadata.name}`);
    assert.equal(new Set(names).size, names.length, `no object twice: ${names.join(", ")}`);
  });

  it("validate against the Kubernetes schema of their kind", async () => {
    for (const manifest of manifests) assert.deepEqual(await schemaErrors(manifest.doc), [], nameOf(manifest));
  });

  it("use no field their kind does not define", () => {
    for (const [manifest, errors] of strictFieldErrors(manifests)) assert.deepEqual(errors, [], nameOf(manifest));
  });

  it("would be refused when broken: a misspelled field, a wrong type, an unknown kind, a YAML 1.1 boolean", async () => {
    const node = manifests.find((m) => m.doc.kind === "DaemonSet") as Manifest;
    const misspelled = structuredClone(node);
    const context = misspelled.doc.spec.template.spec.containers[0].securityContext;
    context.privilegd = context.privileged;
    delete context.privileged;
    const [errors] = [...strictFieldErrors([misspelled]).values()];
    assert.match((errors ?? []).join("\n"), /privilegd/);

    const wrongType = structuredClone(node.doc);
    wrongType.spec.template.spec.containers[0].ports[0].containerPort = "internal";
    assert.match((await schemaErrors(wrongType)).join("\n"), /containerPort must be integer/);
    const missing = structuredClone(node.doc);
    delete missing.spec.selector;
    assert.match((await schemaErrors(missing)).join("\n"), /spec must have required property selector/);

    const unknownKind = { ...structuredClone(node.doc), kind: "DaemonSett" };
    assert.match((await schemaErrors(unknownKind)).join("\n"), /no Kubernetes kind apps\/v1 DaemonSett/);
    const [kindErrors] = [...strictFieldErrors([{ ...node, doc: unknownKind }]).values()];
    assert.match((kindErrors ?? []).join("\n"), /no Kubernetes kind/);

    // `off` unquoted is a boolean to kubectl, and ConfigMap values are strings.
    const [config] = parseManifests(
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  WARREN_S3_FORCE_PATH_STYLE: off\n",
      "broken.yaml",
    );
    assert.match((await schemaErrors(config?.doc)).join("\n"), /WARREN_S3_FORCE_PATH_STYLE must be string/);
    assert.throws(() => parseManifests("a: 1\na: 2\n", "dup.yaml"), /unique|duplicate/i);
  });

  it("name only settings src/config.ts reads, and each workload's load", () => {
    const reads = configReads();
    const hostsDoc = readFileSync(path.resolve(import.meta.dirname, "..", "docs", "hosts.md"), "utf8");
    for (const name of PENDING_SETTINGS) assert.ok(hostsDoc.includes(name), `${name} is designed in docs/hosts.md`);
    const known = (name: string) => reads.has(name) || PENDING_SETTINGS.includes(name) || NOT_SETTINGS.includes(name);
    for (const m of [...byKind("ConfigMap"), ...byKind("Secret")]) {
      for (const key of Object.keys({ ...m.doc.data, ...m.doc.stringData }))
        assert.ok(known(key), `${nameOf(m)}: ${key}`);
    }
    for (const role of ["api", "node"] as const) {
      for (const entry of workload(role).container.env) assert.ok(known(entry.name), `${role}: ${entry.name}`);
      const env = envOf(role);
      assert.equal(env.WARREN_ROLE, role);
      const config = loadConfig(env);
      // Once config.ts parses the role, it is the one the workload asks for.
      const parsed = (config as unknown as Record<string, unknown>).role;
      if (parsed !== undefined) assert.equal(parsed, role);
      assert.ok(config.databaseUrl.startsWith("postgres"), `${role}: PostgreSQL, not the embedded store`);
      assert.equal(config.blobs.store, "s3", `${role}: one blob store for every host`);
      assert.ok(config.masterKey.length > 0, `${role}: the deployment's master key`);
    }
  });

  it("resolve their references: ConfigMaps, Secrets, selectors, ports, Ingress backends", () => {
    const services = byKind("Service");
    for (const role of ["api", "node"] as const) {
      const { doc, spec } = workload(role);
      assert.ok(selects(doc.spec.selector.matchLabels, doc.spec.template.metadata.labels), `${role}: selector`);
      for (const container of spec.containers) containerEnv(container, lookups);
      for (const volume of spec.volumes ?? []) {
        if (volume.configMap) one("ConfigMap", volume.configMap.name);
        if (volume.secret) one("Secret", volume.secret.secretName);
      }
    }
    for (const service of services) {
      const pods = manifests
        .map((m) => podTemplateOf(m.doc))
        .filter((t) => t && selects(service.doc.spec.selector, t.labels));
      assert.ok(pods.length > 0, `${nameOf(service)} selects pods`);
      for (const port of service.doc.spec.ports) {
        for (const pod of pods) {
          const target = port.targetPort ?? port.port;
          assert.ok(
            pod?.spec.containers.some((c: PodSpec) => portOf(c, target) !== undefined),
            `${nameOf(service)}: ${target}`,
          );
        }
      }
    }
    for (const ingress of byKind("Ingress")) {
      for (const rule of ingress.doc.spec.rules) {
        for (const p of rule.http.paths) {
          const service = one("Service", p.backend.service.name);
          const port = p.backend.service.port;
          assert.ok(
            service.spec.ports.some((sp: PodSpec) => (port.name ? sp.name === port.name : sp.port === port.number)),
            `${nameOf(ingress)}: ${service.metadata.name}:${port.name ?? port.number}`,
          );
        }
      }
    }
    for (const pdb of byKind("PodDisruptionBudget")) {
      const pods = manifests
        .map((m) => podTemplateOf(m.doc))
        .filter((t) => t && selects(pdb.doc.spec.selector.matchLabels, t.labels));
      assert.ok(pods.length > 0, `${nameOf(pdb)} selects pods`);
    }
  });

  it("probe the health routes the server registers, on its WARREN_LISTEN port", () => {
    const routes = readFileSync(
      path.resolve(import.meta.dirname, "..", "src", "modules", "meta", "system-routes.ts"),
      "utf8",
    );
    const registered = new Set([...routes.matchAll(/app\.get\("([^"]+)"/g)].map((m) => m[1]));
    for (const role of ["api", "node"] as const) {
      const { spec, container } = workload(role);
      const config = loadConfig(envOf(role));
      for (const kind of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        const probe = container[kind]?.httpGet;
        assert.ok(probe, `${role}: ${kind} over HTTP`);
        assert.ok(registered.has(probe.path), `${role}: ${kind} ${probe.path} is a route of system-routes.ts`);
        assert.equal(portOf(container, probe.port), config.listenPort, `${role}: ${kind} port`);
        // A probe names a host only to reach a loopback listener, which needs the machine's network.
        if (probe.host !== undefined) {
          assert.equal(probe.host, config.listenHost, `${role}: ${kind} host`);
          assert.equal(spec.hostNetwork, true, `${role}: ${kind} on loopback needs hostNetwork`);
        } else assert.equal(config.listenHost, "0.0.0.0", `${role}: probed on the pod's address`);
      }
      assert.equal(container.readinessProbe.httpGet.path, "/readyz", `${role}: ready only with the store`);
      assert.equal(container.livenessProbe.httpGet.path, "/healthz", `${role}: alive without the store`);
    }
  });

  it("declare the ports their listeners bind", () => {
    const api = workload("api").container;
    const apiConfig = loadConfig(envOf("api"));
    assert.equal(portOf(api, "plane"), apiConfig.sessionListen?.port);
    assert.equal(portOf(api, "ssh"), apiConfig.sshListen?.port);
    const node = workload("node").container;
    const nodeEnv = envOf("node");
    const nodeConfig = loadConfig(nodeEnv);
    assert.equal(nodeConfig.sessionListen?.host, FAKE_POD_IP, "node: its plane on the machine's address");
    assert.equal(portOf(node, "plane"), nodeConfig.sessionListen?.port);
    assert.equal(portOf(node, "egress"), nodeConfig.egress.gatewayPort);
    assert.equal(nodeEnv.WARREN_INTERNAL_LISTEN, `${FAKE_POD_IP}:${portOf(node, "internal")}`);
    assert.equal(nodeEnv.WARREN_INTERNAL_URL, `http://${FAKE_POD_IP}:${portOf(node, "internal")}`);
    for (const port of node.ports) assert.equal(port.hostPort, port.containerPort, "hostNetwork: host port = port");
  });

  it("give the api replicas no privilege and no host path", () => {
    const { spec, container } = workload("api");
    assert.ok(!spec.hostNetwork && !spec.hostPID && !spec.hostIPC);
    assert.equal(spec.securityContext.runAsNonRoot, true);
    assert.equal(container.securityContext.privileged ?? false, false);
    assert.equal(container.securityContext.allowPrivilegeEscalation, false);
    assert.deepEqual(container.securityContext.capabilities.drop, ["ALL"]);
    assert.equal(container.securityContext.readOnlyRootFilesystem, true);
    assert.deepEqual(
      spec.volumes.filter((v: PodSpec) => v.hostPath),
      [],
    );
    const config = loadConfig(envOf("api"));
    const data = container.volumeMounts.find((m: PodSpec) => m.mountPath === config.dataDir);
    assert.ok(spec.volumes.find((v: PodSpec) => v.name === data?.name)?.emptyDir, "api: the data dir is scratch");
    assert.equal(spec.automountServiceAccountToken, false);
    assert.equal(spec.enableServiceLinks, false, "no WARREN_*_PORT variables from Services");
  });

  it("run the node DaemonSet on labeled machines with what the local runtime touches there", () => {
    const { doc, spec, container } = workload("node");
    assert.equal(doc.kind, "DaemonSet");
    const [label] = Object.keys(spec.nodeSelector ?? {});
    assert.ok(label, "node: a nodeSelector");
    assert.ok(
      spec.tolerations.some((t: PodSpec) => t.key === label && t.effect === "NoSchedule"),
      "node: tolerates the taint of its machines",
    );
    assert.equal(container.securityContext.privileged, true);
    assert.equal(spec.hostNetwork, true);
    assert.equal(spec.hostPID, true);
    assert.equal(spec.dnsPolicy, "ClusterFirstWithHostNet");
    assert.equal(spec.enableServiceLinks, false);
    const config = loadConfig(envOf("node"));
    const mounts: { name: string; mountPath: string; mountPropagation?: string }[] = container.volumeMounts;
    const hostPathOf = (mount: { name: string }) =>
      spec.volumes.find((v: PodSpec) => v.name === mount.name)?.hostPath?.path;
    /** The mount holding `dir`, which must be the same path of the machine. */
    const hostMount = (dir: string) => {
      const mount = mounts
        .filter((m) => dir === m.mountPath || dir.startsWith(`${m.mountPath}/`))
        .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
      assert.ok(mount, `node: ${dir} is mounted`);
      assert.equal(hostPathOf(mount), mount.mountPath, `node: ${dir} is the machine's`);
      return mount;
    };
    for (const dir of [config.dataDir, config.sandbox.runtimeRoot, config.volumes.cacheDir, NETNS_DIR]) {
      assert.equal(hostMount(dir).mountPropagation, "Bidirectional", `node: mounts under ${dir} reach the machine`);
    }
    for (const dir of ["/sys/fs/cgroup", "/dev", path.dirname(DEFAULT_CLAIMS_DIR)]) hostMount(dir);
  });

  it("serve the API, the session plane (wildcard) and SSH under the names clients are told", () => {
    const config = loadConfig(envOf("api"));
    const hosts = byKind("Ingress").flatMap((m) =>
      m.doc.spec.rules.map((r: PodSpec) => ({ host: r.host, port: r.http.paths[0].backend.service.port.name })),
    );
    assert.deepEqual(
      hosts.find((h) => h.host === new URL(config.publicApiUrl).hostname),
      { host: new URL(config.publicApiUrl).hostname, port: "http" },
    );
    assert.ok(config.sessionPlaneUrl, "a public plane URL");
    assert.deepEqual(
      hosts.find((h) => h.host?.startsWith("*.")),
      {
        host: `*.${new URL(config.sessionPlaneUrl).hostname}`,
        port: "plane",
      },
    );
    for (const ingress of byKind("Ingress")) {
      const tlsHosts = ingress.doc.spec.tls.flatMap((t: PodSpec) => t.hosts);
      for (const rule of ingress.doc.spec.rules) assert.ok(tlsHosts.includes(rule.host), `${nameOf(ingress)}: TLS`);
    }
    const ssh = byKind("Service").find((m) => m.doc.spec.type === "LoadBalancer")?.doc;
    assert.ok(ssh, "a LoadBalancer Service for SSH");
    assert.deepEqual(
      ssh.spec.ports.map((p: PodSpec) => [p.port, p.targetPort]),
      [[22, "ssh"]],
    );
    assert.equal(ssh.spec.externalTrafficPolicy, "Local", "the gateway sees the client's address");
    assert.ok(config.sshHost && config.sshHost !== "0.0.0.0", "ssh.host names the deployment");
  });

  it("are each described in docs/hosts.md", () => {
    const doc = readFileSync(path.resolve(import.meta.dirname, "..", "docs", "hosts.md"), "utf8");
    for (const file of new Set(manifests.map((m) => m.file))) assert.ok(doc.includes(file), file);
  });
});
