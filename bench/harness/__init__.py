"""The benchmark harness behind ``bench/run.py`` (``make bench``); run.py is its command line.

- ``plan``: the plan (FULL, QUICK), the scenarios' request bodies, the log line, seeding
- ``timing``: timed loops for the micro-benchmarks and their summary in µs
- ``wrk``: finding wrk, one wrk run, the summary of A/B rounds
- ``servers``: the bare app, gateways (from ``gateway.testing``), the scenario checks,
  a PostgreSQL database of the harness's own
- ``http_phases``: scenarios 1-4 on SQLite (with the open-loop latency), scenario 5 on
  PostgreSQL
- ``micro``: policy, validation, the pipeline in-process; ``stages``: the time of each stage
  and store transaction; ``store``: the store's transactions on their own
- ``growth``: the 1,000-tool catalogue, a store preloaded with events
- ``profiling``: py-spy under scenario 1 (collapsed-stack analysis), cProfile in-process
- ``report``: the targets and the table; ``page``: the chart and docs/performance.md

It imports the gateway at the top of each module and never anything of ``tests/``
(tests/test_hygiene.py checks that); what bench and tests share is in ``gateway.testing``.
"""
