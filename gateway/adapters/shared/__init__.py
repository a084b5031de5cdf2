"""Helpers any adapter may use: file I/O and hashing, egress control, an httpx transport that
enforces it, artifacts. No module here imports an adapter kind."""
