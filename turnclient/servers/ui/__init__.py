"""The approval and live-view web UI: pages, a JSON API and Server-Sent Events.

``create_app`` builds the Starlette app for a runtime and a Temporal client;
``web_ui`` serves it with uvicorn inside a running asyncio program. The
``turns ui`` command (``turnclient.cli.serving``) and ``turns dev`` use both.
docs/api.md documents the endpoints; the pages are static HTML and one small
script shipped in ``static/`` (no build step).
"""

from ._app import BODY_TIMEOUT, DECISION_WAIT, MAX_BODY, UiContext, create_app
from ._security import COOKIE, TOKEN_HEADER, cookie_name
from ._server import (
    TOKEN_ENV,
    TOKENS_FILE_ENV,
    UiConfigError,
    WebUi,
    check_token,
    is_loopback,
    load_tokens,
    token_from,
    web_ui,
)
from ._tokens import Tokens, TokensFileError

__all__ = [
    "BODY_TIMEOUT",
    "COOKIE",
    "DECISION_WAIT",
    "MAX_BODY",
    "TOKENS_FILE_ENV",
    "TOKEN_ENV",
    "TOKEN_HEADER",
    "Tokens",
    "TokensFileError",
    "UiConfigError",
    "UiContext",
    "WebUi",
    "check_token",
    "cookie_name",
    "create_app",
    "is_loopback",
    "load_tokens",
    "token_from",
    "web_ui",
]
