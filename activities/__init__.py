"""Temporal activities of turncore: they act, the workflow decides."""

from .turn_activities import ModelResolver, TurnActivities, TurnDependencies

__all__ = ["ModelResolver", "TurnActivities", "TurnDependencies"]
