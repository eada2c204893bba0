// Annotate writes that queue up together go to the store as one statement: a write's fixed
// cost (statement start, opening two tables with all their indexes, the commit, on
// PostgreSQL a loopback round trip) outweighs the row itself. Each caller still answers
// only after its own write committed. One statement is in flight at a time: the writes that
// arrive meanwhile make the next one (on PostgreSQL, 16 clients wrote ~30% more per second
// this way than with 2 to 4 statements in flight, which made the batches smaller). The
// batching runs on the server's main thread: a writer thread of its own, tried on
// PostgreSQL, cost ~20% more CPU per annotate (each write and each answer crossing threads
// as a message) and on the 2-core host wrote ~10% fewer per second.
import type { Db } from "../../store/db.js";
import { type EncodedWrite, insertAnnotations, type WriteResult } from "./annotation-repo.js";

/** Most annotate writes one statement takes. */
const MAX_BATCH = 64;

interface QueuedWrite extends EncodedWrite {
  resolve: (result: WriteResult) => void;
  reject: (error: unknown) => void;
}

export class WriteBatcher {
  private readonly queue: QueuedWrite[] = [];
  private flushScheduled = false;
  private writing: Promise<void> | null = null;

  constructor(private readonly db: Db) {}

  /** Writes one annotation (see insertAnnotations for the results). */
  write(write: EncodedWrite): Promise<WriteResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ ...write, resolve, reject });
      this.scheduleFlush();
    });
  }

  /** Waits for the writes under way. */
  async close(): Promise<void> {
    while (this.writing || this.queue.length > 0) {
      if (!this.writing) this.scheduleFlush();
      await (this.writing ?? new Promise((resolve) => setImmediate(resolve)));
    }
  }

  private scheduleFlush() {
    if (this.flushScheduled || this.writing) return;
    this.flushScheduled = true;
    const flush = () => {
      this.flushScheduled = false;
      this.flush();
    };
    // PGlite runs a statement on this thread, so the batch waits for the rest of this turn's
    // I/O to join it. PostgreSQL runs it while this thread goes on, so a write leaves at once
    // when none is in flight, and the next batch gathers meanwhile.
    if (this.db.kind === "pglite") setImmediate(flush);
    else queueMicrotask(flush);
  }

  private flush() {
    if (this.queue.length === 0 || this.writing) return;
    const batch = this.queue.splice(0, MAX_BATCH);
    const writing = this.store(batch).then((answer) => {
      this.writing = null;
      // On PostgreSQL the next statement leaves before this one's callers are answered: the
      // connection would otherwise idle while the answers go out. On PGlite the statement
      // would run first, holding the answers back.
      if (this.db.kind !== "pglite") this.flush();
      answer();
      if (this.queue.length > 0) this.scheduleFlush();
    });
    this.writing = writing;
  }

  /** Stores the batch; returns what answers its callers. */
  private async store(batch: QueuedWrite[]): Promise<() => void> {
    const answers: (() => void)[] = [];
    try {
      // In order, runs of writes that share no event id and no supersession key.
      let run: QueuedWrite[] = [];
      const taken = new Set<string>();
      for (const write of batch) {
        if (taken.has(write.eventKey) || taken.has(write.headKey)) {
          await this.storeRun(run, answers);
          run = [];
          taken.clear();
        }
        run.push(write);
        taken.add(write.eventKey);
        taken.add(write.headKey);
      }
      await this.storeRun(run, answers);
    } catch (error) {
      // Not expected (storeRun answers every write); never leave a caller waiting. A write
      // already answered ignores the rejection.
      return () => {
        for (const answer of answers) answer();
        for (const write of batch) write.reject(error);
      };
    }
    return () => {
      for (const answer of answers) answer();
    };
  }

  private async storeRun(run: QueuedWrite[], answers: (() => void)[]) {
    if (run.length > 1) {
      let results: WriteResult[] | null = null;
      try {
        results = await insertAnnotations(this.db, run);
      } catch {
        // One write failed and took the statement with it: below, each is written on its
        // own, so only the failing one fails.
      }
      if (results) {
        const stored = results;
        answers.push(() => {
          for (const [i, write] of run.entries()) write.resolve(stored[i] as WriteResult);
        });
        return;
      }
    }
    for (const write of run) {
      try {
        const [result] = await insertAnnotations(this.db, [write]);
        answers.push(() => write.resolve(result as WriteResult));
      } catch (error) {
        answers.push(() => write.reject(error));
      }
    }
  }
}
