"""What the adapters' tests share."""

HTTP_HEAD = """\
name: t.http
version: 1.0.0
description: A test tool.
adapter: http
operation: request
risk: low
"""
"""The start of a test declaration of an http tool: the rest is each test's."""
