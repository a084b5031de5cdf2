"""Toolgate approvals."""
