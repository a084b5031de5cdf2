"""Toolgate: a declarative tool-execution gateway for AI agents."""

__version__ = "0.1.0"
