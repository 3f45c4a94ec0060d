"""laya-mcp-server's `laya_status` and `laya_preset` (Laya 0.4.15's `laya/mcp/tools.py`):
where the checkpoints run and what is loaded, and Laya's built-in question presets run as
`laya_predict` calls.

kime has no torch, so the status's `torch_cuda` is False and `torch_version` None, and
`package_versions` adds `kime`; the devices come from kime's own agents (`Agent.device`), and
before anything is loaded `device` is the preference (`auto` resolved as the engine resolves
it, GPU 0 probed quietly).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from .._version import __version__
from ..laya import presets as laya_presets
from .tools import AUTO, Result, device_of, laya_predict, resident
from ..laya.limits import STATE_CHARS
from .validate import ToolError, validate_state

PRESETS: Dict[str, str] = {
    "guard": "guard_questions",
    "moderation": "moderation_questions",
    "triage": "triage_questions",
    "model_router": "router_questions",
    "email": "email_questions",
}
"""The presets a `laya_preset` call names, and the builder of each one's questions."""
PRESET_ALIASES: Dict[str, str] = {"router": "model_router"}


def preset_questions(builder: str) -> Dict[str, Any]:
    """A fresh copy of the questions the named `kime.laya.presets` builder returns."""
    questions: Dict[str, Any] = getattr(laya_presets, builder)()
    return questions


def get_available_presets() -> Dict[str, Dict[str, Any]]:
    """Every preset by name: its builder, aliases, question count and the state field its
    questions read (when they name one)."""
    aliases: Dict[str, List[str]] = {}
    for alias, target in PRESET_ALIASES.items():
        aliases.setdefault(target, []).append(alias)
    out: Dict[str, Dict[str, Any]] = {}
    for name, builder in sorted(PRESETS.items()):
        entry: Dict[str, Any] = {"questions": builder}
        if name in aliases:
            entry["aliases"] = sorted(aliases[name])
        questions = preset_questions(builder)
        entry["n_questions"] = len(questions)
        field = laya_presets.state_field(questions)
        if field is not None:
            entry["state_field"] = field
        out[name] = entry
    return out


def validate_preset(preset: Any) -> str:
    """The canonical preset name (`router` is `model_router`), or `invalid_preset`."""
    name = PRESET_ALIASES.get(preset, preset) if isinstance(preset, str) else preset
    if not isinstance(name, str) or name not in PRESETS:
        raise ToolError("invalid_preset", "preset must be one of %s, got %r"
                        % (sorted(PRESETS), preset))
    return name


def laya_preset(preset: Any, state: Any, *, task: Any = None, lang: Any = None,
                lang_guess: Any = None, max_len: Any = None, head_max_len: Any = None,
                min_confidence: Any = None, router: Any = None, agent: Any = None,
                preset_builder: Optional[Callable[[str], Dict[str, Any]]] = preset_questions,
                max_state_chars: int = STATE_CHARS) -> Result:
    """A preset's questions asked of `state` through `laya_predict`. A state of one string
    value under another key is moved under the field the questions read."""
    name = validate_preset(preset)
    state_d = validate_state(state, max_state_chars)
    if preset_builder is None:
        raise ToolError("internal_error", "preset_builder is not configured")
    questions = preset_builder(PRESETS[name])
    field = laya_presets.state_field(questions)
    if field is not None and field not in state_d and len(state_d) == 1:
        (value,) = state_d.values()
        if isinstance(value, str):
            state_d = {field: value}
    return laya_predict(state_d, questions, model=AUTO, task=task, lang=lang,
                        lang_guess=lang_guess, max_len=max_len, head_max_len=head_max_len,
                        min_confidence=min_confidence, router=router, agent=agent,
                        max_state_chars=max_state_chars)


def _preference(router: Any, agent: Any) -> str:
    asked = getattr(router, "device", None) if router is not None else None
    if agent is not None:
        return device_of(agent) or "cpu"
    text = str(asked).strip().lower() if asked is not None else "auto"
    if text in ("", "auto"):
        from ..factory import auto_device_kind

        return auto_device_kind()
    return text


def _remote_status(router: Any) -> Result:
    out: Result = {"mode": "remote", "base_url": router.base_url, "router_preload": False,
                   "router_ready": True, "package_versions": {"laya": None,
                                                              "kime": __version__}}
    try:
        health = router.health()
    except Exception as exc:  # the status reports a server it cannot reach; it never raises
        out.update(server=None, server_error="%s: %s" % (type(exc).__name__, exc), loaded=[])
        return out
    out["server"] = health
    loaded = health.get("loaded")
    out["loaded"] = [v for v in loaded if isinstance(v, str)] if isinstance(loaded, list) else []
    for key in ("device", "device_is_preference", "checkpoint_devices"):
        if key in health:
            out[key] = health[key]
    return out


def laya_status(*, router: Any = None, agent: Any = None, preload: bool = True) -> Result:
    """Where each loaded checkpoint runs, what is loaded and which versions answer; with a
    server at `--base-url`, that server's `/health`."""
    if router is not None and getattr(router, "remote", False) is True:
        return _remote_status(router)
    loaded: List[str] = []
    if router is not None:
        loaded = list(router.loaded)
    devices: Dict[str, str] = {}
    for name in loaded:
        device = device_of(resident(router, name))
        if device:
            devices[name] = device
    if agent is not None and router is None:
        loaded = [str(getattr(agent, "model_id", "agent"))]
        devices = {loaded[0]: device_of(agent) or "cpu"}
    actual = next(iter(devices.values()), None)
    return {"device": actual or _preference(router, agent), "torch_cuda": False,
            "torch_version": None, "device_is_preference": actual is None,
            "checkpoint_devices": devices, "loaded": loaded, "router_preload": bool(preload),
            "router_ready": router is not None or agent is not None,
            "package_versions": {"laya": None, "torch": None, "transformers": None,
                                 "kime": __version__}}
