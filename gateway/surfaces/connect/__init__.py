"""A user's connections to the services their tools act on (docs/design.md §18): the
keyless connect pages and their links (``links``), and the application's routes for a
user's connections (``connections``)."""
