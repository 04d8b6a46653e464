-- wrk script: POST a JSON /predict body on every request and count answers
-- by status, so that a run full of 429s or 503s does not pass for a fast one.
--
--   wrk -t2 -c128 -d30s -s examples/wrk/predict.lua http://127.0.0.1:5005
--
-- Environment variables change the body:
--   ITEM   one item as JSON (default "hello, streamer")
--   ITEMS  items per request (default 1)

local item = os.getenv("ITEM") or '"hello, streamer"'
local count = tonumber(os.getenv("ITEMS") or "1")

local items = {}
for i = 1, count do
  items[i] = item
end

wrk.method = "POST"
wrk.path = "/predict"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[' .. table.concat(items, ",") .. ']}'

-- Each wrk thread has its own Lua state; statuses are gathered per thread
-- and summed in done().
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for status, n in pairs(counts) do
      total[status] = (total[status] or 0) + n
    end
  end
  io.write("status counts:\n")
  for status, n in pairs(total) do
    io.write(string.format("  %d  %d\n", status, n))
  end
  io.write(string.format("items per request: %d\n", count))
  io.write(string.format("latency p50 %.2fms p90 %.2fms p99 %.2fms\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000))
end
