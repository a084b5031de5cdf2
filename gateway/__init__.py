"""Toolgate: a declarative tool-execution gateway for AI agents."""

from gateway.slim import keep_out_httpx_cli

__version__ = "0.1.0"

keep_out_httpx_cli()
