"""CrewAI on kime: laya 0.4.15's `laya.integrations.crewai` (`LayaCrewRouter`, `LayaTaskGuard`,
`LayaTaskGuardError`, `CrewRouteDecision`), with laya's constructor arguments, defaults, outputs
and refusals.

`LayaCrewRouter` delegates a task to one crew member with a single `choice` decision over the
members' roles and goals; `LayaTaskGuard` screens a task with the guard preset (or the caller's
questions) and raises, filters or annotates. Both answer on `agent=` (a `kime.load` agent or a
`kime.Router`), on a laya-serve-compatible server (`base_url=`/`api_key=`), or on the shared
default Router (`kime.integrations.caller`). A reply that does not answer what was asked is
refused: a pick outside the crew, or a guard question unanswered, never passes.

laya reads a CrewAI `Agent`/`Task` only through attributes (`role`, `goal`, `description`,
`expected_output`, `agent`), so dicts, strings and plain objects route the same way, and nothing
here imports crewai (its import takes seconds): constructing either class only checks that it is
installed, and without it is an ImportError naming `pip install 'kime[crewai]'`, as is
`CrewAgent`/`CrewTask` (crewai's `Agent`/`Task`, which laya's module exposes under those names).

Where kime differs from laya, on purpose: a `LayaTaskGuard` handed to CrewAI as a task guardrail
(`crewai.Task(guardrail=guard)`) works. CrewAI 1.15 calls a guardrail with the task's
`TaskOutput` and wants `(passed, value)` back, and refuses at `Task(...)` a guardrail whose return
annotation is anything else; laya's `__call__` (annotated `-> Any`, returning the task) fails both.
kime's `__call__` answers CrewAI's protocol for a CrewAI output and is laya's `screen` otherwise.
"""
from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .caller import Controlled, takes_controls
from .errors import LayaLowConfidenceError
from .reading import choose, screen

__all__ = ["LayaCrewRouter", "LayaTaskGuard", "LayaTaskGuardError", "CrewRouteDecision",
           "LayaLowConfidenceError"]

INSTALL_HINT = "pip install 'kime[crewai]'"

DEFAULT_INSTRUCTIONS = "Which agent in the crew is best qualified to execute this task?"
DEFAULT_REJECTION = "This task cannot be executed because it violates safety guidelines."

# CrewAI's output classes, by module: a guardrail is handed one of these. Looked up in
# sys.modules, so an object can only be one when crewai is already imported (nothing to import).
_CREW_OUTPUTS = (("crewai.tasks.task_output", "TaskOutput"),
                 ("crewai.lite_agent_output", "LiteAgentOutput"))


def _missing() -> ImportError:
    return ImportError("CrewAI is not installed: %s (crewai>=1.15,<1.16)" % INSTALL_HINT)


def require_crewai() -> None:
    """Raise an ImportError naming the extra when crewai is not installed. Looks the package up
    without importing it (importing crewai takes seconds; nothing here needs its code)."""
    if importlib.util.find_spec("crewai") is None:
        raise _missing()


def _crewai() -> Any:
    require_crewai()
    return importlib.import_module("crewai")


def __getattr__(name: str) -> Any:
    # laya's module exposes crewai's classes as CrewAgent / CrewTask.
    if name in ("CrewAgent", "CrewTask"):
        return getattr(_crewai(), name[len("Crew"):])
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class LayaTaskGuardError(ValueError):
    """A task that breaks the guard's policy: `violations` per question, and the `raw_decision`."""

    def __init__(self, message: str, violations: Dict[str, Any],
                 raw_decision: Dict[str, Any]) -> None:
        super().__init__(message)
        self.violations = violations
        self.raw_decision = raw_decision


@dataclass
class CrewRouteDecision:
    """Where `LayaCrewRouter.route` sent a task: the member, its index and role, the routing
    confidence, a sentence saying why, and the decision it came from."""

    agent: Any
    agent_index: int
    role: str
    confidence: float
    reason: str
    raw_decision: Dict[str, Any]


def task_text(task: Any) -> str:
    """The text a task is decided on, read as laya reads it: a string as is; an object with a
    `description` (a CrewAI `Task`), or a dict's `description`/`task`/`prompt`, followed by
    " (Expected output: ...)" when it has one; anything else as `str()`."""
    if isinstance(task, str):
        return task
    if hasattr(task, "description"):
        text = str(task.description)
        expected = getattr(task, "expected_output", "")
        return "%s (Expected output: %s)" % (text, expected) if expected else text
    if isinstance(task, dict):
        # laya's nested defaults: the fallbacks apply only when a key is absent, not when empty.
        desc = task.get("description", task.get("task", task.get("prompt", str(task))))
        expected = task.get("expected_output", "")
        return "%s (Expected output: %s)" % (desc, expected) if expected else str(desc)
    return str(task)


def member_role(member: Any, index: int) -> str:
    """A crew member's role: a string is its own role; else `role`, or "Agent <index>"."""
    if isinstance(member, str):
        return member
    role = member.get("role") if isinstance(member, dict) else getattr(member, "role", None)
    return str(role or "Agent %d" % index)


def member_criteria(members: Sequence[Any]) -> Dict[str, str]:
    """The delegation question's options: `agent_<i>` -> "role: goal" (the role alone when the
    member has no goal)."""
    criteria: Dict[str, str] = {}
    for i, member in enumerate(members):
        role = member_role(member, i)
        goal = getattr(member, "goal", None)
        if isinstance(member, dict):
            goal = member.get("goal", goal)
        criteria["agent_%d" % i] = "%s: %s" % (role, goal) if goal else str(role)
    return criteria


class LayaCrewRouter(Controlled):
    """Delegates a CrewAI task to the best-qualified crew member in one forward pass.

    The task's text is the state; the members' "role: goal" lines are the options of one
    `choice` question. Below `confidence_threshold` (off at 0.0) the task goes to
    `fallback_agent_index` when set, else raises `LayaLowConfidenceError` when
    `raise_on_low_confidence`, else keeps the model's choice.
    """

    @takes_controls()
    def __init__(self, instructions: str = DEFAULT_INSTRUCTIONS,
                 confidence_threshold: float = 0.0, fallback_agent_index: Optional[int] = None,
                 raise_on_low_confidence: bool = False, *, controls: Dict[str, Any]) -> None:
        require_crewai()
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_agent_index = fallback_agent_index
        self.raise_on_low_confidence = raise_on_low_confidence
        # `task` among the controls is core's checkpoint selector, not a CrewAI task.
        self._keep_controls(controls)

    def route(self, task: Any, agents: Sequence[Any]) -> CrewRouteDecision:
        """Choose the member of `agents` (CrewAI agents, dicts or role strings) for `task`; a
        reply that picks none of them is refused."""
        if not agents:
            raise ValueError("No agents provided to route task to.")
        text = task_text(task)
        criteria = member_criteria(agents)
        res = self._decide(text, {"delegation": {"type": "choice",
                                                 "instructions": self.instructions,
                                                 "criteria": criteria}})
        threshold = self.confidence_threshold
        index, chosen, fell_back = choose(
            res, "delegation", list(criteria), self.caller.where, threshold,
            self.fallback_agent_index, self.raise_on_low_confidence,
            "Routing confidence %.3f below threshold %.3f for task: %r", text)
        member = agents[index]
        role = member_role(member, index)
        reason = ("Delegated to fallback agent '%s' because routing confidence (%.3f) was below "
                  "threshold (%.3f)." % (role, chosen.shown, threshold) if fell_back else
                  "Delegated to '%s' via Laya System 1 decision (confidence: %.3f)."
                  % (role, chosen.shown))
        return CrewRouteDecision(member, index, role, chosen.shown, reason, res)

    def delegate(self, task: Any, agents: Sequence[Any]) -> Any:
        """Route `task`, set its `agent` to the chosen member where it can, return the member."""
        decision = self.route(task, agents)
        _assign(task, decision.agent)
        return decision.agent

    async def aroute(self, task: Any, agents: Sequence[Any]) -> CrewRouteDecision:
        """`route` on a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.route, task, agents)

    async def adelegate(self, task: Any, agents: Sequence[Any]) -> Any:
        """`delegate` on a worker thread."""
        decision = await self.aroute(task, agents)
        _assign(task, decision.agent)
        return decision.agent


def _assign(task: Any, member: Any) -> None:
    if hasattr(task, "agent"):
        try:
            task.agent = member
        except Exception:
            pass  # laya leaves a task that refuses the member as it was


class LayaTaskGuard(Controlled):
    """Screens a task (or an agent's input) for jailbreaks, injections and policy violations.

    A `noul` answer at or above `threshold` is a violation, and so is a `score` answer whose
    upper half of levels holds at least `threshold` of the probability. `action`: "raise"
    (`LayaTaskGuardError`), "filter" (the description becomes `rejection_message`) or "annotate"
    (a `guardrail` entry with `passed`, `violations` and `answers`). As a CrewAI task guardrail
    (`crewai.Task(guardrail=guard)`), see `__call__`.
    """

    @takes_controls()
    def __init__(self, questions: Optional[Dict[str, Any]] = None, action: str = "raise",
                 rejection_message: str = DEFAULT_REJECTION, threshold: float = 0.5, *,
                 controls: Dict[str, Any]) -> None:
        require_crewai()
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be a probability in [0, 1]; got %r" % (threshold,))
        self.questions = questions
        self.action = action
        self.rejection_message = rejection_message
        self.threshold = threshold
        # CrewAI's guardrail event reads the guardrail's source (inspect.getsource), which a
        # callable object has none of; getsource unwraps `__wrapped__` first, so it reads
        # `__call__`'s. Without this, `Task(guardrail=guard)` fails once the task runs.
        self.__wrapped__ = self.__call__
        self._keep_controls(controls)

    def _default_questions(self) -> Dict[str, Any]:
        from ..laya.presets import guard_questions
        return dict(guard_questions())

    def _violations(self, text: str) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
        """(violations, answers, raw decision) for `text`."""
        questions = self.questions if self.questions is not None else self._default_questions()
        res = self._decide(text, questions)
        found, answers = screen(res, questions, self.threshold, self.caller.where)
        return found, answers, res

    def _error(self, violations: Dict[str, Any], res: Dict[str, Any]) -> LayaTaskGuardError:
        return LayaTaskGuardError("Laya task guardrail policy violation detected: %s"
                                  % list(violations), violations=violations, raw_decision=res)

    def screen(self, task: Any) -> Any:
        """Screen `task` (a CrewAI `Task`, a dict or a string) and act on what was found: raise,
        or return the task filtered, annotated or unchanged."""
        violations, answers, res = self._violations(task_text(task))
        safe = not violations
        if not safe and self.action == "raise":
            raise self._error(violations, res)
        if not safe and self.action == "filter":
            if hasattr(task, "description"):
                task.description = self.rejection_message
                return task
            if isinstance(task, dict):
                return dict(task, description=self.rejection_message)
            return self.rejection_message
        if self.action == "annotate":
            meta = {"passed": safe, "violations": violations, "answers": answers}
            if hasattr(task, "description"):
                task.guardrail = meta
                return task
            if isinstance(task, dict):
                return dict(task, guardrail=meta)
            return {"task": task, "guardrail": meta}
        return task

    # No return annotation on purpose: CrewAI refuses a guardrail annotated other than
    # Tuple[bool, Any], and under postponed annotations even that reads as a string.
    def __call__(self, task: Any):
        """As a CrewAI guardrail, given a `TaskOutput` (or a `LiteAgentOutput`): screen its `raw`
        text and answer CrewAI's `(passed, value)`. A violation is `(False, reason)` under
        "raise" (CrewAI retries the task with the reason, then fails it) and `(True,
        rejection_message)` under "filter" (the output is replaced); otherwise `(True, output)`.
        Given anything else: `screen(task)`, as laya."""
        if not _is_crew_output(task):
            return self.screen(task)
        violations, _answers, res = self._violations(str(task.raw))
        if violations and self.action == "raise":
            return False, str(self._error(violations, res))
        if violations and self.action == "filter":
            return True, self.rejection_message
        return True, task

    async def ascreen(self, task: Any) -> Any:
        """`screen` on a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.screen, task)


def _is_crew_output(value: Any) -> bool:
    classes: List[type] = []
    for module, name in _CREW_OUTPUTS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            classes.append(cls)
    return bool(classes) and isinstance(value, tuple(classes))
