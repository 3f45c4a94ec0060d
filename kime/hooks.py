"""`laya.hooks` at kime's path (`from kime.hooks import OptionStabilityHook`): the hook protocol,
its registry and the process-wide defaults (`kime.laya.hooks`), and Laya's reliability hook with
its helpers (`kime.laya.stability`)."""
from .laya.hooks import (HOOK_EVENTS, AsyncHook, BaseHook, Hook, HookRegistry, PredictContext,
                         PredictHook, add_default_hook, aggregate_usage, clear_default_hooks,
                         compose_hooks, default_hooks, dispatch, normalise_hooks,
                         run_coroutine_sync, set_default_hooks, validate_timeout)
from .laya.stability import (ALL_VARIANTS, VARIANT_PRESETS, OptionStabilityHook,
                             calibrate_reliability, decide_reliability, make_variants)

__all__ = ["ALL_VARIANTS", "AsyncHook", "BaseHook", "HOOK_EVENTS", "Hook", "HookRegistry",
           "OptionStabilityHook", "PredictContext", "PredictHook", "VARIANT_PRESETS",
           "add_default_hook", "aggregate_usage", "calibrate_reliability", "clear_default_hooks",
           "compose_hooks", "decide_reliability", "default_hooks", "dispatch", "make_variants",
           "normalise_hooks", "run_coroutine_sync", "set_default_hooks", "validate_timeout"]
