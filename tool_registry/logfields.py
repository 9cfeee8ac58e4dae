"""The ``extra`` key under which log records carry their structured fields."""

FIELDS = "toolgate"
