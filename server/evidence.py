"""POST /contexts/{name}/evidence: request decoding and the stage-graph run."""

from __future__ import annotations

from typing import Any

from server.handlers import Call
from store.errors import ApiError


async def evidence(call: Call) -> Any:
    raise ApiError("internal", "the evidence endpoint is not available yet")
