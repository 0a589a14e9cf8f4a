# The turncore image: the `turns` CLI and the worker (python -m turncore_temporal.worker).
# Used by compose.yaml; configure it with TEMPORAL_* / TURNS_* variables.
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY turncore ./turncore
COPY activities ./activities
COPY workflows ./workflows
COPY turnclient ./turnclient
RUN pip install --no-cache-dir '.[postgres]'
# Traces (OTEL_*) and payload encryption ([temporal] payload_key_env): the extras'
# dependencies on top (turncore itself is already there).
RUN pip install --no-cache-dir '.[otel,encryption]'

ENV TURNS_HOME=/turns \
    PYTHONUNBUFFERED=1
VOLUME ["/turns"]
CMD ["python", "-m", "turncore_temporal.worker"]
