"""The runtime: the one object a gateway process runs on, and the execution lifecycle.

- ``container``: ``Runtime``, what the doors (server, CLI) and the workers hold;
- ``bootstrap``: load, check and open a runtime from settings (and close it);
- ``signals``: this process's wake-up, cancel signals, registry of running executions and the
  generations of the runtime a reload swaps;
- ``reload``: ``SIGHUP`` and ``POST /v1/admin/reload``: check, build and swap a generation;
- ``closing``, ``cancellation``, ``approvals``: what the doors call on an execution (close
  it, cancel it, resolve an unknown outcome, decide an approval and resume the call).

The runtime sits above the pipeline: it calls ``gateway.pipeline``, which sees it only
through ``gateway.pipeline.services.Services``.
"""
