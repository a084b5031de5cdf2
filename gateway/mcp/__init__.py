"""The Model Context Protocol door: ``/mcp`` (streamable HTTP, both protocol eras).

An MCP ``tools/call`` is parsed into the same ``ToolExecutionRequest`` a REST call becomes
and runs through the same pipeline; only the shapes at the edge differ:

- ``meta``     the namespaced ``_meta`` keys that carry what MCP has no field for
- ``tools``    the catalogue as MCP tools (schemas, annotations), filtered by the policy
- ``results``  an execution as a ``CallToolResult`` or a task: the one mapping to MCP
- ``calls``    the request handlers (``tools/list``, ``tools/call``, ``tasks/*``)
- ``endpoint`` the SDK server, the authenticating ASGI app and its session manager
- ``bridge``   ``toolgate mcp``: stdio ⇄ a gateway's ``/mcp``
"""
