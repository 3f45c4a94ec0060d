"""Record Laya 0.4.15's encoder embedders (issue 23, item 1): `tests/goldens/embed.json`. Run
ONLY with the oracle environment (the real laya and torch), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_embed.py

Three parts, on the committed `tiny` and `multilingual-tiny` checkpoints (nothing downloaded):

- `embeddings`: `laya.shortlist.embed_fn_from_agent(agent, max_length, batch_size)` over varied
  texts (empty, None, numbers, unicode, long texts cut by a small `max_length`, down to 1 and 2,
  chunks that split at `batch_size`), the vectors as float32 values.
- `cache`: `cached_embed_fn` over a deterministic toy embedder of this file's own (`toy`, which
  the test replays from the table recorded here): each step's texts, the result, `cache_info()`
  after it, the lists the inner embedder was called with, or the error; eviction at a small
  `maxsize`, NaN repair, a raising embedder, a changed dimension, bad shapes, `cache_clear()`.
- `refusals`: the checks of both functions (bad `max_length`, `batch_size`, `maxsize`, a
  non-callable) and `embed_fn_from_agent` on a Router, as (error type, message).
"""
from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "embed.json"
CHECKPOINTS = {"tiny": GOLDENS / "checkpoints" / "tiny",
               "multilingual-tiny": GOLDENS / "checkpoints" / "multilingual-tiny"}

LONG = ("The parcel was due on Monday, and it is Thursday now. Nobody answers the phone at the "
        "depot, the tracking page has said 'out for delivery' for three days, and I have asked "
        "twice by email without a reply. I would like a refund or a date. ") * 3
TEXTS: List[Any] = [
    "I was charged twice for my order and I want my money back today.",
    "",
    None,
    "refund",
    "Ich wurde zweimal belastet und möchte mein Geld heute zurück.",
    "注文が二回請求されました。返金してください。",
    "emoji 😀🚀 and accents: café, naïve, Ålborg",
    "   ",
    42,
    LONG,
]
EMBED_CASES: List[Dict[str, Any]] = [
    {"id": "defaults", "kwargs": {}, "texts": TEXTS},
    {"id": "batch_of_two", "kwargs": {"batch_size": 2}, "texts": TEXTS[:7]},
    {"id": "batch_of_one", "kwargs": {"batch_size": 1}, "texts": TEXTS[3:9]},
    {"id": "max_length_16", "kwargs": {"max_length": 16, "batch_size": 3},
     "texts": [LONG, TEXTS[0], TEXTS[4], TEXTS[5], ""]},
    {"id": "max_length_3", "kwargs": {"max_length": 3}, "texts": [LONG, "refund", "", None]},
    {"id": "max_length_2", "kwargs": {"max_length": 2}, "texts": [LONG, "refund", ""]},
    {"id": "max_length_1", "kwargs": {"max_length": 1}, "texts": ["refund me now", "", TEXTS[5]]},
    {"id": "duplicates", "kwargs": {"batch_size": 4},
     "texts": ["refund", "refund", TEXTS[0], "refund", None, ""]},
    {"id": "one_text", "kwargs": {}, "texts": [TEXTS[6]]},
    {"id": "empty_list", "kwargs": {}, "texts": []},
    {"id": "many", "kwargs": {"batch_size": 7, "max_length": 24},
     "texts": ["option %d: %s" % (i, w) for i, w in enumerate(
         "refund info complaint billing delivery cancel upgrade password address invoice "
         "discount warranty exchange tracking other".split())]},
]


def toy(texts: List[str]) -> List[List[float]]:
    """The cache scenarios' inner embedder: deterministic, dimension 3; "nan" gives a row of
    non-finite values and "boom" raises."""
    if "boom" in texts:
        raise RuntimeError("boom")
    out = []
    for t in texts:
        if t == "nan":
            out.append([math.nan, 1.0, math.inf])
        else:
            out.append([float(len(t)), float(sum(map(ord, t)) % 97), float(t.count("a"))])
    return out


def err(e: BaseException) -> List[str]:
    return [type(e).__name__, str(e)]


def run_steps(cached: Any, steps: List[Dict[str, Any]], log: List[List[str]]) -> List[Any]:
    out = []
    for step in steps:
        before = len(log)
        rec: Dict[str, Any] = dict(step)
        if step.get("clear"):
            cached.cache_clear()
        else:
            try:
                result = cached(step["texts"])
                rec["result"] = result.tolist()
                rec["shape"] = list(result.shape)
                rec["dtype"] = str(result.dtype)
            except Exception as e:
                rec["error"] = err(e)
        rec["info"] = cached.cache_info()
        rec["calls"] = log[before:]
        out.append(rec)
    return out


def record_cache(shortlist: Any) -> List[Dict[str, Any]]:
    scenarios = []
    log: List[List[str]] = []

    def logged(texts: List[str]) -> Any:
        log.append(list(texts))
        return toy(texts)

    lru = shortlist.cached_embed_fn(logged, maxsize=3)
    steps: List[Dict[str, Any]] = [{"texts": ["a", "bb", "a"]}, {"texts": ["bb", "ccc"]}, {"texts": ["dddd"]},
             {"texts": ["a"]}, {"texts": ["bb", "dddd"]}, {"texts": [None, ""]},
             {"texts": ["nan"]}, {"texts": ["nan", "a"]}, {"texts": []},
             {"texts": ["boom", "x"]}, {"texts": ["x"]}, {"texts": [1, 2.5, "1"]},
             {"clear": True}, {"texts": ["a", "a"]}]
    scenarios.append({"id": "lru", "maxsize": 3, "steps": run_steps(lru, steps, log)})

    wide = {"dim": 3}

    def changing(texts: List[str]) -> Any:
        log.append(list(texts))
        return [[1.0] * wide["dim"] for _ in texts]

    dims = shortlist.cached_embed_fn(changing, maxsize=10)
    steps = [{"texts": ["a"]}, {"set_dim": 4, "texts": ["b"]}, {"texts": ["a"]},
             {"clear": True}, {"texts": ["b"]}]
    recs = []
    for step in steps:
        if "set_dim" in step:
            wide["dim"] = step["set_dim"]
        recs += run_steps(dims, [step], log)
    scenarios.append({"id": "changed_dim", "maxsize": 10, "steps": recs})

    for name, shape in (("too_many_rows", "n+1"), ("flat", "1d"), ("no_columns", "n,0"),
                        ("scalar", "0d")):
        def bad(texts: List[str], shape: str = shape) -> Any:
            log.append(list(texts))
            n = len(texts)
            return {"n+1": [[0.0, 1.0]] * (n + 1), "1d": [0.0] * n, "n,0": [[]] * n,
                    "0d": 3.0}[shape]
        cached = shortlist.cached_embed_fn(bad)
        scenarios.append({"id": "bad_shape_" + name, "maxsize": 4096, "shape": shape,
                          "steps": run_steps(cached, [{"texts": ["p", "q"]}], log)})
    return scenarios


def refusals(shortlist: Any, agent: Any, router: Any) -> List[Dict[str, Any]]:
    cases: List[Dict[str, Any]] = []

    def attempt(fn: Callable[..., Any], about: str, call: Dict[str, Any], *args: Any,
                **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
            got: Any = None
        except Exception as e:
            got = err(e)
        cases.append({"about": about, **call, "error": got})

    for value in (0, -3, True, False, 1.5, "8", None):
        attempt(shortlist.embed_fn_from_agent, "max_length",
                {"fn": "embed_fn_from_agent", "kwargs": {"max_length": value}}, agent,
                max_length=value)
        attempt(shortlist.embed_fn_from_agent, "batch_size",
                {"fn": "embed_fn_from_agent", "kwargs": {"batch_size": value}}, agent,
                batch_size=value)
        attempt(shortlist.cached_embed_fn, "maxsize",
                {"fn": "cached_embed_fn", "kwargs": {"maxsize": value}}, toy, maxsize=value)
    attempt(shortlist.embed_fn_from_agent, "both bad: max_length first",
            {"fn": "embed_fn_from_agent", "kwargs": {"max_length": 0, "batch_size": 0}}, agent,
            max_length=0, batch_size=0)
    for value in (None, "toy", 3):
        attempt(shortlist.cached_embed_fn, "not callable",
                {"fn": "cached_embed_fn", "embed_fn": repr(value), "kwargs": {}}, value)
    attempt(shortlist.cached_embed_fn, "not callable before a bad maxsize",
            {"fn": "cached_embed_fn", "embed_fn": "None", "kwargs": {"maxsize": 0}}, None,
            maxsize=0)
    attempt(shortlist.embed_fn_from_agent, "a Router",
            {"fn": "embed_fn_from_agent", "on": "router", "kwargs": {}}, router)
    attempt(shortlist.embed_fn_from_agent, "a Router, bad max_length",
            {"fn": "embed_fn_from_agent", "on": "router", "kwargs": {"max_length": 0}}, router,
            max_length=0)
    return cases


def f32(values: Any) -> List[List[float]]:
    return [[float("%.9g" % v) for v in row] for row in values]


def main() -> int:
    for key in [k for k in os.environ if k.startswith("LAYA_")]:
        del os.environ[key]
    import laya
    import laya.shortlist as shortlist

    data: Dict[str, Any] = {"laya_version": laya.__version__, "embeddings": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {name: laya.load(str(path), device="cpu") for name, path in CHECKPOINTS.items()}
        for name, agent in agents.items():
            hidden = agent.model.encoder.config.hidden_size
            for case in EMBED_CASES:
                fn = shortlist.embed_fn_from_agent(agent, **case["kwargs"])
                out = fn(case["texts"])
                data["embeddings"].append({
                    "id": "%s_%s" % (name, case["id"]), "checkpoint": name, "hidden": hidden,
                    "kwargs": case["kwargs"], "texts": case["texts"],
                    "shape": list(out.shape), "dtype": str(out.dtype), "vectors": f32(out)})
            # The cache over the real embedder: the same values, a hit on the second call.
            cached = shortlist.cached_embed_fn(shortlist.embed_fn_from_agent(agent, 16), 8)
            first = cached(TEXTS[:4])
            second = cached(TEXTS[2:6])
            data.setdefault("cached_agent", []).append({
                "checkpoint": name, "max_length": 16, "maxsize": 8,
                "calls": [TEXTS[:4], TEXTS[2:6]], "results": [f32(first), f32(second)],
                "info": cached.cache_info()})
        data["cache"] = record_cache(shortlist)
        router = laya.Router(models={"english": str(CHECKPOINTS["tiny"])}, device="cpu")
        data["refusals"] = refusals(shortlist, agents["tiny"], router)
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", OUT.relative_to(ROOT), "-", len(data["embeddings"]), "embedding cases,",
          sum(len(s["steps"]) for s in data["cache"]), "cache steps,", len(data["refusals"]),
          "refusals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
