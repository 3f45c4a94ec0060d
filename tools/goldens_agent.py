"""Record Laya 0.4.15's `load`/`Agent` surface on kime's test checkpoints: `tests/goldens/agent.json`.

The area of issue 10 item 1 (signatures, attributes, the device, Laya's torch-only switches),
item 5 (hooks), the loading refusals of item 7 and the device fallback of item 8. Run ONLY with
the oracle environment (the real laya + torch), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_agent.py

Each case: {"id", "checkpoint", "about", "load" (kwargs for laya.load besides the path; its
"__env__" holds environment variables set for the load), "setup" (a name in
tests/laya_agent_hooks.py, or null), "call" ("predict" | "predict_batch" | "predict_long" |
"attributes"), "args", "result", "log" (what the hooks saw), "error" (null or {"type",
"message"}), "warnings"}. The checkpoint's directory is written `<ckpt>` in messages,
so the file does not depend on where the repository lives. Non-string dict keys use
make_goldens' `{"__items__": ...}` encoding.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]


def _by_path(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


mg = _by_path("make_goldens", ROOT / "tools" / "make_goldens.py")
hooks_lib = _by_path("laya_agent_hooks", ROOT / "tests" / "laya_agent_hooks.py")

import laya  # noqa: E402

OUT = mg.GOLDENS / "agent.json"
T, M = "tiny", "multilingual-tiny"
CKPT = {T: mg.GOLDENS / "checkpoints" / "tiny", M: mg.GOLDENS / "checkpoints" / "multilingual-tiny"}

Q = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY}
Q_ALL = dict(mg.BASIC, topic=mg.TOPIC12, sat=mg.SATISFACTION7, formal=mg.FORMAL)
LANGS = {"de": {"temperature": [2.0, 0.7, 3.0], "temperature_by_options": {"choice:3-5": 4.0}},
         "fr": None, "ES-mx": {"temperature": [0.2, 9.0, 1.5]}}
STATES = [mg.EMAIL, "short", mg.LONG_TEXT, mg.GERMAN, mg.CONVERSATION, "", mg.FRENCH]


def sha(ck: str, name: str) -> str:
    return hashlib.sha256((CKPT[ck] / name).read_bytes()).hexdigest()


def case(id: str, ck: str, about: str, call: str, load: Optional[Dict[str, Any]] = None,
         setup: Optional[str] = None, **args: Any) -> Dict[str, Any]:
    return {"id": id, "checkpoint": ck, "about": about, "load": load or {}, "setup": setup,
            "call": call, "args": args}


def cases() -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for ck in (T, M):
        p = "" if ck == T else "ml_"
        out += [
            # ---- signatures, attributes, switches -------------------------------------------
            case(p + "attributes_default", ck, "Laya's public attributes after a plain CPU load",
                 "attributes", {"device": "cpu"}),
            case(p + "attributes_lang_temperatures", ck,
                 "lang_temperatures resolved (subtag keys, null inherits, clamped)", "attributes",
                 {"device": "cpu", "lang_temperatures": LANGS}),
            case(p + "positional_lang_override", ck, "predict(state, questions, 'de'): lang is "
                 "the third positional argument, and picks the language's temperatures",
                 "predict", {"device": "cpu", "lang_temperatures": LANGS},
                 positional=["de"], state=mg.GERMAN, questions=Q_ALL),
            case(p + "positional_lang_subtag", ck, "'ES-mx' and 'FR-ca' normalise to their subtag",
                 "predict_batch", {"device": "cpu", "lang_temperatures": LANGS},
                 positional=[None, "ES-mx"], states=[mg.SPANISH, mg.EMAIL], questions=Q),
            case(p + "lang_without_override", ck, "a lang with no override uses the agent's own",
                 "predict", {"device": "cpu", "lang_temperatures": LANGS}, positional=["ja"],
                 state=mg.JAPANESE, questions=Q),
            case(p + "sort_by_length_same_answers", ck,
                 "sort_by_length with batch_size=2 keeps input order and the answers",
                 "predict_batch", {"device": "cpu"}, states=STATES, questions=Q, batch_size=2,
                 sort_by_length=True),
            case(p + "torch_switches_change_nothing", ck,
                 "fast=True and backend='eager' at load answer exactly as a plain load",
                 "predict", {"device": "cpu", "fast": True, "backend": "eager"},
                 state=mg.EMAIL, questions=Q),
            case(p + "cuda_falls_back", ck, "device='cuda' on a machine without one: a warning, "
                 "and the CPU answers", "attributes", {"device": "cuda"}),
            case(p + "bad_backend", ck, "an unknown backend is refused", "attributes",
                 {"device": "cpu", "backend": "turbo"}),
            case(p + "bad_compile_mode", ck, "compile=True with an unknown compile_mode",
                 "attributes", {"device": "cpu", "compile": True, "compile_mode": "max",
                                "compile_warmup": False}),
            case(p + "bad_load_hooks_timeout_zero", ck, "hooks_timeout=0 at load",
                 "attributes", {"device": "cpu", "hooks_timeout": 0}),
            case(p + "bad_load_hooks_timeout_bool", ck, "hooks_timeout=True at load",
                 "attributes", {"device": "cpu", "hooks_timeout": True}),
            case(p + "bad_call_hooks_timeout_nan", ck, "hooks_timeout=nan on a call", "predict",
                 {"device": "cpu"}, state=mg.EMAIL, questions=Q, hooks_timeout=float("nan")),
            case(p + "bad_call_hooks_timeout_negative", ck, "hooks_timeout=-1 on a call",
                 "predict_batch", {"device": "cpu"}, states=[mg.EMAIL], questions=Q,
                 hooks_timeout=-1),
            case(p + "bad_min_confidence_before_hooks", ck,
                 "min_confidence is checked before the hooks and the timeout", "predict",
                 {"device": "cpu"}, "record", state=mg.EMAIL, questions=Q, min_confidence=1.5,
                 hooks_timeout=0),
            case(p + "bad_on_predict_start", ck, "a non-callable on_predict_start", "predict",
                 {"device": "cpu"}, state=mg.EMAIL, questions=Q, on_predict_start=5),
            case(p + "bad_batch_size", ck, "batch_size='2' is a TypeError", "predict_batch",
                 {"device": "cpu"}, states=[mg.EMAIL, "x", "y"], questions=Q, batch_size="2"),
            # ---- hooks ------------------------------------------------------------------------
            case(p + "hooks_see_the_call", ck, "a recorder sees states, results, usage; the gate "
                 "runs before end hooks", "predict_batch", {"device": "cpu"}, "record",
                 states=[mg.EMAIL, "x"], questions=Q, min_confidence=0.6),
            case(p + "hooks_order", ck, "the agent's hooks, then the call's (objects, "
                 "then the callables)", "predict", {"device": "cpu"}, "order",
                 state=mg.EMAIL, questions=Q),
            case(p + "hook_skip", ck, "ctx.skip answers the call; inference never runs",
                 "predict_batch", {"device": "cpu"}, "skip", states=[mg.EMAIL, "x"],
                 questions=Q),
            case(p + "hook_skip_gated", ck, "a skipped call is still gated", "predict",
                 {"device": "cpu"}, "skip_at_load", state=mg.EMAIL, questions=Q,
                 min_confidence={"noul:2": 0.5}),
            case(p + "hook_skip_invalid_questions", ck, "a skip answers before the questions "
                 "are validated", "predict", {"device": "cpu"}, "skip", state=mg.EMAIL,
                 questions={"bad": {"type": "nope"}}),
            case(p + "hook_narrows_questions", ck, "a start hook rewrites ctx.questions",
                 "predict", {"device": "cpu"}, "narrow_questions", state=mg.EMAIL, questions=Q),
            case(p + "hook_rewrites_states", ck, "a start hook rewrites ctx.states", "predict_batch",
                 {"device": "cpu"}, "shout", states=[mg.EMAIL, mg.GERMAN], questions=Q),
            case(p + "hook_sets_max_len", ck, "a start hook sets ctx.max_len", "predict",
                 {"device": "cpu"}, "short_budget", state=mg.LONG_TEXT, questions=Q),
            case(p + "hook_end_rewrites_results", ck, "an end hook installed at load tags results",
                 "predict_batch", {"device": "cpu"}, "tag", states=[mg.EMAIL, "x"], questions=Q),
            case(p + "hook_async_end", ck, "an async end hook runs to completion", "predict",
                 {"device": "cpu"}, "tag_async", state=mg.EMAIL, questions=Q),
            case(p + "hook_fails_raises", ck, "a failing start hook fails the call; on_error and "
                 "end hooks still run", "predict", {"device": "cpu"}, "fail_start_raise",
                 state=mg.EMAIL, questions=Q),
            case(p + "hook_fails_warns", ck, "hooks_raise=False: the failure warns and the call "
                 "answers", "predict", {"device": "cpu"}, "fail_start_warn", state=mg.EMAIL,
                 questions=Q),
            case(p + "hook_end_fails_warns_at_load", ck, "hooks_raise=False at load for a failing "
                 "end hook", "predict", {"device": "cpu"}, "fail_end_warn_at_load",
                 state=mg.EMAIL, questions=Q),
            case(p + "hooks_serialised", ck, "hooks_concurrent=False answers the same", "predict",
                 {"device": "cpu"}, "serial", state=mg.EMAIL, questions=Q),
            case(p + "hook_timeout_raises", ck, "a start hook past hooks_timeout", "predict",
                 {"device": "cpu"}, "slow_timeout", state=mg.EMAIL, questions=Q),
            case(p + "hook_timeout_warns", ck, "hooks_timeout at load with hooks_raise=False",
                 "predict", {"device": "cpu"}, "slow_timeout_warn", state=mg.EMAIL, questions=Q),
            case(p + "hook_wrong_skip_count", ck, "ctx.skip with the wrong number of results",
                 "predict_batch", {"device": "cpu"}, "wrong_skip", states=[mg.EMAIL, "x"],
                 questions=Q),
            case(p + "hook_sees_validation_error", ck, "a refused question reaches on_error and "
                 "the end hooks", "predict", {"device": "cpu"}, "error_path", state=mg.EMAIL,
                 questions={"bad": {"type": "nope", "instructions": "x"}}),
            case(p + "predict_long_hook_skip", ck, "predict_long answered by a start hook: "
                 "windows 0", "predict_long", {"device": "cpu"}, "skip", state=mg.EMAIL,
                 questions=Q),
            case(p + "predict_long_hooks_see_windows", ck, "predict_long's start hooks see the "
                 "window texts as ctx.states", "predict_long", {"device": "cpu"}, "record",
                 state=mg.LONG_TEXT * 3, questions=Q),
            case(p + "predict_long_hooks_one_state_when_it_fits", ck, "a state that fits: the "
                 "hooks see it alone", "predict_long", {"device": "cpu"}, "record",
                 state="A short note.", questions=Q),
            case(p + "predict_long_skip_per_window", ck, "a start hook that answers every window "
                 "is refused: skip takes one result for the document", "predict_long",
                 {"device": "cpu"}, "skip", state=mg.LONG_TEXT * 3, questions=Q),
            # ---- loading ----------------------------------------------------------------------
            case(p + "sha256_ok", ck, "expected_sha256 that matches loads", "attributes",
                 {"device": "cpu", "expected_sha256": {"model.safetensors":
                                                       sha(ck, "model.safetensors").upper()}}),
            case(p + "sha256_mismatch", ck, "a digest mismatch refuses the load", "attributes",
                 {"device": "cpu", "expected_sha256": {"rl_agent_config.json": "0" * 64}}),
            case(p + "sha256_missing_file", ck, "a listed file that is absent", "attributes",
                 {"device": "cpu", "expected_sha256": {"weights.bin": "0" * 64}}),
            case(p + "sha256_unsafe_path", ck, "a listed path that leaves the directory",
                 "attributes", {"device": "cpu", "expected_sha256": {"../x": "0" * 64}}),
            case(p + "sha256_not_a_mapping", ck, "expected_sha256 must be a mapping", "attributes",
                 {"device": "cpu", "expected_sha256": ["model.safetensors"]}),
            case(p + "subfolder_missing", ck, "a subfolder the directory lacks", "attributes",
                 {"device": "cpu", "subfolder": "nope"}),
        ]
    out += [
        case("missing_local_path", T, "a local path that does not exist", "attributes",
             {"device": "cpu", "__path__": "./no/such/checkpoint"}),
        case("device_mps_falls_back", T, "device='mps' is not here: a warning, the CPU answers",
             "attributes", {"device": "mps"}),
        # ---- Laya's CPU autocast switch (LAYA_CPU_AMP, read at load) ----------------------
        case("cpu_amp_bf16", T, "LAYA_CPU_AMP=bf16: the CPU forward autocasts to bfloat16",
             "attributes", {"device": "cpu", "__env__": {"LAYA_CPU_AMP": "bf16"}}),
        case("cpu_amp_bfloat16_any_case", T, "LAYA_CPU_AMP=BFloat16: read in any case",
             "attributes", {"device": "cpu", "__env__": {"LAYA_CPU_AMP": "BFloat16"}}),
        case("cpu_amp_fp16_ignored", T, "LAYA_CPU_AMP=fp16: no fp16 on the CPU, ignored",
             "attributes", {"device": "cpu", "__env__": {"LAYA_CPU_AMP": "fp16"}}),
        case("cpu_amp_after_mps_fallback", T, "device='mps' falls back to the CPU, where "
             "LAYA_CPU_AMP=bf16 still applies", "attributes",
             {"device": "mps", "__env__": {"LAYA_CPU_AMP": "bf16"}}),
    ]
    return out


def attributes(agent: Any) -> Dict[str, Any]:
    return {
        "model_id_is_path_argument": agent.model_id == agent.model_id_or_path,
        "subfolder": agent.subfolder, "revision": agent.revision, "cfg": agent.cfg,
        "temperature": agent.temperature, "temperature_by_options": agent.temperature_by_options,
        "temperature_raw": agent.temperature_raw, "lang_temperatures": agent.lang_temperatures,
        "binning_map": agent.binning_map, "cpu_fallback_count": agent.cpu_fallback_count,
        "last_fallback_reason": agent.last_fallback_reason, "device": str(agent.device),
        "device_type": agent.device.type, "hooks_raise": agent.hooks_raise,
        "hooks_concurrent": agent.hooks_concurrent, "hooks_timeout": agent.hooks_timeout,
        "dtype": str(agent.dtype), "amp_enabled": agent.amp_enabled,
        "dtype_for_1": str(agent.dtype_for(1)),
    }


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    log: List[str] = []
    load_kw = dict(spec["load"])
    path = load_kw.pop("__path__", None) or str(CKPT[spec["checkpoint"]])
    env = load_kw.pop("__env__", {})  # set for the load only
    call_kw: Dict[str, Any] = {}
    if spec["setup"]:
        extra_load, call_kw = hooks_lib.SETUPS[spec["setup"]](log)
        load_kw.update(extra_load)
    args = dict(spec["args"])
    positional = args.pop("positional", [])
    args.update(call_kw)
    result = error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with hooks_lib.environment(env):
                agent = laya.load(path, **load_kw)
            if spec["call"] == "attributes":
                result = attributes(agent)
            elif spec["call"] == "predict":
                result = agent.predict(args.pop("state"), args.pop("questions"), *positional, **args)
            elif spec["call"] == "predict_batch":
                result = agent.predict_batch(args.pop("states"), args.pop("questions"), *positional,
                                             **args)
            else:
                result = agent.predict_long(args.pop("state"), args.pop("questions"), **args)
        except Exception as exc:  # recorded: kime must raise the same
            error = {"type": type(exc).__name__, "message": str(exc)}
    here = str(CKPT[spec["checkpoint"]])

    def clean(text: str) -> str:
        return text.replace(here, "<ckpt>")

    out = dict(spec)
    out["args"] = mg.to_json(spec["args"])
    out.update(result=mg.to_json(result), log=[clean(line) for line in log], error=error and {
        "type": error["type"], "message": clean(error["message"])},
        warnings=[clean(str(w.message)) for w in caught])
    return out


def main() -> int:
    os.environ.pop("LAYA_SHA256_DIGESTS", None)
    os.environ.pop("LAYA_REVISION", None)
    os.environ.pop("LAYA_CPU_AMP", None)
    recorded = [run(spec) for spec in cases()]
    data = {"laya_version": laya.__version__, "cases": recorded}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum(1 for c in recorded if c["error"])
    print("wrote %s: %d cases, %d refusals" % (OUT.relative_to(ROOT), len(recorded), errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
