"""Temporal workflows of turncore."""

from .turn import SEARCH_ATTRIBUTES, TurnWorkflow, TurnWorkflowInput

__all__ = ["SEARCH_ATTRIBUTES", "TurnWorkflow", "TurnWorkflowInput"]
