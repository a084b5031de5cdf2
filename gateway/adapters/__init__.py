"""Toolgate adapters."""
