// The libuv threadpool's size, set before anything uses the pool: main.ts imports this module
// first, so its body runs before any other module of the server (the pool starts on first
// use and reads UV_THREADPOOL_SIZE then, never again). Every fs call, zstd and the DNS
// lookups run there. A snapshot replication keeps up to DEFAULT_CONCURRENCY chunk writes in
// flight, each holding a thread through its fsyncs for milliseconds; with libuv's default of
// 4 threads those starved the image reads and compressions of the same pipeline (and every
// other request's file I/O). An operator's own UV_THREADPOOL_SIZE wins. (The one place
// besides config.ts that touches process.env: config is loaded too late for this.)
export const THREADPOOL_SIZE = 16;

process.env.UV_THREADPOOL_SIZE ||= String(THREADPOOL_SIZE);
