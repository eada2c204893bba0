// The 64-bit integer rule of both SDKs (docs/sdk-cli.md "64-bit integers") in the TypeScript
// one: records keep the wire's decimal strings; 64-bit arguments take a number, a bigint or a
// string and send a decimal string; int64() reads one back exactly. (The Python SDK's side is
// packages/python/tests, run by test/python-sdk.test.ts.)
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { InvalidArgumentError, int64, Warren, wireInt64 } from "../packages/sdk/src/index.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

describe("SDK 64-bit integers [pglite]", () => {
  let api: ApiServer;
  let warren: Warren;
  before(async () => {
    api = await startApiServer("pglite");
    warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
  });
  after(async () => {
    await api?.close();
  });

  it("reads and writes them exactly, past 2^53 too", () => {
    assert.equal(int64("9007199254740993"), 9007199254740993n);
    assert.equal(int64("18446744073709551615"), 2n ** 64n - 1n);
    assert.equal(int64("18446744073709551616"), undefined);
    assert.equal(int64("1e3"), undefined);
    assert.equal(wireInt64(2n ** 40n), "1099511627776");
    assert.equal(wireInt64(1024), "1024");
    assert.equal(wireInt64("12 GiB"), "12 GiB", "a string is the server's to judge");
    assert.throws(() => wireInt64(1.5), RangeError);
    assert.throws(() => wireInt64(2 ** 60), RangeError, "a number past 2^53 is refused, not rounded");
  });

  it("volumes.create takes a bigint or a number for quota_bytes and the record keeps a decimal string", async () => {
    const big = await warren.volumes.create({ name: "numbers-big", quota_bytes: 2n ** 40n });
    assert.equal(big.quota_bytes, "1099511627776");
    const small = await warren.volumes.create({ name: "numbers-small", quota_bytes: 1024 ** 3 });
    assert.equal((await warren.volumes.get(small.id as string)).quota_bytes, String(1024 ** 3));
    assert.equal(int64(big.quota_bytes), 2n ** 40n);
    await assert.rejects(warren.volumes.create({ name: "numbers-bad", quota_bytes: "12 GiB" }), InvalidArgumentError);
  });
});
