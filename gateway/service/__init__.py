"""The application layer beneath the doors: what every door does, written once.

REST (``server/``), MCP (``mcp/``), the page (``ui/``) and the CLI's remote commands only
translate their wire to and from these operations, so the same question gets the same
answer through each of them (``tests/service/test_door_parity.py``):

- ``catalogue``: the tools a principal may see, asked of the policy, in every format;
- ``executions``: the executions a principal may see, read one, find several (the same
  shape, the pending approval included), and wait for one to end.
"""
