// The SSH gateway's pure parts: the failure limiter's window and bound, the client env and
// terminal name rules, and the throttled session activity (with a fake clock and touch).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { loadConfig } from "../../config.js";
import { HEARTBEAT_MS, MIN_TOUCH_MS, SessionActivity } from "./activity.js";
import { allowedClientEnv, FailureLimiter, terminalName } from "./limits.js";

describe("ssh failure limiter", () => {
  it("refuses an address past maxFailures within the window, and allows it again after", () => {
    const limiter = new FailureLimiter({ maxFailures: 3, windowMs: 1000, maxAddresses: 100 });
    for (let i = 0; i < 3; i++) {
      assert.equal(limiter.allowed("10.0.0.1", i * 10), true);
      limiter.recordFailure("10.0.0.1", i * 10);
    }
    assert.equal(limiter.allowed("10.0.0.1", 100), false);
    assert.equal(limiter.allowed("10.0.0.2", 100), true, "other addresses are not affected");
    // The oldest failure (t=0) leaves the window at t=1000; one more try is allowed.
    assert.equal(limiter.allowed("10.0.0.1", 1000), true);
    limiter.recordFailure("10.0.0.1", 1000);
    assert.equal(limiter.allowed("10.0.0.1", 1005), false);
    assert.equal(limiter.allowed("10.0.0.1", 2020), true);
  });

  it("tracks at most maxAddresses, dropping the oldest", () => {
    const limiter = new FailureLimiter({ maxFailures: 1, windowMs: 60_000, maxAddresses: 3 });
    for (const address of ["a", "b", "c", "d"]) limiter.recordFailure(address, 0);
    assert.equal(limiter.trackedAddresses, 3);
    assert.equal(limiter.allowed("a", 1), true, "the oldest was dropped");
    assert.equal(limiter.allowed("d", 1), false);
  });
});

describe("ssh client input rules", () => {
  it("passes on locale variables only, bounded and printable", () => {
    assert.equal(allowedClientEnv("LANG", "en_US.UTF-8"), true);
    assert.equal(allowedClientEnv("LC_ALL", "C"), true);
    for (const [name, value] of [
      ["LD_PRELOAD", "/tmp/x.so"],
      ["PATH", "/tmp"],
      ["WARREN_SANDBOX_TOKEN", "x"],
      ["LANG", "x".repeat(257)],
      ["LANG", "a\nb"],
      ["lc_all", "C"],
    ]) {
      assert.equal(allowedClientEnv(name as string, value as string), false, `${name}=${value}`);
    }
  });

  it("keeps a sane terminal name, else xterm", () => {
    assert.equal(terminalName("xterm-256color"), "xterm-256color");
    assert.equal(terminalName(""), "xterm");
    assert.equal(terminalName(undefined), "xterm");
    assert.equal(terminalName("vt100; rm -rf /"), "xterm");
    assert.equal(terminalName("x".repeat(65)), "xterm");
  });
});

describe("ssh session activity", () => {
  function harness() {
    let now = 1_000_000;
    const touches: number[] = [];
    const activity = new SessionActivity(
      async () => {
        touches.push(now);
      },
      () => undefined,
      { nowMs: () => now },
    );
    return {
      activity,
      touches,
      advance: (ms: number) => {
        now += ms;
      },
    };
  }

  it("touches at the first open, holds the sandbox while any is open, and not again within MIN_TOUCH_MS", () => {
    const { activity, touches, advance } = harness();
    const end1 = activity.begin("sbx");
    const end2 = activity.begin("sbx");
    assert.equal(touches.length, 1);
    assert.equal(activity.isOpen("sbx"), true);
    end1();
    end1();
    assert.equal(activity.isOpen("sbx"), true, "a second end of the same session counts once");
    advance(MIN_TOUCH_MS);
    end2();
    assert.equal(activity.isOpen("sbx"), false);
    assert.equal(touches.length, 2, "the last close is recorded");
    assert.equal(activity.isOpen("other"), false);
    activity.close();
  });

  it("close() drops the trailing touch owed when the last close came inside the throttle", (t) => {
    // The trailing touch is a timer of MIN_TOUCH_MS: mocked, so the test can pass its whole span.
    t.mock.timers.enable({ apis: ["setTimeout", "setInterval"] });
    const { activity, touches } = harness();
    const end = activity.begin("sbx");
    end();
    assert.equal(touches.length, 1);
    assert.ok(MIN_TOUCH_MS < HEARTBEAT_MS);
    activity.close();
    t.mock.timers.tick(HEARTBEAT_MS * 2);
    assert.equal(touches.length, 1);
  });
});

describe("ssh configuration", () => {
  it("is off by default, and names the host clients reach it on", () => {
    assert.equal(loadConfig({}).sshListen, null);
    assert.equal(loadConfig({}).sshHost, "");
    const on = loadConfig({ WARREN_SSH_LISTEN: "127.0.0.1:0" });
    assert.deepEqual(on.sshListen, { host: "127.0.0.1", port: 0 });
    assert.equal(on.sshHost, "127.0.0.1");
    // A wildcard listener is named by the API's host; WARREN_SSH_HOST overrides both.
    assert.equal(loadConfig({ WARREN_SSH_LISTEN: "0.0.0.0:2222", WARREN_LISTEN: "10.1.2.3:80" }).sshHost, "10.1.2.3");
    assert.equal(loadConfig({ WARREN_SSH_LISTEN: "0.0.0.0:2222", WARREN_LISTEN: "0.0.0.0:80" }).sshHost, "127.0.0.1");
    assert.equal(
      loadConfig({ WARREN_SSH_LISTEN: "0.0.0.0:2222", WARREN_SSH_HOST: "ssh.example" }).sshHost,
      "ssh.example",
    );
    assert.throws(() => loadConfig({ WARREN_SSH_LISTEN: "2222" }), /WARREN_SSH_LISTEN must be host:port/);
  });
});
