// The console's entry: the session check (WhoAmI by cookie), sign-in when there is none, and
// the shell: navigation, the signed-in organization, sign-out and the routed page.
import "./style.css";
import type { WhoAmI } from "@warren/sdk";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, isUnauthenticated, messageOf, signOut } from "./api.js";
import { ErrorLine } from "./components/common.js";
import { Keys, Schemas, Secrets, Usage, Volumes, Workloads } from "./pages/Registry.js";
import { RunPage, Runs } from "./pages/Runs.js";
import { SandboxDetail } from "./pages/SandboxDetail.js";
import { Sandboxes } from "./pages/Sandboxes.js";
import { SignIn } from "./pages/SignIn.js";
import { Sql, Views } from "./pages/Sql.js";
import { Link, navigate, usePath } from "./router.js";

const NAV: [string, string][] = [
  ["/sandboxes", "Sandboxes"],
  ["/runs", "Runs"],
  ["/sql", "SQL"],
  ["/views", "Views"],
  ["/schemas", "Schemas"],
  ["/volumes", "Volumes"],
  ["/secrets", "Secrets"],
  ["/workloads", "Workloads"],
  ["/usage", "Usage"],
  ["/keys", "Keys"],
];

function Page(props: { path: string; who: WhoAmI }) {
  const parts = props.path.split("/").filter(Boolean);
  const [section, id, tab] = parts;
  switch (section) {
    case undefined:
    case "sandboxes":
      return id ? <SandboxDetail id={id} tab={tab ?? ""} /> : <Sandboxes />;
    case "runs":
      return id ? <RunPage id={id} /> : <Runs />;
    case "sql":
      return <Sql />;
    case "views":
      return <Views />;
    case "schemas":
      return <Schemas />;
    case "volumes":
      return <Volumes />;
    case "secrets":
      return <Secrets />;
    case "workloads":
      return <Workloads />;
    case "usage":
      return <Usage />;
    case "keys":
      return <Keys orgId={props.who.organization.id} />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            No console page {props.path}. <Link href="/sandboxes">Sandboxes</Link>
          </p>
        </section>
      );
  }
}

function App() {
  const path = usePath();
  const [who, setWho] = useState<WhoAmI | null>(null);
  const [checked, setChecked] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [reason, setReason] = useState("");
  const check = async () => {
    try {
      setWho(await api.whoami());
      setError(null);
    } catch (e) {
      setWho(null);
      if (!isUnauthenticated(e)) setError(e);
    } finally {
      setChecked(true);
    }
  };
  useEffect(() => {
    void check();
  }, []);
  useEffect(() => {
    const section = path.split("/").filter(Boolean)[0] ?? "sandboxes";
    document.title = `${section[0]?.toUpperCase()}${section.slice(1)} · Warren console`;
    if (path === "/") navigate("/sandboxes", true);
  }, [path]);
  if (!checked) return <p class="empty">Loading…</p>;
  if (!who) {
    return (
      <>
        <ErrorLine error={error} />
        <SignIn onSignedIn={() => void check()} reason={reason} />
      </>
    );
  }
  const section = `/${path.split("/").filter(Boolean)[0] ?? "sandboxes"}`;
  return (
    <>
      <a href="#main" class="skip">
        Skip to content
      </a>
      <header class="top">
        <strong>Warren</strong>
        <span>
          {who.organization.slug} · {who.principal.email || who.principal.kind}
        </span>
        <button
          type="button"
          onClick={async () => {
            try {
              await signOut();
              setReason("Signed out: the session is revoked.");
            } catch (e) {
              setReason(`Sign-out failed: ${messageOf(e)}`);
            }
            setWho(null);
          }}
        >
          Sign out
        </button>
      </header>
      <div class="layout">
        <nav class="side" aria-label="Console">
          <ul>
            {NAV.map(([href, label]) => (
              <li key={href}>
                <Link href={href} aria-current={section === href ? "page" : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" tabIndex={-1}>
          <Page path={path} who={who} />
        </main>
      </div>
    </>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
