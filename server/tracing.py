"""Whether this process traces.

Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and
OTEL_SDK_DISABLED is not true), or when the app is built with a tracer provider. Off, nothing of
OpenTelemetry is imported, the SERVER span's middleware (`server.middleware.server_span`) is not
installed and no span object is ever made: handlers check `app_state.get(TRACING_KEY)` once and
take their plain path. The spans themselves are made in server/otel.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

if TYPE_CHECKING:
    from taguru_server.server.otel import Tracing

log = structlog.get_logger("taguru.tracing")

TRACING_KEY: web.AppKey[Tracing] = web.AppKey("tracing")
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def wanted(env: Mapping[str, str]) -> bool:
    """An OTLP endpoint is configured and the SDK is not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_for(env: Mapping[str, str], provider: Any = None) -> Tracing | None:
    """The app's tracing: over a given provider (owned by the caller), else one from the OTEL_*
    variables (owned by the app), else None."""
    if provider is None and not wanted(env):
        return None
    try:
        from taguru_server.server.otel import Tracing, make_provider
    except ImportError as exc:  # an install without the OpenTelemetry packages: say so once, serve untraced
        log.warning(
            "tracing.unavailable",
            message="an OTLP endpoint is set but the OpenTelemetry SDK cannot be imported "
            "(install opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http); tracing stays off",
            missing=exc.name,
        )
        return None

    if provider is not None:
        return Tracing(provider, owned=False)
    return Tracing(make_provider(), owned=True)
