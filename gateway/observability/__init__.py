"""What operators watch: Prometheus metrics (``metrics.py``), OpenTelemetry spans
(``tracing.py``, imported only when tracing is on), structured logs (``logs.py``) and the
decision log (``decisions.py``), held together by ``telemetry.Telemetry``
(docs/operations.md)."""
