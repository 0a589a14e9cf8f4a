"""Traces and metrics for a turncore process: off unless configured.

Traces (the ``otel`` extra) are on when the standard
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
address; ``--metrics otlp`` pushes them over OTLP to the collector the
``OTEL_EXPORTER_OTLP_*`` variables name, every ``OTEL_METRIC_EXPORT_INTERVAL``. Temporal's own SDK metrics and turncore's (recorded through the
same runtime's meter, see ``turncore_temporal.activities.telemetry``) are
scraped from the one endpoint.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    OpenTelemetryConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from turnclient.runtime.extras import install_hint

_ON_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)

_configured = False
_provider: Any = None
"""The tracer provider ``configure_tracing`` installed, so the process can flush it."""
_exporter_in_use: Any = None
"""Its span exporter, so a flush at exit can stop the exporter's retries."""

EXIT_FLUSH_SECONDS = 2.0
"""How long a process leaving waits for its last spans to reach the collector. A
collector that answers takes milliseconds; one that is down or silent would hold the
process for the exporter's whole timeout (10 s, ``OTEL_EXPORTER_OTLP_TIMEOUT``) of
retries with backoff, after the turn itself was done and in its file."""


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
    global _configured, _provider
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
            f"{install_hint('otel')}"
        ) from None
    global _exporter_in_use
    exporter = _exporter(env)
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": _service_name(env)}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    except ValueError as exc:  # an OTEL_BSP_* setting out of range
        raise TelemetryError(f"OpenTelemetry settings: {exc}") from None
    trace.set_tracer_provider(provider)
    _provider = provider
    _exporter_in_use = exporter
    _configured = True
    return True


def shutdown_tracing(timeout: float = EXIT_FLUSH_SECONDS) -> None:
    """Export the spans still batched and stop the exporter (a process leaving with
    ``os._exit`` skips the provider's own exit hook; see ``turnclient.runtime.process``).

    Waits at most ``timeout`` seconds: past it the exporter is told to stop, which ends
    its retries, and the spans still unsent are dropped (the turn is in its file; a
    trace is not worth holding a command or a worker's exit for a collector that is
    down).
    """
    provider, exporter = _provider, _exporter_in_use
    if provider is None:
        return
    flush = threading.Thread(target=provider.shutdown, name="turncore-span-flush", daemon=True)
    flush.start()
    flush.join(timeout)
    if flush.is_alive() and exporter is not None:
        exporter.shutdown()  # wakes the exporter from its backoff; it gives the batch up
        flush.join(0.5)


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


OTLP = "otlp"


def metrics_address(text: str) -> str:
    """``:9464`` → ``0.0.0.0:9464``; ``localhost:PORT`` → ``127.0.0.1:PORT``; an IP
    literal (IPv6 in brackets) as given; ``otlp`` as it is.

    The Temporal runtime binds a socket address and resolves no names, so anything it
    could not parse is refused here, naming the flag, rather than inside the runtime.
    """
    if text == OTLP:
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics {text!r}: expected [HOST]:PORT (e.g. :9464) or otlp")
    if host == "":
        host = "0.0.0.0"
    elif host == "localhost":
        host = "127.0.0.1"
    elif not _ip_literal(host):
        raise ValueError(
            f"--metrics {text!r}: HOST must be an IP address (127.0.0.1, [::1], 0.0.0.0) "
            "or localhost"
        )
    return f"{host}:{port}"


def _ip_literal(host: str) -> bool:
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    return bracketed == (address.version == 6)


def core_logging() -> LoggingConfig:
    """The SDK core's log lines go to Python logging (``temporalio.core``), never straight to
    the console, where a warning would land in the middle of a command's ``--json``."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )


def install_default_runtime() -> None:
    """Make the process's default Temporal runtime forward core logs (see ``core_logging``)."""
    Runtime.set_default(
        Runtime(telemetry=TelemetryConfig(logging=core_logging())), error_if_already_set=False
    )


def metrics_runtime(address: str, env: Mapping[str, str] | None = None) -> Runtime:
    """A Temporal runtime exporting metrics: Prometheus at ``address`` (HOST:PORT),
    or, for ``otlp``, pushed over OTLP where the ``OTEL_*`` variables say."""
    if address == OTLP:
        telemetry = TelemetryConfig(logging=core_logging(), metrics=_otlp_metrics(env))
    else:
        telemetry = TelemetryConfig(
            logging=core_logging(),
            metrics=PrometheusConfig(bind_address=address, durations_as_seconds=True),
        )
    try:
        return Runtime(telemetry=telemetry)
    except ValueError as exc:  # the port is taken, the collector URL unusable, ...
        raise TelemetryError(f"--metrics {address}: cannot export metrics: {exc}") from None


def _otlp_metrics(env: Mapping[str, str] | None) -> OpenTelemetryConfig:
    env = os.environ if env is None else env
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("grpc", "http/protobuf", "http"):
        raise TelemetryError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use grpc or http/protobuf")
    http = protocol != "grpc"
    endpoint = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")  # used as it is (spec)
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if not base:
            raise TelemetryError(
                "--metrics otlp needs OTEL_EXPORTER_OTLP_ENDPOINT "
                "(or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)"
            )
        endpoint = base.rstrip("/") + "/v1/metrics" if http else base
    headers = {}
    raw = env.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS")
    for item in (raw or "").split(","):
        key, sep, value = item.partition("=")
        if item.strip() and not sep:
            raise TelemetryError(
                "OTEL_EXPORTER_OTLP_HEADERS is key=value pairs separated by commas"
            )
        if sep:
            headers[unquote(key.strip())] = unquote(value.strip())
    interval = env.get("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    if not interval.isdigit() or int(interval) == 0:
        raise TelemetryError(f"OTEL_METRIC_EXPORT_INTERVAL={interval!r}: milliseconds, above 0")
    return OpenTelemetryConfig(
        url=endpoint,
        headers=headers,
        metric_periodicity=timedelta(milliseconds=int(interval)),
        durations_as_seconds=True,
        http=http,
    )


__all__ = [
    "TelemetryError",
    "configure_tracing",
    "metrics_address",
    "metrics_runtime",
    "tracing_interceptors",
    "tracing_requested",
]
