"""Toolgate policy."""
