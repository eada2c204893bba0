-- wrk script for bench/lib/load.ts: prints wrk's summary as one JSON line (prefixed
-- WRK_JSON; bench/annotations/annotate.lua loads this file for that), and with WRK_RATE set
-- paces requests to that many per second (per wrk thread): each request takes the next slot
-- of a fixed schedule, so the load arrives at a constant rate however fast the server
-- answers (open loop, up to the connection count).
local rate = tonumber(os.getenv("WRK_RATE") or "")

if rate and rate > 0 then
  local ffi = require("ffi")
  ffi.cdef([[
    typedef struct { long tv_sec; long tv_nsec; } wrk_timespec;
    int clock_gettime(int clk_id, wrk_timespec *tp);
  ]])
  local ts = ffi.new("wrk_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local interval = 1000 / rate
  local next_slot = nil
  delay = function()
    local now = now_ms()
    if next_slot == nil or next_slot < now - 1000 then next_slot = now end
    next_slot = next_slot + interval
    local wait = next_slot - now
    if wait < 0 then return 0 end
    return wait
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"duration_us":%d,"requests":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d}}\n',
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
