from __future__ import annotations

import json
import logging

from gateway.ops.logs import FIELDS, JsonFormatter


def test_log_lines_are_json_with_fields() -> None:
    record = logging.LogRecord(
        "gateway.access", logging.INFO, __file__, 1, "request %s", ("x",), None
    )
    setattr(record, FIELDS, {"tenant": "acme", "status": 200})
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "request x"
    assert (line["logger"], line["level"], line["tenant"], line["status"]) == (
        "gateway.access",
        "info",
        "acme",
        200,
    )
    assert line["ts"].endswith("Z")
