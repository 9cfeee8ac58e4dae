"""The ``toolgate`` command: serve, check, tools, example-tools."""
