-- wrk script for the annotate load (bench/annotations.ts): POST /v1/annotations with a fresh
-- payload per request whose identity field is drawn from a pool of keys, the same shape as
-- bench/annotations/annotate-load.ts. Arguments after `--`: keys, item prefix,
-- comma-separated schema names, comma-separated run ids.
-- Prints wrk's summary as one JSON line (prefixed WRK_JSON) with bench/lib/wrk-report.lua's done().

local labels = { "good", "bad", "unsure", "skip", "flag" }
local keys, prefix, schemas, runs

local function split(text)
  local out = {}
  for part in string.gmatch(text, "[^,]+") do out[#out + 1] = part end
  return out
end

function init(args)
  keys = tonumber(args[1])
  prefix = args[2]
  schemas = split(args[3])
  runs = split(args[4])
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
  wrk.method = "POST"
  wrk.headers["content-type"] = "application/json"
end

function request()
  local k = math.random(0, keys - 1)
  local payload = string.format('{\\"item\\":\\"%s%07d\\",\\"label\\":\\"%s\\",\\"reviewer\\":\\"r%02d\\",\\"score\\":%d}',
    prefix, k, labels[math.random(1, #labels)], math.random(0, 49), math.random(0, 10))
  local body = string.format('{"schema_name":"%s","run_id":"%s","payload_json":"%s"}',
    schemas[(k % #schemas) + 1], runs[(math.floor(k / #schemas) % #runs) + 1], payload)
  return wrk.format(nil, nil, nil, body)
end

-- done(): the WRK_JSON report of bench/lib/wrk-report.lua, loaded from there (wrk takes one
-- script; this one's path, as given to -s, locates the other). ingest-load.ts sets WRK_RATE
-- empty, so that script's pacing stays off.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
dofile(here .. "/../lib/wrk-report.lua")
