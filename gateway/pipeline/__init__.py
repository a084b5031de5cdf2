"""Toolgate pipeline."""
