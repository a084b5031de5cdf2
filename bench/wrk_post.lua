-- wrk script for bench/run.py: POST a JSON body built from a template, a unique call_id each.
--
--   wrk -t2 -c16 -d10s --latency -s bench/wrk_post.lua URL -- TEMPLATE NONCE MARKER AUTH SLOTS HEADERS
--
-- TEMPLATE  file holding the compact JSON body; "@CALL@" in it becomes NONCE-<thread>-<n>
--           (unique per request: the gateway de-duplicates (run_id, call_id)), and "@SLOT@"
--           becomes a number in 0..SLOTS-1 that cycles per request (64 distinct files).
-- NONCE     unique per wrk run, so runs never reuse each other's call ids.
-- MARKER    a response counts as ok when its status is 200 and its body contains MARKER
--           (plain substring; "" = status only). Everything else counts as bad.
-- AUTH      the Authorization header value ("" = none).
-- SLOTS     the modulus of "@SLOT@" (default 64).
-- HEADERS   more request headers, "Name: value" lines separated by "\n" (default none).
--
-- done() prints one line "WRK_JSON {...}" with counts and latency percentiles (µs).

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local CALL, SLOT = {}, {}

function init(args)
  local file = assert(io.open(args[1], "rb"))
  local template = file:read("*a")
  file:close()
  nonce = args[2] or "run"
  marker = args[3] or ""
  local auth = args[4] or ""
  slots = tonumber(args[5] or "64")
  -- Split the template into literal parts and the two placeholders, once.
  parts = {}
  local pos = 1
  while true do
    local a, b = string.find(template, "@[A-Z]+@", pos)
    if not a then break end
    local name = string.sub(template, a, b)
    if name == "@CALL@" or name == "@SLOT@" then
      table.insert(parts, string.sub(template, pos, a - 1))
      table.insert(parts, name == "@CALL@" and CALL or SLOT)
    else
      table.insert(parts, string.sub(template, pos, b))
    end
    pos = b + 1
  end
  table.insert(parts, string.sub(template, pos))
  n, ok, bad = 0, 0, 0
  prefix = nonce .. "-" .. tid .. "-"
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  if auth ~= "" then wrk.headers["Authorization"] = auth end
  for line in string.gmatch(args[6] or "", "[^\n]+") do
    local name, value = string.match(line, "^([^:]+):%s*(.*)$")
    if name then wrk.headers[name] = value end
  end
end

function request()
  n = n + 1
  local out = {}
  for i = 1, #parts do
    local part = parts[i]
    if part == CALL then
      out[i] = prefix .. n
    elseif part == SLOT then
      out[i] = tostring((n + tid * 7) % slots)
    else
      out[i] = part
    end
  end
  return wrk.format(nil, nil, nil, table.concat(out))
end

function response(status, headers, body)
  if status == 200 and (marker == "" or string.find(body, marker, 1, true)) then
    ok = ok + 1
  else
    bad = bad + 1
    if bad <= 3 then
      io.stderr:write("bad response " .. status .. ": " .. string.sub(body or "", 1, 300) .. "\n")
    end
  end
end

function done(summary, latency, requests)
  local good, wrong = 0, 0
  for _, thread in ipairs(threads) do
    good = good + (thread:get("ok") or 0)
    wrong = wrong + (thread:get("bad") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"ok":%d,"bad":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes, good, wrong,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max))
end
