"""Serving several checkpoints: which server the settings ask for, the Router they build, and
laya serve's reading of a routed request body (Laya 0.4.15's `laya/serve.py`).

One plain `--model SOURCE` serves that checkpoint alone (`single_source`). Anything else is a
`kime.laya.Router`, as `laya serve` runs one. That covers no `--model` at all (Laya's three
checkpoints), `--model NAME=SOURCE` entries, and `LAYA_EXTRA_MODELS`. A routed body may name a
`model`, `task`, `lang`, `lang_guess` and `min_confidence`. They are checked here in laya serve's
order, with its texts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .. import names
from ..laya.confidence import check_min_confidence
from ..laya.options import CallOptions
from ..laya.limits import CHOICE_OPTIONS
from .limits import (Body, budgets, check_batch_controls, check_languages,
                     check_model, check_shape, refuse)
from .settings import ConfigError, Settings

if TYPE_CHECKING:
    from ..laya.call import Routing
    from ..laya.hooks import PredictContext
    from ..laya.router import Router
    from ..laya.routing import RouteDecision

PUBLISHED_IDS: Dict[str, str] = names.PUBLISHED_IDS
"""The Hub ids of the published checkpoints, which pin one. The bundle id is not among them: a
client sending `convaiinnovations/laya` asks the Router to choose."""

names_a_source = names.written_as_source
"""Whether a `model` value is written as a path or a Hub repo id, not as a checkpoint name or a
Jev id such as `jev-1` (`kime.names.written_as_source`: the spelling alone, never the disk)."""


# --- which server ------------------------------------------------------------------------------

def split_entry(entry: str) -> Tuple[Optional[str], str]:
    """`NAME=SOURCE` as (NAME, SOURCE); anything else (a path, an alias, a repo id) as
    (None, entry). NAME follows Laya's checkpoint names, so `./a=b` and `hf://x` stay sources."""
    name, sep, source = entry.partition("=")
    if sep and source.strip() and names.is_checkpoint_name(name):
        return name.strip(), source.strip()
    return None, entry


def single_source(settings: Settings) -> Optional[str]:
    """The checkpoint a single plain `--model SOURCE` serves alone; None when the settings ask
    for a Router. Raises `ConfigError` for several entries of which one has no name."""
    entries = [split_entry(entry) for entry in settings.model]
    plain = [source for name, source in entries if name is None]
    if len(entries) == 1 and plain:
        return plain[0]
    if plain:
        raise ConfigError("--model %r: with several checkpoints, name each one (--model "
                          "NAME=SOURCE); a plain --model SOURCE serves one checkpoint alone"
                          % plain[0])
    return None


class _BoundMerge:
    """An `on_load` hook giving every engine the Router builds the server's `max_merge`."""

    def __init__(self, max_merge: int):
        self.max_merge = max_merge

    def on_load(self, ctx: PredictContext) -> None:
        ctx.agent.engine.scheduler.max_merge = self.max_merge


def build_router(settings: Settings) -> Router:
    """The Router the settings describe, preloaded as laya serve's `build_router` does. The
    registry is Laya's three, then `extra_models`, then `--model NAME=SOURCE` entries (a
    built-in's name re-points it). The preload covers `preload_models`, else the NAME=SOURCE
    checkpoints, else every registered one. Raises `ConfigError` for a configuration the
    Router refuses."""
    from ..laya.router import Router

    entries = [split_entry(entry) for entry in settings.model]
    if any(name is None for name, _ in entries):
        raise ConfigError("a Router serves named checkpoints: --model NAME=SOURCE")
    named = {str(name): source for name, source in entries}
    models: Dict[str, Any] = {name: tuple(source) if isinstance(source, list) else source
                              for name, source in settings.extra_models.items()}
    models.update(named)
    options: Dict[str, Any] = {
        "models": models, "device": settings.device,
        "auto_task_detection": settings.auto_task,
        "agent_kwargs": {"precision": settings.precision, "threads": settings.threads,
                         "answer_cache": settings.answer_cache}}
    if settings.max_loaded is not None:
        options["max_loaded"] = settings.max_loaded
    if settings.max_merge:
        options["hooks"] = [_BoundMerge(settings.max_merge)]
    try:
        router = Router(**options)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None
    if settings.default_model is not None:
        try:
            router.default = router.resolve(settings.default_model)
        except ValueError as e:
            raise ConfigError("invalid default_model %r: %s"
                              % (settings.default_model.strip(), e)) from None
    if settings.preload:
        names = settings.preload_models or list(named) or None
        try:
            keys = None if names is None else [router.resolve(name) for name in names]
        except ValueError as e:
            raise ConfigError("invalid preload_models: %s" % e) from None
        router.preload(keys)
    return router


# --- a routed request's body -------------------------------------------------------------------

@dataclass(frozen=True)
class Ask:
    """A routed request that passed laya serve's checks: what is asked (`body`) and the call's
    options, parsed once here (the routing controls, the token budgets, the confidence gate;
    a body cannot carry hooks)."""

    body: Body
    options: CallOptions

    def route_kwargs(self) -> Dict[str, Any]:
        """The controls `Router.route` takes, each only when the client sent it."""
        return self.options.given("model", "task", "lang", "lang_guess")


def check_routed_body(raw: Any, batch: bool, resolve: Callable[[Any], str],
                      max_token_budget: int, max_choice_options: int = CHOICE_OPTIONS
                      ) -> Ask:
    """laya serve's checks of a body for a Router, in its order: shape and sizes (at most
    `max_choice_options` in a choice), refusals, unpaired surrogates, the model named, the
    token budgets, the language hints, the confidence gate, then the batch controls. An
    unknown `task` is left to `Router.route`."""
    states, questions = check_shape(raw, batch, max_choice_options)
    model = resolve_model(raw.get("model"), resolve)
    return _controls(raw, batch, states, questions, model, max_token_budget)


def check_single_body(raw: Any, batch: bool, served: str, max_token_budget: int,
                      max_choice_options: int = CHOICE_OPTIONS) -> Ask:
    """The same checks for the one checkpoint `served`, in the same order: the `model` named
    may be `served`, the bundle id or a name that pins nothing (`limits.check_model`); the
    language hints and the confidence gate are taken as a Router takes them."""
    states, questions = check_shape(raw, batch, max_choice_options)
    check_model(raw.get("model"), served)
    return _controls(raw, batch, states, questions, None, max_token_budget)


def _controls(raw: Dict[str, Any], batch: bool, states: List[Any], questions: Any,
              model: Optional[str], max_token_budget: int) -> Ask:
    token_budgets = budgets(raw, max_token_budget)
    check_languages(raw)
    min_confidence = None
    if raw.get("min_confidence") is not None:
        try:
            min_confidence = check_min_confidence(raw["min_confidence"])
        except ValueError as e:
            raise refuse(422, str(e)) from None
    if batch:
        check_batch_controls(raw)
    body = Body(states=states, questions=questions,
                batch_size=raw.get("batch_size") if batch else None)
    return Ask(body=body, options=CallOptions(
        model=model, task=raw.get("task"), lang=raw.get("lang"), lang_guess=raw.get("lang_guess"),
        min_confidence=min_confidence, max_len=token_budgets["max_len"],
        head_max_len=token_budgets["head_max_len"]))


def resolve_model(value: Any, resolve: Callable[[Any], str]) -> Optional[str]:
    """A body's `model` as laya serve reads it: the checkpoint it pins, or None to let the
    Router choose. A served name, an alias or a published Hub id pins. Nothing, the bundle id
    and any other name (a Jev id such as `jev-1`) route. A path or an unknown repo id is a 422
    listing what is served: answering it with another checkpoint would be a wrong answer."""
    if not value:
        return None
    text = str(value).strip()
    published = names.published_builtin(text)
    if published is not None:
        return published
    if names.is_bundle_id(text):
        return None
    try:
        return resolve(value)
    except ValueError as e:
        if names_a_source(text):
            raise refuse(422, "%s, or omit model to let the router choose" % e) from None
        return None


def route_all(router: Routing, ask: Ask) -> List[RouteDecision]:
    """Every state's `RouteDecision`, in order. A control the Router refuses (an unknown
    `task`) is laya serve's 422 with the Router's text."""
    try:
        return [router.route(state, ask.body.questions, **ask.route_kwargs())
                for state in ask.body.states]
    except ValueError as e:
        raise refuse(422, str(e)) from None
