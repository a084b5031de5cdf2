"""Toolgate server."""
