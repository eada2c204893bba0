// A byte stream held as the chunks it arrived in, for frame decoders: joining only the first
// chunks a frame needs copies each byte at most once, where joining all that is held would
// copy a window's worth of bytes for every frame that spans two chunks.

/** Replaces the first chunks of `chunks` by one of at least `need` bytes (fewer when fewer are held) and returns it. */
export function joinFirst(chunks: Buffer[], need: number): Buffer {
  let count = 0;
  let bytes = 0;
  while (bytes < need && count < chunks.length) bytes += (chunks[count++] as Buffer).length;
  const head = Buffer.concat(chunks.slice(0, count), bytes);
  chunks.splice(0, count, head);
  return head;
}
