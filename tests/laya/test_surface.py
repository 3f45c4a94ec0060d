"""The rest of Laya 0.4.15's surface on kime, replayed from `tests/goldens/surface.json`
(`tools/goldens_surface.py`, recorded from laya itself):

- every name of laya's `__all__` is on kime, of the same kind and signature (the six LangChain
  classes where langchain-core is installed; without it, an ImportError naming `kime[langchain]`,
  kept out of `__all__` and `dir()`);
- Laya's submodule paths (`kime.presets`, `kime.email`, `kime.router`, `kime.hooks`,
  `kime.confidence`, `kime.structured`, `kime.lang`) hold every public name laya defines there;
- the presets, the email helpers, `render_options`, `ece_score`, `proper_reward`,
  `td_lambda_targets` and the calibration fitters give Laya's results and refusals;
- properties: whatever `clean_email_body` and `email_state` are given, they answer or refuse the
  argument by name, never with a TypeError from deep inside.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import pydoc
import subprocess
import sys
import types
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

import kime
from kime.jobs import laya_calibrate as laya_fit
from kime.presets import state_field

from ..paths import GOLDENS

FIT_TOL = 1e-3
"""The fitters' numbers: kime follows torch's L-BFGS step by step in float32, and where it stops
on a flat objective decides the third decimal (tests/jobs/test_jobs_fit.py's tolerance). A fitted
temperature is compared in log T, where the optimiser searches and so where its stopping point
wanders: on `fit_map_mixed`'s score records both stop on the float32 loss's flat floor (NLL equal
to 4e-7) at T = 2.3065 (laya) and 2.3049 (kime), 6.7e-4 apart in log T and 1.6e-3 in T."""
FLOAT32_TOL = 1e-5
"""`proper_reward` and `td_lambda_targets`: float32 sums of a handful of terms, as torch's."""
EXACT_TOL = 1e-12
"""Everything else computes the same float64 numbers Laya does."""

FIT_CALLS = {"fit_temperatures", "fit_temperature_map", "fit_one_temperature", "fit_binning_map",
             "fit_abstention_thresholds"}
INTEGRATIONS = ("LayaRouter", "LayaGuardrail", "LayaGuardrailError", "LayaTriage",
                "LayaEvaluator", "LayaDecision")
HAVE_LANGCHAIN = importlib.util.find_spec("langchain_core") is not None


def _decode(obj: Any) -> Any:
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    if set(obj) == {"__bytes__"}:
        return obj["__bytes__"].encode("utf-8")
    return obj


DATA = json.loads((GOLDENS / "surface.json").read_text(encoding="utf-8"), object_hook=_decode)
CASES = DATA["cases"]


def test_goldens_are_sizeable_and_cover_every_helper():
    assert DATA["laya_version"] == "0.4.15"
    assert len(DATA["all"]) == 66 and len(CASES) >= 40
    assert sum(1 for c in CASES if c["error"]) >= 20
    calls = {c["call"] for c in CASES}
    assert {"triage_questions", "email_questions", "guard_questions", "moderation_questions",
            "router_questions", "clean_email_body", "email_state", "render_options", "ece_score",
            "proper_reward", "td_lambda_targets", "QTYPES", "QTYPE_NAMES", "fit_temperatures",
            "fit_one_temperature", "fit_temperature_map", "fit_abstention_thresholds",
            "fit_binning_map", "apply_binning_map"} <= calls


# ------------------------------------------------------------------------------ names and kinds

def _signature(obj: Any) -> Optional[List[Dict[str, Any]]]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        entry: Dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is inspect.Parameter.empty:
            entry["required"] = True
        elif isinstance(p.default, (type(None), bool, int, float, str)):
            entry["default"] = p.default
        else:
            entry["default_type"] = type(p.default).__name__
        out.append(entry)
    return out


POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def signature_problems(ours: List[Dict[str, Any]], theirs: List[Dict[str, Any]]) -> List[str]:
    """Where kime's signature would break a call written for Laya's: a parameter of Laya's that
    kime lacks, or has of another kind or default; positional parameters in another order; a
    parameter of kime's own that a Laya call would not pass (one without a default)."""
    problems = []
    by_name = {p["name"]: p for p in ours}
    ours_pos = [p["name"] for p in ours if p["kind"] in POSITIONAL]
    theirs_pos = [p["name"] for p in theirs if p["kind"] in POSITIONAL]
    if ours_pos[:len(theirs_pos)] != theirs_pos:
        problems.append("positional parameters %s, Laya's %s" % (ours_pos, theirs_pos))
    for p in theirs:
        mine = by_name.get(p["name"])
        if mine is None:
            if p["kind"] not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
                problems.append("no parameter %r" % p["name"])
            elif not any(q["kind"] == p["kind"] for q in ours):
                problems.append("no %s" % p["kind"])
            continue
        if mine != p:
            problems.append("%r is %r, Laya's %r" % (p["name"], mine, p))
    known = {p["name"] for p in theirs}
    problems += ["a required parameter of its own: %r" % p["name"] for p in ours
                 if p["name"] not in known and p.get("required")
                 and p["kind"] not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
    return problems


def _kind(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    return "function" if callable(obj) else type(obj).__name__


NOT_COMPARED = {"__version__"}
"""Values that are kime's own: its version is not laya's."""


@pytest.mark.parametrize("name", DATA["all"])
def test_every_name_of_layas_all_is_on_kime_alike(name):
    if name in INTEGRATIONS:
        pytest.importorskip("langchain_core")
    theirs = DATA["names"][name]
    ours = getattr(kime, name)
    assert name in kime.__all__ and name in dir(kime)
    assert _kind(ours) == theirs["kind"], (name, _kind(ours), theirs["kind"])
    if theirs.get("signature") is not None:
        mine = _signature(ours)
        assert mine is not None, "%s has no signature" % name
        assert not signature_problems(mine, theirs["signature"]), (
            name, signature_problems(mine, theirs["signature"]))
    if theirs["kind"] == "function":
        assert inspect.iscoroutinefunction(ours) == theirs["coroutine"], name
    if "exception" in theirs:
        assert issubclass(ours, _builtin(theirs["exception"])), name
    if "value" in theirs and name not in NOT_COMPARED:
        value = sorted(ours) if isinstance(ours, frozenset) else ours
        assert _plain(value) == theirs["value"], name


def _builtin(name: str) -> type:
    import builtins

    found = getattr(builtins, name)
    assert isinstance(found, type)
    return found


def _plain(value: Any) -> Any:
    """A constant as the goldens hold it: tuples as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


_NO_LANGCHAIN_PROBE = """
import sys
sys.modules["langchain_core"] = None  # what an interpreter without langchain-core sees
import inspect, json, pydoc, kime
found = {"all": [n for n in %r if n in kime.__all__ or n in dir(kime)], "errors": []}
for how in ("getattr", "from", "hasattr"):
    try:
        if how == "from":
            exec("from kime import LayaRouter", {})
        else:
            (getattr if how == "getattr" else hasattr)(kime, "LayaGuardrail")
    except ImportError as e:
        found["errors"].append(str(e))
exec("from kime import *", {})
inspect.getmembers(kime)
found["help"] = "predict_tournament" in pydoc.plain(pydoc.render_doc(kime))
json.dump(found, sys.stdout)
""" % (INTEGRATIONS,)


def test_without_langchain_the_names_ask_for_the_extra_and_stay_unlisted():
    """A bare install: the six names say `pip install 'kime[langchain]'` on every way in, and
    stay out of `__all__` and `dir()`, so star-import, `getmembers` and `help` keep working."""
    done = subprocess.run([sys.executable, "-c", _NO_LANGCHAIN_PROBE], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["all"] == [] and found["help"] is True
    assert len(found["errors"]) == 3, found
    assert all("kime[langchain]" in e for e in found["errors"]), found["errors"]


@pytest.mark.parametrize("name", INTEGRATIONS)
def test_with_langchain_the_names_are_the_integrations_classes_and_listed(name):
    pytest.importorskip("langchain_core")
    from kime.integrations import langchain

    assert getattr(kime, name) is getattr(langchain, name)
    scope: Dict[str, Any] = {}
    exec("from kime import %s" % name, scope)
    assert scope[name] is getattr(langchain, name)
    assert name in kime.__all__ and name in dir(kime)


def test_everything_else_of_layas_all_is_in_kimes_all_and_star_import_works():
    listed = set(DATA["all"]) - (set() if HAVE_LANGCHAIN else set(INTEGRATIONS))
    assert listed <= set(kime.__all__)
    scope: Dict[str, Any] = {}
    exec("from kime import *", scope)
    assert listed <= set(scope)
    assert scope["presets"] is kime.presets and scope["fit_temperatures"] is kime.fit_temperatures


def test_tools_that_walk_the_module_keep_working():
    """`dir()`, `inspect.getmembers` and `help()` read every listed name: none may raise."""
    members = dict(inspect.getmembers(kime))
    assert "render_options" in members and ("LayaRouter" in members) == HAVE_LANGCHAIN
    assert "predict_tournament" in pydoc.plain(pydoc.render_doc(kime))


def test_importing_kime_loads_none_of_the_surface_until_used():
    code = ("import sys, kime; mods = [m for m in sys.modules if m in ('kime.presets', "
            "'kime.email', 'kime.laya.presets', 'kime.laya.email', 'kime.laya.common', "
            "'kime.jobs', 'kime.laya.shortlist', 'kime.laya.stability', 'kime.hooks') "
            "or m.startswith(('kime._cpu', 'kime._cuda', 'torch', 'kime.integrations', "
            "'langchain'))]; print(mods); "
            "kime.presets.triage_questions(); kime.fit_one_temperature([], 1)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


# ------------------------------------------------------------------------------ import paths

@pytest.mark.parametrize("module", sorted(DATA["submodules"]))
def test_layas_submodule_paths_hold_every_name_laya_defines_there(module):
    imported = importlib.import_module("kime." + module)
    assert getattr(kime, module) is imported
    missing = [n for n in DATA["submodules"][module] if not hasattr(imported, n)]
    assert not missing, "kime.%s lacks %s" % (module, missing)
    assert sorted(imported.__all__) == sorted(set(imported.__all__))
    first = DATA["submodules"][module][0]
    scope: Dict[str, Any] = {}
    exec("from kime.%s import %s" % (module, first), scope)
    assert scope[first] is getattr(imported, first)


def test_import_kime_as_laya_reaches_the_submodules():
    import kime as laya

    assert laya.presets.triage_questions()["intent"]["type"] == "choice"
    assert laya.email.email_state("Hi", "Body") == {"subject": "Hi", "body": "Body"}
    assert laya.hooks.OptionStabilityHook is kime.OptionStabilityHook
    assert laya.router.Router is kime.Router and laya.router.DEFAULT_MODELS is kime.DEFAULT_MODELS
    assert laya.confidence.GATE_STATES == kime.GATE_STATES
    assert laya.lang.detect_script is kime.detect_script


# ------------------------------------------------------------------------------ the goldens

def _as_arrays(call: str, args: List[Any]) -> List[Any]:
    """The arrays Laya got as tensors, as NumPy arrays."""
    if call == "proper_reward":
        args[:4] = [np.asarray(a, dtype=np.int64 if i == 2 else np.float32)
                    for i, a in enumerate(args[:4])]
    elif call == "td_lambda_targets":
        args[0] = np.asarray(args[0], dtype=np.float32)
        batch = dict(args[1])
        batch["target"] = np.asarray(batch["target"], dtype=np.float32)
        for key in ("ep_group", "ep_step"):
            if key in batch:
                batch[key] = np.asarray(batch[key])
        args[1] = batch
    elif call == "ece_score":
        args[:2] = [np.asarray(a, dtype=float) for a in args[:2]]
    return args


def call_case(case: Dict[str, Any]) -> Any:
    call, args, kwargs = case["call"], list(case["args"]), dict(case["kwargs"])
    if call in ("QTYPES", "QTYPE_NAMES"):
        return getattr(kime, call)
    fn = state_field if call == "state_field" else getattr(kime, call)
    result = fn(*_as_arrays(call, args), **kwargs)
    return result.tolist() if isinstance(result, np.ndarray) else result


def _is_temperature(path: str) -> bool:
    return path == "" or "temperature" in path.split("/")[1] or path.endswith("/fitted")


def assert_same(ours: Any, theirs: Any, atol: float, path: str = "", log_t: bool = False
                ) -> None:
    """Keys in order, types exactly, floats within `atol` (fitted temperatures, with `log_t`,
    in log T), NaN for NaN."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), "%s: %r is not a dict" % (path, ours)
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            assert_same(ours[key], theirs[key], atol, "%s/%s" % (path, key), log_t)
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), "%s: %r" % (path, ours)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, atol, "%s[%d]" % (path, i), log_t)
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        if math.isnan(theirs):
            assert math.isnan(ours), "%s: %r is not NaN" % (path, ours)
        elif log_t and _is_temperature(path) and min(ours, theirs) > 0:
            assert abs(math.log(ours) - math.log(theirs)) <= atol, "%s: %r != %r" % (
                path, ours, theirs)
        else:
            assert abs(ours - theirs) <= atol, "%s: %r != %r" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


def assert_same_fit_report(ours: Dict[str, Any], case: Dict[str, Any]) -> None:
    """`compute_ece=True`: the split and every count exactly Laya's, and ECE after calibration
    Laya's on Laya's own temperatures. (ECE bins the confidences, so the few 1e-4 by which a
    fitted temperature may differ can move a held-out answer across a bin edge: kime's
    `ece_after` is checked against its own temperatures instead.)"""
    theirs = case["result"]
    recs = laya_fit.records_from(case["args"][0])
    seed = case["args"][2] if len(case["args"]) > 2 else case["kwargs"].get("seed", 0)
    _, held, excluded = laya_fit.ece_holdout(recs, seed)
    assert excluded == theirs["report"]["buckets_excluded_from_eval"]
    on_theirs = laya_fit.ece_report(held, theirs["temperature"], theirs["temperature_by_options"])
    on_ours = laya_fit.ece_report(held, ours["temperature"], ours["temperature_by_options"])
    assert_same(on_theirs, {k: theirs["report"][k] for k in ("ece_before", "ece_after")},
                EXACT_TOL)
    assert_same(ours["report"]["ece_after"], on_ours["ece_after"], 0.0)
    ours = dict(ours, report=dict(ours["report"], ece_after=theirs["report"]["ece_after"]))
    assert_same(ours, theirs, FIT_TOL, log_t=True)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case):
    error = case["error"]
    if error is None:
        if isinstance(case["result"], dict) and "report" in case["result"]:
            assert_same_fit_report(call_case(case), case)
            return
        atol = (FIT_TOL if case["call"] in FIT_CALLS
                else FLOAT32_TOL if case["call"] in ("proper_reward", "td_lambda_targets")
                else EXACT_TOL)
        assert_same(call_case(case), case["result"], atol,
                    log_t=case["call"] in ("fit_temperatures", "fit_temperature_map",
                                           "fit_one_temperature"))
        return
    laya_type = _builtin(error["type"])
    if case["kime"]:
        # Laya fails from deep inside; kime refuses the argument by name, as the same kind of
        # error where Laya's was a TypeError or ValueError
        with pytest.raises(kime.InvalidRequest) as info:
            call_case(case)
        assert info.value.problems[0]["loc"] == case["kime"], info.value.problems
        assert case["kime"][-1] in str(info.value)
        if laya_type in (TypeError, ValueError):
            assert isinstance(info.value, laya_type)
    else:
        with pytest.raises(laya_type) as info:
            call_case(case)
        assert str(info.value) == error["message"]


# ------------------------------------------------------------------------------ kime's own

def test_presets_are_fresh_copies_and_email_categories_are_the_callers():
    first = kime.triage_questions()
    first["intent"]["criteria"]["refund"] = "changed"
    first.pop("churn_risk")
    assert kime.triage_questions() == {c["id"]: c for c in CASES}["triage_questions"]["result"]
    teams = {"a": "x"}
    assert kime.email_questions(teams)["category"]["criteria"] is teams
    assert kime.email.email_questions is kime.email_questions


def test_a_bad_email_argument_is_named():
    with pytest.raises(kime.InvalidArgument) as info:
        kime.clean_email_body(b"bytes body")
    assert str(info.value) == "body must be a string, got bytes"
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    with pytest.raises(kime.InvalidArgument, match="max_chars must be an integer, got 2.5"):
        kime.email_state("s", "b", max_chars=2.5)


def test_a_bad_record_names_its_index_and_field():
    good = [0, [1.0, 2.0], [0.0, 1.0]]
    with pytest.raises(kime.InvalidRequest) as info:
        kime.fit_temperature_map([good, good, [0, [1.0, float("inf")], [0.0, 1.0]]])
    assert info.value.problems[0]["loc"] == ["records", 2, "logits"]
    assert str(info.value) == "logits must contain only finite values"


# ------------------------------------------------------------------------------ properties

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

_LINES = st.sampled_from([
    "On Mon, Jan 8, 2024 Ana <ana@x.com> wrote:", "> quoted", "-----Original Message-----",
    "From: Maria Souza", "Sent: Monday, 3 June 2024", "Best regards,", "Thanks, Łukasz", "--",
    "Sent from my iPhone", "This e-mail is confidential and intended solely for the addressee.",
    "Em 3 de jun. de 2024, Ana escreveu:", "Cordialement,", "", "<p>html</p>", "Refund please."])
EMAILS = st.one_of(st.text(), st.lists(st.one_of(_LINES, st.text(max_size=30)), max_size=20).map(
    lambda lines: "\n".join(lines)))
ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=8),
                     st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                           st.integers(),
                                                                           max_size=2))


@hypothesis.given(body=st.one_of(EMAILS, ANYTHING),
                  max_chars=st.one_of(st.integers(-50, 5000), ANYTHING))
@hypothesis.example(body="000000", max_chars=-1)  # a negative budget cuts from the end
def test_clean_email_body_answers_or_names_the_argument(body, max_chars):
    try:
        out = kime.clean_email_body(body, max_chars)
    except kime.InvalidArgument as exc:
        assert exc.problems[0]["loc"][0] in ("body", "max_chars")
        return
    # Laya's budget is a slice, applied as [:4 * max_chars] and then [:max_chars]: a negative
    # one takes 5 * |max_chars| characters off the end, and cleaning only shortens the text
    limit = int(max_chars)
    size = len(body) if isinstance(body, str) else 0
    assert isinstance(out, str)
    assert len(out) <= (limit if limit >= 0 else max(0, size + 5 * limit))
    assert not any(line.lstrip().startswith(">") for line in out.split("\n"))
    assert "\r" not in out and "  " not in out and "\t" not in out


@hypothesis.given(subject=st.one_of(st.text(max_size=40), ANYTHING),
                  body=st.one_of(EMAILS, ANYTHING), sender=st.one_of(st.text(max_size=10),
                                                                     ANYTHING),
                  clean=st.booleans(), max_chars=st.one_of(st.integers(-10, 4000), ANYTHING),
                  extra=st.dictionaries(st.sampled_from(["thread_id", "tags", "lang"]),
                                        st.one_of(st.none(), st.text(max_size=5)), max_size=3))
def test_email_state_answers_or_names_the_argument(subject, body, sender, clean, max_chars,
                                                   extra):
    try:
        state = kime.email_state(subject, body, sender=sender, clean=clean, max_chars=max_chars,
                                 **extra)
    except kime.InvalidArgument as exc:
        assert exc.problems[0]["loc"][0] in ("subject", "body", "max_chars")
        return
    assert list(state)[:2] == ["subject", "body"]
    assert state["subject"] == (subject or "").strip()
    assert ("from" in state) == bool(sender)
    assert all(state[k] == v for k, v in extra.items() if v is not None)
    assert not any(k in state for k, v in extra.items() if v is None)
