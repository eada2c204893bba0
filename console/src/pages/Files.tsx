// The file browser of a sandbox over the file API (the SDK's sandbox.files): a directory's
// entries, drag-and-drop (or chosen) uploads into it, downloads, and text files viewed inline.
import type { FileEntry } from "@warren/sdk";
import { useState } from "preact/hooks";
import { api, uploadFile } from "../api.js";
import { Empty, ErrorLine, useLoad } from "../components/common.js";

/** Files larger than this are downloaded, not shown. */
const MAX_VIEW_BYTES = 1_048_576;

export function Files(props: { sandboxId: string }) {
  const [dir, setDir] = useState("/workspace");
  const [error, setError] = useState<unknown>(null);
  const [viewing, setViewing] = useState<{ path: string; text: string } | null>(null);
  const [dragging, setDragging] = useState(false);
  const [notice, setNotice] = useState("");
  const files = () => api.sandboxes.get(props.sandboxId).then((s) => s.files);
  const list = useLoad(async () => (await files()).list(dir, { limit: 1000 }), [props.sandboxId, dir]);
  const upload = async (chosen: FileList | null) => {
    if (!chosen) return;
    setError(null);
    try {
      for (const file of Array.from(chosen)) {
        await uploadFile(
          props.sandboxId,
          `${dir.replace(/\/$/, "")}/${file.name}`,
          new Uint8Array(await file.arrayBuffer()),
        );
        setNotice(`uploaded ${file.name}`);
      }
      await list.reload();
    } catch (e) {
      setError(e);
    }
  };
  const open = async (entry: FileEntry) => {
    setError(null);
    if (entry.type === "dir") {
      setDir(entry.path);
      setViewing(null);
      return;
    }
    try {
      if (entry.size > MAX_VIEW_BYTES) throw new Error(`${entry.name} is over 1 MiB: download it instead`);
      const bytes = await (await files()).read(entry.path);
      const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
      setViewing({ path: entry.path, text });
    } catch (e) {
      setError(e instanceof TypeError ? new Error(`${entry.name} is not UTF-8 text: download it instead`) : e);
    }
  };
  const download = async (entry: FileEntry) => {
    try {
      const bytes = await (await files()).read(entry.path);
      const url = URL.createObjectURL(new Blob([new Uint8Array(bytes)]));
      const a = document.createElement("a");
      a.href = url;
      a.download = entry.name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      setError(e);
    }
  };
  const parent = dir === "/" ? null : dir.replace(/\/[^/]+\/?$/, "") || "/";
  return (
    <section
      aria-label="Files"
      class={dragging ? "dropzone dragging" : "dropzone"}
      onDragOver={(e) => {
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        e.preventDefault();
        setDragging(false);
        void upload(e.dataTransfer?.files ?? null);
      }}
    >
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          const value = new FormData(e.currentTarget as HTMLFormElement).get("dir");
          if (typeof value === "string" && value.startsWith("/")) setDir(value);
        }}
      >
        <label>
          Directory <input name="dir" value={dir} key={dir} />
        </label>
        <button type="submit">Go</button>
        <label class="upload">
          Upload files
          <input type="file" multiple onChange={(e) => void upload((e.target as HTMLInputElement).files)} />
        </label>
      </form>
      <p class="hint">Drop files here to upload them into {dir}.</p>
      <ErrorLine error={list.error ?? error} />
      {notice ? (
        <p role="status" class="notice">
          {notice}
        </p>
      ) : null}
      <table>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Type</th>
            <th scope="col">Size</th>
            <th scope="col">Download</th>
          </tr>
        </thead>
        <tbody>
          {parent ? (
            <tr>
              <td>
                <button type="button" class="link" onClick={() => setDir(parent)}>
                  ..
                </button>
              </td>
              <td>dir</td>
              <td />
              <td />
            </tr>
          ) : null}
          {(list.data ?? []).map((entry) => (
            <tr key={entry.path}>
              <td>
                <button type="button" class="link" onClick={() => void open(entry)}>
                  {entry.name}
                </button>
              </td>
              <td>{entry.type}</td>
              <td>{entry.type === "file" ? entry.size : ""}</td>
              <td>
                {entry.type === "file" ? (
                  <button type="button" onClick={() => void download(entry)} aria-label={`Download ${entry.name}`}>
                    Download
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {list.data && list.data.length === 0 ? <Empty>This directory is empty.</Empty> : null}
      {viewing ? (
        <figure>
          <figcaption>{viewing.path}</figcaption>
          {/* A scrolled region takes a tab stop (axe: scrollable-region-focusable). */}
          {/* biome-ignore lint/a11y/noNoninteractiveTabindex: see above */}
          <pre class="file-view" data-testid="file-view" tabIndex={0}>
            {viewing.text}
          </pre>
        </figure>
      ) : null}
    </section>
  );
}
