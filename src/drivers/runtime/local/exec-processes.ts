// Background processes on the exec agent (version 3; the 'B' ... 'L' frames documented at the
// top of exec-agent.c, docs/api-decisions.md "Processes"). The agent keeps each process and a
// bounded ring of its output (PROCESS_RING_BYTES) across connections, so a process outlives the
// server: a restarted server reattaches through the run's keeper socket and lists them. This is
// the host's side of those frames; every frame from the agent is hostile and checked.
import type { Frame } from "./exec-frames.js";

/** RING_CAP in exec-agent.c: the output kept per process. */
export const PROCESS_RING_BYTES = 1 << 20;
/** MAX_PROCS in exec-agent.c: background processes one agent keeps (running or not yet released). */
export const MAX_AGENT_PROCESSES = 64;
/** SESSION_INPUT in exec-agent.c: stdin bytes one 'J' may carry (and the agent holds unwritten). */
export const PROCESS_INPUT_BYTES = 64 << 10;

/** A background process as the agent lists it ('l'). */
export interface AgentProcessInfo {
  serial: number;
  pid: number;
  exited: boolean;
  exitCode: number | null;
  /** The output offset of the oldest byte kept. */
  firstOffset: number;
  /** The output offset after the last byte (bytes written so far). */
  endOffset: number;
  /** Exited and its output pipes closed: no more output comes. */
  done: boolean;
}

export interface OutputChunk {
  offset: number;
  stream: "stdout" | "stderr";
  data: Buffer;
}

/** One read's answer ('g' frames then 'h'). */
export interface ReadResult {
  chunks: OutputChunk[];
  /** The offset after the last byte delivered (or the oldest kept, when nothing came). */
  next: number;
  /** No more output comes after `next`. */
  complete: boolean;
  /** The agent has no such process. */
  unknown: boolean;
}

/** An answer to one request frame, decoded; null for a frame that broke the protocol. */
export interface Pending {
  onFrame(frame: Frame): string | null;
  onLost(reason: string): void;
}

const MAX_FAILURE_MESSAGE = 8191;

export function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value >>> 0, 0);
  return b;
}

export function u64(value: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(value), 0);
  return b;
}

function safeOffset(payload: Buffer, at: number): number | null {
  const value = payload.readBigUInt64LE(at);
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? null : Number(value);
}

/** The answer to 'B': 'Q' (serial, pid) or 'F' (the command did not start). */
export function startAnswer(
  resolve: (started: { serial: number; pid: number }) => void,
  reject: (error: Error) => void,
  spawnError: (message: string) => Error,
  lostError: (reason: string) => Error,
): Pending {
  return {
    onFrame(frame) {
      if (frame.type === "Q" && frame.payload.length === 8) {
        resolve({ serial: frame.payload.readUInt32LE(0), pid: frame.payload.readInt32LE(4) });
        return null;
      }
      if (frame.type === "F" && frame.payload.length <= MAX_FAILURE_MESSAGE) {
        reject(spawnError(frame.payload.toString("utf8")));
        return null;
      }
      return `a ${JSON.stringify(frame.type)} frame in answer to a process start`;
    },
    onLost: (reason) => reject(lostError(reason)),
  };
}

/** The answer to a control request ('N', 'J', 'Y', 'V', 'U'): one 'j'. */
export function controlAnswer(resolve: (value: number) => void, reject: (error: Error) => void): Pending {
  return {
    onFrame(frame) {
      if (frame.type !== "j" || frame.payload.length !== 4) return "a malformed control answer";
      resolve(frame.payload.readInt32LE(0));
      return null;
    },
    onLost: (reason) => reject(new Error(reason)),
  };
}

/** The answer to 'L': 'l' per process, then 'j' with their count. */
export function listAnswer(resolve: (list: AgentProcessInfo[]) => void, reject: (error: Error) => void): Pending {
  const list: AgentProcessInfo[] = [];
  return {
    onFrame(frame) {
      const p = frame.payload;
      if (frame.type === "l") {
        if (p.length !== 30 || list.length >= MAX_AGENT_PROCESSES) return "a malformed process entry";
        const firstOffset = safeOffset(p, 13);
        const endOffset = safeOffset(p, 21);
        if (firstOffset === null || endOffset === null || firstOffset > endOffset)
          return "process offsets out of range";
        const exited = p[8] === 1;
        const code = p.readInt32LE(9);
        if (exited && (code < 0 || code > 255)) return `an exit code of ${code}`;
        list.push({
          serial: p.readUInt32LE(0),
          pid: p.readInt32LE(4),
          exited,
          exitCode: exited ? code : null,
          firstOffset,
          endOffset,
          done: p[29] === 1,
        });
        return null;
      }
      if (frame.type === "j" && p.length === 4 && p.readInt32LE(0) === list.length) {
        resolve(list);
        return null;
      }
      return "a malformed process list";
    },
    onLost: (reason) => reject(new Error(reason)),
  };
}

/**
 * The answer to one 'G': 'g' frames then 'h'. At most `max` bytes, at offsets that only grow
 * from `from` (a jump forward is a gap the agent dropped), else the frame broke the protocol.
 */
export function readAnswer(
  from: number,
  max: number,
  resolve: (result: ReadResult) => void,
  reject: (error: Error) => void,
): Pending {
  const chunks: OutputChunk[] = [];
  let at = from;
  let got = 0;
  let first = true;
  return {
    onFrame(frame) {
      const p = frame.payload;
      if (frame.type === "g") {
        if (p.length < 10) return "a malformed output frame";
        const offset = safeOffset(p, 0);
        const stream = p[8];
        if (offset === null || (first ? offset < at : offset !== at) || (stream !== 1 && stream !== 2))
          return "output at an offset out of order";
        const data = Buffer.from(p.subarray(9));
        got += data.length;
        if (got > max) return "more output than was asked for";
        first = false;
        at = offset + data.length;
        chunks.push({ offset, stream: stream === 1 ? "stdout" : "stderr", data });
        return null;
      }
      if (frame.type === "h" && p.length === 9) {
        const next = safeOffset(p, 0);
        const flags = p[8] as number;
        if (flags & 2) {
          resolve({ chunks, next: at, complete: true, unknown: true });
          return null;
        }
        if (next === null || next < at || (chunks.length > 0 && next !== at)) return "a read's end out of order";
        resolve({ chunks, next, complete: (flags & 1) !== 0, unknown: false });
        return null;
      }
      return "a malformed read answer";
    },
    onLost: (reason) => reject(new Error(reason)),
  };
}

/** The 'B' payload: u32 flags (1 terminal, 2 stdin piped), rows, cols, then the 'R' payload. */
export function encodeProcessHeader(pty: { rows: number; cols: number } | null, stdin: boolean): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt32LE((pty ? 1 : 0) | (stdin ? 2 : 0), 0);
  header.writeUInt32LE(clamp(pty?.rows ?? 0), 4);
  header.writeUInt32LE(clamp(pty?.cols ?? 0), 8);
  return header;
}

function clamp(value: number): number {
  return Number.isInteger(value) && value > 0 ? Math.min(value, 0xffff) : 0;
}
