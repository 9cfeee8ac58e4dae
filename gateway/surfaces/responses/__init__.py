"""``POST /v1/responses``, stored responses and conversations: parsing, items, rendering,
the event writer, fitting long conversations."""
