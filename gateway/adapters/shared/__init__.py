"""Helpers any adapter may use: file I/O and hashing, egress control, the server's one HTTP
client that enforces it (``client``, with its URLs: ``urls``), artifacts. No module here
imports an adapter kind."""
