"""Toolgate declarations."""
