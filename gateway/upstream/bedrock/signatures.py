"""What an AWS error may quote of the request it refuses: its SigV4 signature."""

from __future__ import annotations

import re

# A SigV4 ``Authorization`` value, or a signature alone: an AWS error may quote the
# request's (a signature is its keys' work over that request: valid for minutes).
_SIGNED = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=[^\s,]*(?:,\s*SignedHeaders=[^\s,]*)?(?:,\s*Signature=\w*)?"
    r"|(?<=Signature=)\w{16,}|(?<=X-Amz-Signature=)\w{16,}",
    re.IGNORECASE,
)


def unsigned(said: str) -> str:
    """An AWS message without any request signature it quotes (the keys themselves are
    secrets every sink redacts: ``AwsSigner``)."""
    return _SIGNED.sub("[redacted]", said)
