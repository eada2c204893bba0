// The exec agent's wire protocol (documented at the top of exec-agent.c): frames of u32 exec
// id, u8 type, u32 length and payload, the encoding of a run request, and a decoder that
// refuses an oversized frame from the (hostile) agent before holding its bytes.
import { joinFirst } from "../../../lib/chunk-list.js";
export const FRAME_HEADER = 9;
/** The largest payload the agent accepts (MAX_PAYLOAD in exec-agent.c). */
export const MAX_REQUEST_PAYLOAD = 4 << 20;
/** How many execs one agent runs at once (MAX_EXECS in exec-agent.c); beyond, runc exec is used. */
export const MAX_AGENT_EXECS = 256;
export type FrameType =
  | "R"
  | "K"
  | "H"
  | "P"
  | "O"
  | "E"
  | "X"
  | "F"
  | "D"
  | "S"
  | "I"
  | "W"
  | "A"
  | "a"
  // Background processes (version 3).
  | "B"
  | "G"
  | "C"
  | "N"
  | "J"
  | "Y"
  | "V"
  | "U"
  | "L";

export interface Frame {
  execId: number;
  type: string;
  payload: Buffer;
}

export interface AgentRequest {
  argv: string[];
  /** The whole environment, KEY=value. */
  env: string[];
  /** Absolute. */
  cwd: string;
}

export function encodeFrame(execId: number, type: FrameType, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(FRAME_HEADER);
  header.writeUInt32LE(execId >>> 0, 0);
  header.writeUInt8(type.charCodeAt(0), 4);
  header.writeUInt32LE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

function encodeStrings(values: string[]): Buffer[] {
  const parts: Buffer[] = [u32(values.length)];
  for (const value of values) {
    const bytes = Buffer.from(value, "utf8");
    parts.push(u32(bytes.length), bytes);
  }
  return parts;
}

function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value >>> 0, 0);
  return b;
}

/** The 'R' payload: argv, env and cwd as counted lists of u32-length-prefixed UTF-8 strings. */
export function encodeRequest(request: AgentRequest): Buffer {
  const cwd = Buffer.from(request.cwd, "utf8");
  return Buffer.concat([...encodeStrings(request.argv), ...encodeStrings(request.env), u32(cwd.length), cwd]);
}

/** The inverse of encodeRequest (what the agent does in C), for tests. */
export function decodeRequest(payload: Buffer): AgentRequest {
  let at = 0;
  const take = (): string => {
    const length = payload.readUInt32LE(at);
    at += 4;
    if (at + length > payload.length) throw new Error("string runs past the payload");
    const text = payload.subarray(at, at + length).toString("utf8");
    at += length;
    return text;
  };
  const list = (): string[] => {
    const count = payload.readUInt32LE(at);
    at += 4;
    return Array.from({ length: count }, take);
  };
  const argv = list();
  const env = list();
  const cwd = take();
  if (at !== payload.length) throw new Error("trailing bytes after the cwd");
  return { argv, env, cwd };
}

/** The largest payload of a frame from the agent: an output chunk (CHUNK in exec-agent.c) bounds them all. */
export const MAX_AGENT_FRAME_PAYLOAD = 64 << 10;
/** The byte stream broke the frame protocol; whoever reads it should drop the connection. */
export class FrameError extends Error {
  override name = "FrameError";
}

/**
 * Splits a byte stream into frames; keeps a partial frame for the next push (linear in the
 * bytes). The stream comes from inside a sandbox, so a frame announcing more than
 * `maxPayload` bytes is refused as soon as its header is in, before its bytes are held.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxPayload = MAX_AGENT_FRAME_PAYLOAD) {}

  /** The frames completed by `chunk`; throws FrameError (and holds nothing more) on an oversized frame. */
  push(chunk: Buffer): Frame[] {
    const frames: Frame[] = [];
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.size += chunk.length;
    }
    while (this.size >= FRAME_HEADER) {
      let head = this.chunks[0] as Buffer;
      if (head.length < FRAME_HEADER) head = joinFirst(this.chunks, FRAME_HEADER);
      const length = head.readUInt32LE(5);
      if (length > this.maxPayload) {
        this.chunks = [];
        this.size = 0;
        throw new FrameError(`a frame of ${length} bytes (at most ${this.maxPayload})`);
      }
      if (this.size < FRAME_HEADER + length) break;
      if (head.length < FRAME_HEADER + length) head = joinFirst(this.chunks, FRAME_HEADER + length);
      frames.push({
        execId: head.readUInt32LE(0),
        type: String.fromCharCode(head[4] as number),
        payload: head.subarray(FRAME_HEADER, FRAME_HEADER + length),
      });
      const rest = head.subarray(FRAME_HEADER + length);
      if (rest.length > 0) this.chunks[0] = rest;
      else this.chunks.shift();
      this.size -= FRAME_HEADER + length;
    }
    return frames;
  }

  /** Bytes of an incomplete frame held back. */
  get buffered(): number {
    return this.size;
  }
}
