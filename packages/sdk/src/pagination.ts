// List operations as async iterators: pages are fetched as the iteration reaches them.
import type { Transport } from "./transport.js";

export async function* pages<Page extends { next_page_token?: string }, Item>(
  transport: Transport,
  route: string,
  query: Record<string, unknown>,
  items: (page: Page) => Item[],
  signal?: AbortSignal,
): AsyncGenerator<Item, void, undefined> {
  let token = "";
  do {
    const page: Page = await transport.json<Page>("GET", route, {
      query: { ...(query as Record<string, string>), ...(token ? { page_token: token } : {}) },
      signal,
    });
    yield* items(page);
    token = page.next_page_token ?? "";
  } while (token);
}

/** Collects an async iterator (for small lists). */
export async function toArray<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}
