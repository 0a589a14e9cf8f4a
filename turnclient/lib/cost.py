"""Estimated cost of model calls, turns and sessions — derived, never stored.

Prices come from ``genai-prices`` (a maintained table of providers' public
prices, matched by provider and model name) unless ``turns.toml`` names a
price for the provider: ``[prices.PROVIDER]`` with ``input_per_mtok`` and
``output_per_mtok`` (USD per million tokens; ``cached_input_per_mtok``
optional) and ``[prices.PROVIDER.models.MODEL]`` for one model of it. A
private or local model has no public price, so without an override its
cost is unknown (``None``), never guessed as zero.

The turn's events stay exactly the spec's: a cost is computed from the
recorded usage whenever it is shown (``turns show``, the ``--json``
outcomes, traces) and can change when the price table is updated.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from turncore.events import ModelDescriptor, TurnUsage
from turncore.reducer import TurnState

if TYPE_CHECKING:  # a type only: pricing a turn loads no model adapter registry
    from turncore.model import ProviderConfig

CURRENCY = "USD"
_MTOK = Decimal(1_000_000)
_GENAI_PROVIDERS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


class PriceConfigError(ValueError):
    """A ``[prices]`` table is malformed; the message names the key."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None = None

    def cost(self, usage: TurnUsage) -> Decimal:
        inp = Decimal(usage.input_tokens or 0)
        cached = Decimal(usage.cached_input_tokens or 0)
        cached_rate = (
            self.cached_input_per_mtok
            if self.cached_input_per_mtok is not None
            else self.input_per_mtok
        )
        # input_tokens includes the cached ones (as providers report them).
        fresh = max(inp - cached, Decimal(0))
        out = Decimal(usage.output_tokens or 0)
        return (
            fresh * self.input_per_mtok + cached * cached_rate + out * self.output_per_mtok
        ) / _MTOK


@dataclass(frozen=True)
class ProviderPrice:
    """``[prices.PROVIDER]``: a price for all its models, and per-model prices."""

    default: Price | None = None
    models: dict[str, Price] = field(default_factory=dict)

    def for_model(self, model: str) -> Price | None:
        return self.models.get(model, self.default)

    @classmethod
    def from_table(cls, where: str, table: Mapping[str, Any]) -> ProviderPrice:
        unknown = sorted(set(table) - {*_PRICE_KEYS, "models"})
        if unknown:
            raise PriceConfigError(f"{where}: unknown key {', '.join(unknown)}")
        default = _price(where, table) if set(table) - {"models"} else None
        models_table = table.get("models", {})
        if not isinstance(models_table, dict):
            raise PriceConfigError(f"{where}.models must be a table of model names")
        models = {}
        for name, sub in models_table.items():
            if not isinstance(sub, dict):
                raise PriceConfigError(f"{where}.models.{name} must be a table")
            extra = sorted(set(sub) - set(_PRICE_KEYS))
            if extra:
                raise PriceConfigError(f"{where}.models.{name}: unknown key {', '.join(extra)}")
            models[name] = _price(f"{where}.models.{name}", sub)
        if default is None and not models:
            raise PriceConfigError(f"{where}: give input_per_mtok and output_per_mtok, or models")
        return cls(default, models)


_PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")


def _price(where: str, table: Mapping[str, Any]) -> Price:
    def number(key: str, required: bool) -> Decimal | None:
        value = table.get(key)
        if value is None:
            if required:
                raise PriceConfigError(f"{where}.{key} is required (USD per million tokens)")
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PriceConfigError(f"{where}.{key} must be a number (USD per million tokens)")
        try:
            d = Decimal(str(value))
        except InvalidOperation:
            raise PriceConfigError(f"{where}.{key} must be a number") from None
        if d < 0 or not d.is_finite():
            raise PriceConfigError(f"{where}.{key} must be a finite number >= 0")
        return d

    inp = number("input_per_mtok", True)
    out = number("output_per_mtok", True)
    assert inp is not None and out is not None
    return Price(inp, out, number("cached_input_per_mtok", False))


@dataclass(frozen=True)
class Estimate:
    amount: Decimal
    source: str
    """``turns.toml`` (an override) or ``genai-prices``."""

    def to_json(self) -> dict[str, Any]:
        return {"currency": CURRENCY, "amount": float(round(self.amount, 8)), "source": self.source}


class Pricer:
    """Prices usage for the configured providers; ``None`` where no price is known."""

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        overrides: Mapping[str, ProviderPrice] | None = None,
    ) -> None:
        self._providers = dict(providers)
        self._overrides = dict(overrides or {})

    def call_cost(self, model: ModelDescriptor, usage: TurnUsage | None) -> Estimate | None:
        if usage is None:
            return None
        override = self._overrides.get(model.provider)
        if override is not None:
            price = override.for_model(model.model)
            if price is not None:
                return Estimate(price.cost(usage), "turns.toml")
        return self._table_cost(model, usage)

    def _table_cost(self, model: ModelDescriptor, usage: TurnUsage) -> Estimate | None:
        config = self._providers.get(model.provider)
        if config is None or config.kind not in _GENAI_PROVIDERS:
            return None  # scripted, or a provider this process does not know
        from genai_prices import Usage, calc_price

        from turncore.model.registry import DEFAULT_BASE_URLS

        base_url = config.base_url
        custom = base_url is not None and base_url != DEFAULT_BASE_URLS.get(config.kind)
        usage_in = Usage(
            input_tokens=usage.input_tokens or 0,
            cache_read_tokens=usage.cached_input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if custom:
                    # An OpenAI-compatible server elsewhere is priced by its URL
                    # (OpenRouter, Groq, …) or not at all — never as OpenAI.
                    result = calc_price(usage_in, model.model, provider_api_url=base_url)
                else:
                    result = calc_price(
                        usage_in, model.model, provider_id=_GENAI_PROVIDERS[config.kind]
                    )
        except LookupError:
            return None
        return Estimate(Decimal(result.total_price), "genai-prices")

    def sum(self, estimates: Iterable[Estimate | None]) -> Estimate | None:
        """The total, or None if any part is unknown (a partial sum would understate)."""
        total = Decimal(0)
        sources: set[str] = set()
        for e in estimates:
            if e is None:
                return None
            total += e.amount
            sources.add(e.source)
        if not sources:
            return None
        return Estimate(total, "+".join(sorted(sources)))

    def turn_costs(self, state: TurnState) -> tuple[Estimate | None, list[Estimate | None]]:
        """The turn's cost and each model call's (calls without usage cost nothing).

        A call's cost includes the summary call it ran for the context budget
        (``contextBudget.summary`` with its ``model`` and ``usage``,
        ``turncore.budget``): its own recorded call, paid by this turn."""
        model = state.definition.agent.resolved.model
        calls: list[Estimate | None] = []
        priced: list[Estimate | None] = []
        for c in state.model_calls:
            own = self.call_cost(model, c.usage)
            summary = _summary_usage(c.request.parameters)
            if summary is not None:
                paid = [self.call_cost(*summary)]
                own = self.sum([own, *paid] if c.usage is not None else paid)
            calls.append(own)
            if c.usage is not None or summary is not None:
                priced.append(own)
        if not priced:
            return (Estimate(Decimal(0), "no usage") if not state.model_calls else None), calls
        return self.sum(priced), calls


def priced_providers(state: TurnState) -> set[str]:
    """The providers whose prices ``Pricer.turn_costs`` looks up for ``state``: the
    turn's model's, and those of the summary calls its requests record."""
    found = {state.definition.agent.resolved.model.provider}
    for c in state.model_calls:
        summary = _summary_usage(c.request.parameters)
        if summary is not None:
            found.add(summary[0].provider)
    return found


def _summary_usage(parameters: Mapping[str, Any]) -> tuple[ModelDescriptor, TurnUsage] | None:
    """The model and usage of the summary call a request's record says it ran, if any."""
    budget = parameters.get("contextBudget")
    summary = budget.get("summary") if isinstance(budget, dict) else None
    if not isinstance(summary, dict) or not isinstance(summary.get("usage"), dict):
        return None
    provider, _, name = str(summary.get("model", "")).partition("/")
    if not provider or not name:
        return None
    return ModelDescriptor(provider=provider, model=name), TurnUsage.model_validate(
        summary["usage"]
    )


def known_window(config: ProviderConfig | None, model: ModelDescriptor) -> int | None:
    """The model's context window in tokens as the price table knows it; None if it
    does not (a scripted or private model, a server elsewhere it does not list)."""
    if config is None or config.kind not in _GENAI_PROVIDERS:
        return None
    from genai_prices import Usage, calc_price

    from turncore.model.registry import DEFAULT_BASE_URLS

    base_url = config.base_url
    custom = base_url is not None and base_url != DEFAULT_BASE_URLS.get(config.kind)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if custom:
                found = calc_price(Usage(), model.model, provider_api_url=base_url)
            else:
                found = calc_price(Usage(), model.model, provider_id=_GENAI_PROVIDERS[config.kind])
    except LookupError:
        return None
    window = found.model.context_window
    return window if isinstance(window, int) and window > 0 else None


# ---------------------------------------------------------------- reports


def _money(e: Estimate | None) -> str:
    return "unknown" if e is None else f"~${e.amount:.6f}".rstrip("0").rstrip(".")


def turn_report(pricer: Pricer, state: TurnState) -> dict[str, Any]:
    """``{"currency", "turn", "calls"}``: the JSON of a turn's estimated cost."""
    total, calls = pricer.turn_costs(state)
    return {
        "currency": CURRENCY,
        "turn": total.to_json() if total is not None else None,
        "calls": [
            {"modelCallIndex": c.index, "cost": e.to_json() if e is not None else None}
            for c, e in zip(state.model_calls, calls, strict=True)
        ],
    }


def session_report(pricer: Pricer, session_id: str, states: Iterable[TurnState]) -> dict[str, Any]:
    """The session's total over its turns (unknown if any turn's cost is)."""
    totals = [pricer.turn_costs(s)[0] for s in states]
    total = pricer.sum(totals) if totals else None
    return {
        "sessionId": session_id,
        "turns": len(totals),
        "cost": total.to_json() if total is not None else None,
    }


def cost_lines(pricer: Pricer, state: TurnState, session: dict[str, Any] | None) -> list[str]:
    """``turns show``'s cost block."""
    total, calls = pricer.turn_costs(state)
    source = f" ({total.source})" if total is not None else " (no price known for this model)"
    lines = [f"cost     {_money(total)}{source}, estimated; not part of the turn's log"]
    priced = [
        f"{c.index}: {_money(e)}" for c, e in zip(state.model_calls, calls, strict=True) if c.usage
    ]
    if priced:
        lines.append(f"         per model call: {', '.join(priced)}")
    summaries = [
        f"turn {budget['summary'].get('turnId')} (for call {c.index})"
        for c in state.model_calls
        if _summary_usage(c.request.parameters) is not None
        and isinstance(budget := c.request.parameters.get("contextBudget"), dict)
    ]
    if summaries:
        lines.append(
            f"         with the summary calls of the context budget: {', '.join(summaries)}"
        )
    if session is not None:
        amount = session["cost"]
        shown = (
            "unknown" if amount is None else _money(Estimate(Decimal(str(amount["amount"])), ""))
        )
        lines.append(
            f"         session {session['sessionId']}: {shown} over {session['turns']} turn(s)"
        )
    return lines


__all__ = [
    "CURRENCY",
    "Estimate",
    "Price",
    "PriceConfigError",
    "Pricer",
    "ProviderPrice",
    "cost_lines",
    "priced_providers",
    "session_report",
    "turn_report",
]
