"""The library: ``Turns`` (``turns``), the Temporal client API ``TurnClient``
(``api``), conversations, listing, summaries, cost and the turn view the web
UI serves. Import the public names from ``turnclient``."""
