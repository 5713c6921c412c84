-- wrk script: absolute-form GETs (`GET http://DEST/small HTTP/1.1`) sent to the proxy that
-- wrk's URL names, with keep-alive. Usage: wrk ... -s absolute.lua http://PROXY/ -- DEST [PATH]
function init(args)
   local dest = args[1] or error("usage: -- DEST_HOST:PORT [PATH]")
   local path = args[2] or "/small"
   wrk.path = "http://" .. dest .. path
   wrk.headers["Host"] = dest
end

-- One line for run.sh; `status` is wrk's count of responses with status > 399.
function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "WRK requests=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
      summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout))
end
