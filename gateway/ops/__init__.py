"""Operations, at the bottom of the service: metrics, log lines, redaction, the
garbage collector's settings. Everything above may report here; nothing here reads
a request."""
