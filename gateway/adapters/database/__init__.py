"""The database adapter: ``spec`` (what its declarations may say; light) and ``adapter`` (the
implementation, imported by ``gateway.adapters.registry`` only when it is built)."""
