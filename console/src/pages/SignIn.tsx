// Sign-in: an API key pasted once and exchanged for the session cookie; the key is kept in no
// storage, the field is cleared, and the page reloads the signed-in view.
import { useState } from "preact/hooks";
import { signIn } from "../api.js";
import { ErrorLine } from "../components/common.js";

export function SignIn(props: { onSignedIn: () => void; reason?: string }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  return (
    <main class="signin">
      <h1>Warren console</h1>
      <form
        aria-label="Sign in"
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          setError(null);
          try {
            await signIn(key.trim());
            setKey("");
            props.onSignedIn();
          } catch (err) {
            setError(err);
          } finally {
            setBusy(false);
          }
        }}
      >
        {props.reason ? <p class="notice">{props.reason}</p> : null}
        <label for="api-key">API key</label>
        <input
          id="api-key"
          name="api-key"
          type="password"
          autocomplete="off"
          required
          value={key}
          placeholder="wrn_…"
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
        />
        <p class="hint">
          The key is exchanged for a browser session (an HttpOnly cookie) and is not kept. `make run` prints the
          bootstrap owner key on its first start.
        </p>
        <button type="submit" disabled={busy || key.trim() === ""}>
          Sign in
        </button>
        <ErrorLine error={error} />
      </form>
    </main>
  );
}
