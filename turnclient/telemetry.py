"""Traces and metrics for a turncore process: off unless configured.

Traces (``pip install turncore[otel]``) are on when the standard
OpenTelemetry variables ask for an exporter: ``OTEL_TRACES_EXPORTER`` other
than ``none``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``. Then a ``TracerProvider`` with a
batching OTLP exporter (``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``,
the default, or ``grpc``; every other ``OTEL_*`` setting is read by the
exporter itself) becomes the global one, and Temporal's
``TracingInterceptor`` goes on the client — so the workers made from that
client carry it too, and one trace runs from ``turns run`` through the
workflow into its activities. With none of that set nothing is imported and
no interceptor is installed.

Metrics: ``turns worker --metrics [HOST]:PORT`` gives the process a
Temporal ``Runtime`` whose telemetry serves a Prometheus endpoint at that
address. Temporal's own SDK metrics and turncore's (recorded through the
same runtime's meter, see ``turncore_temporal.activities.telemetry``) are
scraped from the one endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

_ON_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)

_configured = False


class TelemetryError(ValueError):
    """Tracing was asked for but cannot be set up (the extra is not installed)."""


def tracing_requested(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter) or any(env.get(v) for v in _ON_VARS)


def configure_tracing(env: Mapping[str, str] | None = None) -> bool:
    """Install the OTLP tracer provider once per process if the environment asks for it."""
    global _configured
    env = os.environ if env is None else env
    if _configured:
        return True
    if not tracing_requested(env):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TelemetryError(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
            "pip install 'turncore[otel]'"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": _service_name(env)}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(env)))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def _service_name(env: Mapping[str, str]) -> str:
    return env.get("OTEL_SERVICE_NAME") or "turncore"


def _exporter(env: Mapping[str, str]) -> Any:
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if exporter != "otlp":
        raise TelemetryError(
            f"OTEL_TRACES_EXPORTER={exporter!r}: turncore supports otlp or console"
        )
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol in ("http/protobuf", "http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    raise TelemetryError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use grpc or http/protobuf")


def tracing_interceptors(enabled: bool) -> list[Any]:
    """Temporal's tracing interceptor when tracing is on (it needs the SDK's contrib module)."""
    if not enabled:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def metrics_address(text: str) -> str:
    """``:9464`` → ``0.0.0.0:9464``; ``HOST:PORT`` as given."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics {text!r}: expected [HOST]:PORT, e.g. :9464")
    return f"{host or '0.0.0.0'}:{port}"


def metrics_runtime(address: str) -> Runtime:
    """A Temporal runtime serving Prometheus metrics at ``address`` (HOST:PORT)."""
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=address, durations_as_seconds=True)
        )
    )


__all__ = [
    "TelemetryError",
    "configure_tracing",
    "metrics_address",
    "metrics_runtime",
    "tracing_interceptors",
    "tracing_requested",
]
