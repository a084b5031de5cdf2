"""The ``toolgate`` subcommands, grouped (``gateway/cli.py`` holds the parser and ``main``)."""
