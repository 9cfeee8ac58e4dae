"""The console's one script (docs/design.md §19): the vendored htmx is the file its pin says
(the SHA-384 its <script> tag carries, as ``static/VENDORED.md`` records it, from the
npm tarball whose integrity the registry publishes), shipped with its licence, and the
pages let no other script run: no eval, no inline script or style, no other host."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from gateway.surfaces.console.assets import HTMX_INTEGRITY
from gateway.surfaces.console.guards import HEADERS

STATIC = Path(__file__).resolve().parents[3] / "gateway" / "surfaces" / "console" / "static"


def test_the_vendored_script_is_the_one_pinned() -> None:
    script = (STATIC / "htmx.min.js").read_bytes()
    digest = base64.b64encode(hashlib.sha384(script).digest()).decode()
    assert f"sha384-{digest}" == HTMX_INTEGRITY
    assert HTMX_INTEGRITY in (STATIC / "VENDORED.md").read_text()
    assert "Zero-Clause BSD" in (STATIC / "htmx.LICENSE").read_text()


def test_the_policy_lets_only_the_consoles_own_script_run() -> None:
    policy = dict(
        part.strip().split(" ", 1) for part in HEADERS["content-security-policy"].split(";")
    )
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["connect-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"


def test_every_page_names_the_script_with_its_hash_and_turns_eval_off() -> None:
    base = (STATIC.parent / "templates" / "base.html").read_text()
    assert 'integrity="{{ htmx_integrity }}"' in base
    assert '"allowEval": false' in base
    assert '"allowScriptTags": false' in base
    assert '"selfRequestsOnly": true' in base
