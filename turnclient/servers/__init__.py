"""The servers: the web UI (``ui``, ``turns ui``) and the codec server
(``codec_server``, ``turns codec-server``)."""
