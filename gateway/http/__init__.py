"""What every HTTP door (the REST API in ``gateway.server``, MCP in ``gateway.mcp``) shares:
authentication by bearer key, and the one mapping of errors to HTTP problem responses."""
