// Assertions on API responses shared by the HTTP test files: the error envelope and the
// single-resource bodies of successful calls.
import assert from "node:assert/strict";
import { BAD_CREDENTIALS, type TestApp, type TestResponse } from "../harness.js";

/** The only fields an error envelope may hold. */
export const ERROR_KEYS = ["code", "message", "details", "request_id"];

/**
 * Asserts an error envelope's frame: the status and code, the request id echoed from the
 * x-request-id header, and no field outside ERROR_KEYS. Says nothing of the message;
 * assertError adds that.
 */
export function assertErrorEnvelope(res: TestResponse, status: number, code: string): void {
  assert.equal(res.status, status, res.raw);
  assert.equal(res.body.code, code, res.raw);
  assert.equal(res.body.request_id, res.headers["x-request-id"]);
  for (const key of Object.keys(res.body)) assert.ok(ERROR_KEYS.includes(key), `unexpected error field ${key}`);
}

/** Asserts the standard error envelope: assertErrorEnvelope and a non-empty message. */
export function assertError(res: TestResponse, status: number, code: string): void {
  assertErrorEnvelope(res, status, code);
  assert.equal(typeof res.body.message, "string");
  assert.notEqual(res.body.message, "");
}

/** Asserts a 200 whose body is exactly `{ [key]: value }` and returns the value. */
export function bodyOf<T>(res: TestResponse, key: string): T {
  assert.equal(res.status, 200, res.raw);
  assert.deepEqual(Object.keys(res.body), [key]);
  return res.body[key] as T;
}

/** Asserts a 200 and returns the body's `key` field; unlike bodyOf, other fields may stand beside it. */
export function fieldOf<T>(res: TestResponse, key: string): T {
  assert.equal(res.status, 200, res.raw);
  return res.body[key] as T;
}

/** One call of a route, as the security tests list them. */
export interface RouteCall {
  name: string;
  method: string;
  url: string;
  body?: unknown;
}

/**
 * Calls every route with each of BAD_CREDENTIALS and asserts 401 `unauthenticated` in the flat
 * envelope: exactly code, message and request_id, the id echoed from the x-request-id header.
 */
export async function assertUnauthenticatedOnEvery(t: TestApp, routes: RouteCall[]): Promise<void> {
  for (const route of routes) {
    for (const bad of BAD_CREDENTIALS) {
      const res = await t.request(route.method, route.url, {
        headers: bad.headers,
        ...(route.body ? { body: route.body } : {}),
      });
      assert.equal(res.status, 401, `${route.name} ${bad.name}: ${res.raw}`);
      assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"], route.name);
      assert.equal(res.body.code, "unauthenticated");
      assert.equal(res.body.request_id, res.headers["x-request-id"]);
    }
  }
}
