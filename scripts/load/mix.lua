-- wrk script for `make load`: a fixed request mix against Examples/PetClinic.
--   80 % GET /pets/{id}       a seeded pet, chosen at random
--   10 % GET /pets?...         a page of 20, filtered by species and sorted by name
--   10 % POST /pets            a new pet for a seeded owner
-- SCENARIO picks what is sent: "mix" (the above, the default), "list" (only the page of
-- 20), "lookup" (only GET /pets/{id}), "create" (only POST /pets) or "health" (only
-- GET /health, which touches no store: the HTTP ceiling).
-- PETS (how many pets were seeded) and OWNER (their owner's id) come from the environment.
-- Seeded pet ids are 00000000-0000-4000-8000-<index as 12 hex digits>, as scripts/load/run.sh makes them.

local pets = tonumber(os.getenv("PETS") or "1000")
local owner = os.getenv("OWNER") or ""
local species = { "cat", "dog", "parrot" }
local counter = 0
local json = { ["Content-Type"] = "application/json" }
local scenario = os.getenv("SCENARIO") or "mix"

function setup(thread)
  thread:set("id", math.random(1, 1000000))
end

function init(args)
  math.randomseed(os.time() + (tonumber(wrk.thread:get("id")) or 0))
end

function request()
  counter = counter + 1
  if scenario == "health" then
    return wrk.format("GET", "/health")
  end
  local fixed = { list = 85, lookup = 1, create = 95 }
  local r = fixed[scenario] or math.random(100)
  if r <= 80 then
    return wrk.format("GET", string.format("/pets/00000000-0000-4000-8000-%012x", math.random(0, pets - 1)))
  elseif r <= 90 then
    return wrk.format("GET", "/pets?species=" .. species[math.random(1, 3)] .. "&sort=name&limit=20")
  else
    local body = string.format('{"ownerID":"%s","name":"load-%d-%d","species":"dog","birthYear":2020}', owner, math.random(1, 1000000000), counter)
    return wrk.format("POST", "/pets", json, body)
  end
end

-- One JSON line for run.sh: throughput, latency percentiles (microseconds) and errors
-- (socket errors, and answers that are not 2xx or 3xx).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOAD {"requests":%d,"seconds":%.3f,"requestsPerSecond":%.1f,"p50us":%d,"p90us":%d,"p99us":%d,"maxus":%d,"errors":%d,"non2xx":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.timeout + e.status, e.status))
end
