"""Record Laya 0.4.15's calibration and `predict_long` behaviour on kime's test checkpoints:
`tests/goldens/calibration.json`.

Run only with the oracle interpreter (the real laya + torch; kime never imports them):

    .oracle/bin/python tools/goldens_calibration.py

Each case is a short script of steps run on one `laya.Agent` (a `load` step replaces it), and
every step's outcome is recorded: its return value (or null), its error (type and message) and
the warnings it raised. Steps:

- `load`: `laya.Agent(checkpoint, device="cpu", **kwargs)`; `calibration_file` (a payload, or
  `{"__raw__": text}`) is written to a temporary file and passed as `calibration=`;
- `attrs`: the agent's calibration attributes (`temperature`, `temperature_by_options`,
  `temperature_raw`, `temperature_by_options_raw`, `lang_temperatures`, `binning_map`);
- `load_calibration`: `file` written to a temporary file, or `"$saved"` (the last saved payload);
- `save_calibration`: the payload written, parsed back (`result`);
- `predict`, `predict_long`: the call's keyword arguments as given; `predict_long` also records
  `windows`, the window texts Laya scored (`ctx.states`, seen by a start hook that changes
  nothing), so kime's decoding of token windows is checked directly.

The repository root in paths and messages is written as `<root>`, so the replay runs anywhere.
Dicts with non-string keys use make_goldens' `{"__items__": ...}` encoding.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_goldens", ROOT / "tools" / "make_goldens.py")
assert _spec and _spec.loader
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)

import laya  # noqa: E402

OUT = mg.GOLDENS / "calibration.json"
T, M = "tiny", "multilingual-tiny"

# --------------------------------------------------------------------------------- inputs

BASIC = mg.BASIC
MIXED = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY, "c2": mg.LANG2,
         "c7": mg.TOPIC7, "s7": mg.SATISFACTION7}
LONG = " ".join([mg.LONG_TEXT] * 4)
LONG_DE = " ".join([mg.GERMAN, mg.FRENCH, mg.SPANISH] * 5)
LONG_JA = " ".join([mg.JAPANESE, mg.EMOJI] * 8)
LONG_CONVERSATION = mg.CONVERSATION * 3
LONG_DICT = {"tickets": [dict(mg.DICT_STATE["ticket"], id=i) for i in range(12)],
             "note": mg.LONG_TEXT}
FITS = mg.EMAIL

CAL_V1 = {"temperature": [2.0, 0.7, 1.5], "temperature_by_options": {"choice:3-5": 2.5}}
BINNING = {"choice:3-5": {"bins": 4, "values": [0.1, 0.3, 0.6, 0.9]},
           "noul:2": {"bins": 2, "values": [0.55, 0.77]},
           "score:3-5": {"bins": 1, "values": [0.42]}}
CAL_BINNING = {"version": 1, "temperature": [1.1, 1.2, 1.3],
               "temperature_by_options": {"noul:2": 0.9}, "binning_map": BINNING}
OTHER_IDENTITY = {"version": 2, "temperature": [1.5, 1.5, 1.5], "temperature_by_options": {},
                  "model_id_or_path": "convaiinnovations/laya", "subfolder": "multilingual",
                  "config": {"max_len": 512}}
LANGS = {"FR-ca": {"temperature": [2.0, 3.0, 4.0], "temperature_by_options": {"choice:3-5": 3.0}},
         "de": None,
         "es": {"temperature": None, "temperature_by_options": {"noul:2": 0.7}},
         "ja": {"temperature": [0.6, 0.6, 0.6]}}


def many(n: int) -> Dict[str, Any]:
    return {"type": "choice", "instructions": "Which label fits?", "criteria": mg.many_labels(n)}


# --------------------------------------------------------------------------------- cases

def step(op: str, **kw: Any) -> Dict[str, Any]:
    return dict(op=op, **kw)


def load(ckpt: str, calibration_file: Any = None, **kwargs: Any) -> Dict[str, Any]:
    out = step("load", checkpoint=ckpt, kwargs=kwargs)
    if calibration_file is not None:
        out["calibration_file"] = calibration_file
    return out


def predict(state: Any = mg.EMAIL, questions: Any = None, **kw: Any) -> Dict[str, Any]:
    return step("predict", state=state, questions=BASIC if questions is None else questions, **kw)


def long(state: Any = LONG, questions: Any = None, **kw: Any) -> Dict[str, Any]:
    return step("predict_long", state=state, questions=BASIC if questions is None else questions,
                **kw)


def case(id: str, about: str, *steps: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": id, "about": about, "steps": list(steps)}


def cases() -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for ck in (T, M):
        s = "_" + ck.replace("-", "_")
        out += [
            case("calibration_file_at_load" + s, "calibration= at load: a v1 file's temperatures "
                 "replace the checkpoint's", load(ck, CAL_V1), step("attrs"), predict(),
                 predict(questions=MIXED)),
            case("lang_temperatures" + s, "lang_temperatures: FR-ca -> fr, null inherits, a null "
                 "temperature inherits, per-call lang in several spellings",
                 load(ck, lang_temperatures=LANGS), step("attrs"),
                 predict(lang="fr"), predict(lang="FR-ca"), predict(lang="fr-FR"), predict(lang="de"),
                 predict(lang="es"), predict(lang="ja"), predict(lang="en"), predict(lang=""),
                 predict(lang=None)),
            case("save_fresh" + s, "save_calibration on a fresh agent: version 2, the applied "
                 "temperatures, the checkpoint identity; loading it back warns nothing",
                 load(ck), step("save_calibration"), step("load_calibration", file="$saved"),
                 step("attrs"), predict()),
            case("binning_map" + s, "a binning map remaps answer_confidence per bucket; a language "
                 "with an override skips it; a bucket the map lacks passes through",
                 load(ck, lang_temperatures={"fr": {"temperature": [1, 1, 1]}}),
                 step("load_calibration", file=CAL_BINNING), step("attrs"), predict(questions=MIXED),
                 predict(questions=MIXED, lang="fr-BE"), predict(questions=MIXED, lang="it"),
                 step("save_calibration")),
            case("identity_mismatch" + s, "a v2 file recorded for another checkpoint warns (config "
                 "identity differs) and still loads", load(ck),
                 step("load_calibration", file=OTHER_IDENTITY), step("attrs"), predict()),
            case("long_default" + s, "predict_long with the default window and stride",
                 load(ck), long()),
            case("long_window_stride" + s, "predict_long window=40 stride=20, then stride=40 (no "
                 "overlap), then batch_size=2", load(ck), long(window=40, stride=20),
                 long(window=40, stride=40), long(window=40, stride=20, batch_size=2)),
            case("long_window_capped" + s, "an explicit window wider than the room is capped with a "
                 "warning; a stride valid for the asked window is reduced with a warning",
                 load(ck), long(window=1000), long(window=1000, stride=600)),
            case("long_conversation" + s, "a long conversation (list) state, scanned as JSON text",
                 load(ck), long(state=LONG_CONVERSATION, questions=MIXED)),
            case("long_fits" + s, "a state that fits: identical to predict, windows 1; an explicit "
                 "window the state fits too", load(ck), long(state=FITS), predict(state=FITS),
                 long(state=FITS, window=80), long(state=mg.CONVERSATION[:2], questions=MIXED)),
            case("long_refusals" + s, "predict_long refusals: aggregate, stride past the window, a "
                 "None state, questions not a dict, a bad question",
                 load(ck), long(aggregate="max"), long(aggregate="mean"), long(window=30, stride=31),
                 long(stride=500), long(state=None), long(questions=["x"]),
                 long(questions={"q": {"type": "choice", "instructions": "x", "criteria": {}}})),
            case("long_lang_binning" + s, "predict_long with a language override and with a binning "
                 "map (which moves the deciding choice window)",
                 load(ck, lang_temperatures=LANGS), long(questions=MIXED, lang="FR-ca"),
                 step("load_calibration", file=CAL_BINNING), long(questions=MIXED),
                 long(questions=MIXED, lang="es")),
        ]
    out += [
        case("calibration_file_clamped", "calibration= with out-of-range and non-numeric "
             "temperatures: clamped with a warning",
             load(T, {"version": 1, "temperature": [0.1, "x", 9],
                      "temperature_by_options": {"noul:2": None, "choice:2": 0.3, "score:3-5": 2}}),
             step("attrs"), predict(questions=MIXED), step("save_calibration")),
        case("lang_temperatures_clamped", "lang_temperatures with values the clamp replaces warn "
             "per language; an inherited list is not repeated",
             load(T, lang_temperatures={"de": {"temperature": [True, 99, 0.01]},
                                        "fr": {"temperature_by_options": {"choice:3-5": 0.2}},
                                        "it": {"temperature": ["hot", None, 1]}}),
             step("attrs"), predict(lang="de"), predict(lang="it")),
        case("lang_temperatures_refusals", "lang_temperatures shapes Laya refuses",
             load(T, lang_temperatures={5: {"temperature": [1, 1, 1]}}),
             load(T, lang_temperatures={"de": 3}),
             load(T, lang_temperatures={"de": {"temperature": [1, 2]}}),
             load(T, lang_temperatures={"de": {"temperature": 2}}),
             load(T, lang_temperatures={"de": {"temperature_by_options": [1]}}),
             load(M, lang_temperatures={"pt-BR": {"temperature": {"a": 1, "b": 2, "c": 3}}})),
        case("lang_duplicate_keys", "two keys normalising to one language: the later wins",
             load(M, lang_temperatures={"fr": {"temperature": [4, 4, 4]},
                                        "FR-ca": {"temperature": [0.7, 0.7, 0.7]}}),
             step("attrs"), predict(lang="fr")),
        case("load_calibration_refusals", "calibration files Laya refuses, each with its message; "
             "a refused file changes nothing",
             load(T),
             step("load_calibration", file=[1, 2, 3]),
             step("load_calibration", file={"version": "abc", "temperature": [1, 1, 1]}),
             step("load_calibration", file={"version": 1.5, "temperature": [1, 1, 1]}),
             step("load_calibration", file={"version": True, "temperature": [1, 1, 1]}),
             step("load_calibration", file={"temperature": [1, 1]}),
             step("load_calibration", file={"temperature": "abc"}),
             step("load_calibration", file={"temperature": [1, 1, 1], "temperature_by_options": [1]}),
             step("load_calibration", file={"temperature": [1, 1, 1], "binning_map": [1]}),
             step("load_calibration", file={"temperature": [1, 1, 1], "binning_map": {"noul:2": 3}}),
             step("attrs")),
        case("binning_refusals", "binning values out of range or malformed are refused",
             load(T),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 2, "values": [0.5, 1.2]}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 2, "values": [-0.1, 0.5]}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 0, "values": []}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": True, "values": [1]}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 3, "values": [0.1, 0.2]}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 2, "values": ["a", 0.2]}}}),
             step("load_calibration", file={"temperature": [1, 1, 1],
                                            "binning_map": {"noul:2": {"bins": 2, "values": [True, 0.2]}}}),
             step("load_calibration", file={"__raw__": '{"temperature": [1, 1, 1], "binning_map": '
                                                       '{"noul:2": {"bins": 2, "values": [NaN, 0.2]}}}'}),
             step("attrs")),
        case("calibration_versions", "version 2.0 and \"2\" read as 2; a v1 file for another "
             "checkpoint does not warn; a file with no binning_map clears one",
             load(T),
             step("load_calibration", file=dict(CAL_BINNING, version=2.0)),
             step("attrs"),
             step("load_calibration", file=dict(OTHER_IDENTITY, version="2")),
             step("load_calibration", file=dict(OTHER_IDENTITY, version=1)),
             step("load_calibration", file={"version": None, "temperature": [1, 1, 1],
                                            "temperature_by_options": None}),
             step("attrs"), predict()),
        case("load_calibration_clamped", "load_calibration clamps like the checkpoint load, with "
             "its own warning", load(M),
             step("load_calibration", file={"version": 1, "temperature": [0, 1e9, "nan"],
                                            "temperature_by_options": {"choice:2": 6}}),
             step("attrs"), predict()),
        case("save_load_across_checkpoints", "a file saved by one checkpoint, loaded by the other: "
             "the identity differs, so it warns; then saving on the second records the second",
             load(T), step("load_calibration", file=CAL_BINNING), step("save_calibration"),
             load(M), step("load_calibration", file="$saved"), step("attrs"),
             step("save_calibration"), predict(questions=MIXED)),
        case("calibration_and_lang_at_load", "calibration= and lang_temperatures= together: "
             "overrides resolve against the checkpoint's raw list, not the file's",
             load(M, CAL_BINNING, lang_temperatures={"de": {"temperature_by_options": {"noul:2": 2}}}),
             step("attrs"), predict(questions=MIXED, lang="de-AT"), predict(questions=MIXED)),
        case("long_dict_and_scripts", "long dict state, long multilingual and Japanese/emoji text "
             "(byte-level windows split characters)", load(M),
             long(state=LONG_DICT, questions={"angry": mg.ANGRY, "s5": mg.URGENCY5}),
             long(state=LONG_DE, questions=MIXED, window=50),
             long(state=LONG_JA, questions={"happy": mg.ANGRY, "lang": mg.LANG2}, window=33, stride=11)),
        case("long_tiny_scripts", "tiny checkpoint (byte-level BPE): emoji/Japanese windows that "
             "cut characters", load(T),
             long(state=LONG_JA, questions={"happy": mg.ANGRY, "lang": mg.LANG2}, window=33, stride=11),
             long(state=LONG_DE + " [MASK] " + LONG_DE, window=64)),
        case("long_crowded_questions", "many options: the default window capped with a warning; "
             "options that leave no room at all are refused", load(T),
             long(questions={"many": many(28), "angry": mg.ANGRY}),
             long(questions={"many": many(100)}),
             long(questions={"many": many(24)}, window=20, stride=20)),
        case("long_edge_questions", "empty questions over a long state; int ids; option_order",
             load(T), long(questions={}), long(state=FITS, questions={}),
             long(questions={1: mg.INTENT3, 2: dict(mg.URGENCY5, option_order=[4, 3, 2, 1, 0]),
                             "n": mg.FORMAL}, window=70, stride=50)),
    ]
    return out


# --------------------------------------------------------------------------------- running

def _placeholder(obj: Any) -> Any:
    """The repository root written as `<root>` in every string."""
    if isinstance(obj, str):
        return obj.replace(str(ROOT), "<root>")
    if isinstance(obj, dict):
        return {_placeholder(k): _placeholder(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_placeholder(v) for v in obj]
    return obj


def _write(tmp: str, content: Any) -> str:
    fd, path = tempfile.mkstemp(dir=tmp, suffix=".json")
    with os.fdopen(fd, "w") as f:
        if isinstance(content, dict) and set(content) == {"__raw__"}:
            f.write(content["__raw__"])
        else:
            json.dump(content, f)
    return path


def _attrs(agent: Any) -> Dict[str, Any]:
    names = ("temperature", "temperature_by_options", "temperature_raw",
             "temperature_by_options_raw", "lang_temperatures", "binning_map")
    return {n: getattr(agent, n) for n in names}


def run_case(spec: Dict[str, Any], tmp: str) -> Dict[str, Any]:
    agent = None
    saved = None
    records = []
    for st in spec["steps"]:
        op = st["op"]
        rec = dict(st)
        result, error, windows = None, None, None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if op == "load":
                    kw = dict(st["kwargs"])
                    if "calibration_file" in st:
                        kw["calibration"] = _write(tmp, st["calibration_file"])
                    agent = None
                    agent = laya.Agent(str(mg.GOLDENS / "checkpoints" / st["checkpoint"]),
                                       device="cpu", **kw)
                elif op == "attrs":
                    result = _attrs(agent)
                elif op == "load_calibration":
                    content = saved if st["file"] == "$saved" else st["file"]
                    agent.load_calibration(_write(tmp, content))
                elif op == "save_calibration":
                    path = os.path.join(tmp, "saved.json")
                    agent.save_calibration(path)
                    with open(path) as f:
                        saved = json.load(f)
                    result = saved
                elif op == "predict":
                    kw = {k: v for k, v in st.items() if k not in ("op", "state", "questions")}
                    result = agent.predict(st["state"], st["questions"], **kw)
                elif op == "predict_long":
                    seen: List[Any] = []
                    kw = {k: v for k, v in st.items() if k not in ("op", "state", "questions")}
                    result = agent.predict_long(st["state"], st["questions"],
                                                on_predict_start=lambda ctx: seen.append(list(ctx.states)),
                                                **kw)
                    windows = seen[0] if seen else None
                else:
                    raise AssertionError(op)
            except (ValueError, TypeError) as e:
                error = {"type": "TypeError" if isinstance(e, TypeError) else "ValueError",
                         "message": str(e)}
            except Exception:
                traceback.print_exc()
                raise
        rec.update(result=result, error=error, warnings=[str(w.message) for w in caught])
        if op == "predict_long":
            rec["windows"] = windows
        records.append(rec)
    return dict(spec, steps=records)


def main() -> int:
    specs = cases()
    ids = [c["id"] for c in specs]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            out.append(_placeholder(mg.to_json(run_case(spec, tmp))))
            print("%-40s %d steps" % (spec["id"], len(spec["steps"])))
    doc = {"laya_version": laya.__version__,
           "checkpoints": {n: "checkpoints/" + n for n in (T, M)},
           "cases": out}
    text = json.dumps(doc, ensure_ascii=False, indent=1)
    assert mg.from_json(json.loads(text)) is not None
    OUT.write_text(text + "\n", encoding="utf-8")
    print("wrote %s: %d cases, %d steps" % (OUT, len(out), sum(len(c["steps"]) for c in out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
