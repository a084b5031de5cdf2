"""Runnable examples: the services and databases the shipped tools.d declarations use."""
