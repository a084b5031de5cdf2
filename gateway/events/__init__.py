"""Toolgate events."""
