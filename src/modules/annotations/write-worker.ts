// The annotation writer thread (PostgreSQL): takes annotate writes from the server's main
// thread and stores them with a WriteBatcher on its own connections. On this thread a
// statement's result is seen the moment it arrives, so the next batch leaves at once instead
// of waiting for the main thread to finish the HTTP work it is busy with.
import { parentPort, workerData } from "node:worker_threads";
import { openPostgres } from "../../store/postgres.js";
import type { EncodedWrite } from "./annotation-repo.js";
import type { WriterReply, WriterRequest } from "./worker-writer.js";
import { WriteBatcher } from "./write-batcher.js";

const port = parentPort;
if (!port) throw new Error("write-worker runs as a worker thread");
const { connectionString } = workerData as { connectionString: string };
const opened = openPostgres(connectionString, 2).then((db) => ({ db, batcher: new WriteBatcher(db) }));
// Keeps an unhandled rejection away; each write below reports the failure instead.
opened.catch(() => undefined);

// Results settle together (one statement answers a whole batch), so they go back together.
let outbox: WriterReply[] = [];
function reply(message: WriterReply) {
  if (outbox.length === 0) queueMicrotask(sendOutbox);
  outbox.push(message);
}
function sendOutbox() {
  const messages = outbox;
  outbox = [];
  port?.postMessage(messages);
}

async function write(id: number, request: EncodedWrite) {
  try {
    const { batcher } = await opened;
    reply({ id, result: await batcher.write(request) });
  } catch (error) {
    reply({ id, error: (error as Error).message ?? String(error) });
  }
}

port.on("message", async (message: WriterRequest) => {
  if ("write" in message) {
    void write(message.id, message.write);
    return;
  }
  const store = await opened.catch(() => null);
  if (store) {
    await store.batcher.close();
    await store.db.close();
  }
  port.close();
});
