"""Runtime wiring: the configuration (``config``), the connection to Temporal
(``connection``: a ``Runtime``, ``TEMPORAL_ADDRESS`` or the embedded server),
the embedded and dev servers (``embedded``, ``devserver``), leaving a process
(``process``), opening turn storage (``storage``), the payload codec
(``codec``), telemetry (``telemetry``) and the live-delta spool
(``deltaspool``)."""
