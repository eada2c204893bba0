// The `ws` client API the SDK's exec stream uses, over the browser's WebSocket. The browser
// sends the console's session cookie and its Origin with the upgrade (it cannot set
// Authorization, so the SDK's header is dropped here). Output flow control is the browser's.
import { Buffer } from "buffer";

type Listener = (...args: unknown[]) => void;

export default class WebSocketShim {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSING = 2;
  static readonly CLOSED = 3;
  private readonly socket: WebSocket;
  private readonly listeners = new Map<string, Listener[]>();

  constructor(url: string, _options?: unknown) {
    this.socket = new WebSocket(url);
    this.socket.binaryType = "arraybuffer";
    this.socket.onopen = () => this.emit("open");
    this.socket.onmessage = (event: MessageEvent) => {
      if (typeof event.data === "string") this.emit("message", Buffer.from(event.data, "utf8"), false);
      else this.emit("message", Buffer.from(event.data as ArrayBuffer), true);
    };
    this.socket.onerror = () => this.emit("error", new Error("the WebSocket failed"));
    this.socket.onclose = (event: CloseEvent) => this.emit("close", event.code, event.reason);
  }

  get readyState(): number {
    return this.socket.readyState;
  }

  on(event: string, listener: Listener): this {
    this.listeners.set(event, [...(this.listeners.get(event) ?? []), listener]);
    return this;
  }

  private emit(event: string, ...args: unknown[]): void {
    for (const listener of this.listeners.get(event) ?? []) listener(...args);
  }

  send(data: string | Uint8Array, options?: unknown, callback?: (error?: Error) => void): void {
    const cb = typeof options === "function" ? (options as (error?: Error) => void) : callback;
    try {
      this.socket.send(typeof data === "string" ? data : new Uint8Array(data));
      if (cb) queueMicrotask(() => cb());
    } catch (error) {
      if (cb) queueMicrotask(() => cb(error as Error));
    }
  }

  pause(): void {}
  resume(): void {}

  terminate(): void {
    this.socket.close();
  }

  close(): void {
    this.socket.close();
  }
}
