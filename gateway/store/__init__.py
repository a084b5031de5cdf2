"""Toolgate store."""
