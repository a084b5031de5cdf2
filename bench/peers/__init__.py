"""Toolgate against peer gateways, side by side (``make bench-peers``): ``run.py``."""
