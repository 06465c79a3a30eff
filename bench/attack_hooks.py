"""Schemathesis hooks for the attack run: `POST /import` bodies go on the wire as the JSONL text they are."""

from __future__ import annotations

import schemathesis

schemathesis.serializer.alias("application/x-ndjson", "text/plain")
