"""Record the precision contract's bounds (issue 55): how far Laya 0.4.15's own CPU autocast
(`LAYA_CPU_AMP=bf16`) and ONNX Runtime's `quantize_dynamic` INT8 move Laya's FP32 answers, on
the bench's workloads W1, W2 and W3, into `tests/goldens/precision.json`. Run ONLY with the
oracle interpreter (laya, torch, onnx and onnxruntime; `tools/oracle-requirements.txt`):

    .oracle/bin/python tools/goldens_precision.py [--checkpoints tiny,multilingual-tiny,base]
                                                  [--out FILE] [--cache-dir DIR]

kime's `bf16` may move the answers no more than the first, its `int8` no more than the second
(docs/precision.md); `tests/core/test_precision_contract.py` holds kime to these numbers, and
runs this script itself where the oracle is there.

Checkpoints: the goldens' `tiny` and `multilingual-tiny` (committed), and `base`, ModernBERT-
base's shape at the synthetic writer's own weight scale, seed 0 (`kime.synthetic`, written into
`--cache-dir` as the bench writes it; its `model.safetensors` digest is recorded so a reader can
tell it wrote the same weights). Workloads, as `bench/workloads.py` builds them from the
checkpoint's tokenizer: W1 a 96-token state with a choice of 4; W2 a 300-token state with 5
questions; W3 a state of `max_len` tokens with 10 (a state longer than `max_len` is cut as any).

Systems, each on every checkpoint and workload, one `predict` each:
- `fp32`: `laya.agent.Agent(path, device="cpu")`, the reference;
- `laya-amp-bf16`: the same with `LAYA_CPU_AMP=bf16` at load (torch's CPU autocast: the
  encoder's and head's matmuls and attention in bfloat16);
- `ort-int8`: `laya.onnx_agent.ONNXAgent` on the checkpoint's ONNX export
  (`bench/peer_worker.py`'s exporter) after `onnxruntime.quantization.quantize_dynamic` with its
  defaults (INT8 weights, dynamic uint8 activations; attention's matmuls stay FP32), one
  ONNX Runtime thread so its sums run in one order.

`precision.json` (UTF-8, indent 1): the versions, `checkpoints` (where each is and its digest),
`systems` (what each peer is) and `cases`, one per (checkpoint, workload): `state`,
`questions`, FP32's `result` (Laya's dict) and raw `logits` (per question, in Laya's option
layout), and per peer its `deviation` from FP32 (`tests/contract.py`: `probs`, `logits`,
`flips`) and its `labels` (each question's top option, as the raw logits' argmax).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import laya  # noqa: E402
import laya.agent  # noqa: E402
import laya.onnx_agent  # noqa: E402
import make_goldens as mg  # noqa: E402  (its import puts kime.synthetic on the path)
import peer_worker  # noqa: E402  (bench/: the ONNX exporter and quantizer the bench uses)

from bench import workloads as wl  # noqa: E402
from kime.synthetic import write_checkpoint  # noqa: E402
from tests.contract import deviation  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "precision.json"
CHECKPOINTS = ("tiny", "multilingual-tiny", "base")
PEERS = {
    "laya-amp-bf16": "laya.agent.Agent with LAYA_CPU_AMP=bf16: torch's CPU autocast, matmuls "
                     "and attention in bfloat16 (kime's bf16 may move the answers no further)",
    "ort-int8": "laya.onnx_agent.ONNXAgent on the export after onnxruntime's quantize_dynamic "
                "(INT8 weights, dynamic uint8 activations), one thread (kime's int8 may move the "
                "answers no further)",
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint(name: str, cache: Path) -> Tuple[Path, Dict[str, Any]]:
    """The checkpoint's directory and how it was made."""
    if name in ("tiny", "multilingual-tiny"):
        path = ROOT / "tests" / "goldens" / "checkpoints" / name
        info: Dict[str, Any] = {"path": str(path.relative_to(ROOT))}
    else:
        path = cache / ("%s-seed0" % name)
        if not (path / "model.safetensors").is_file():
            write_checkpoint(str(path), shape=name, seed=0)
        info = {"shape": name, "seed": 0, "writer": "kime.synthetic.write_checkpoint"}
    info["model_sha256"] = sha256(path / "model.safetensors")
    return path, info


def workloads(path: Path) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """W1, W2 and W3 as `bench.workloads.build_workloads` makes them for this checkpoint."""
    encode = wl.tokenizer_encoder(str(path))
    max_len = int(json.loads((path / "rl_agent_config.json").read_text()).get("max_len", 512))

    def state(n: int, seed: int) -> str:
        return wl.exact_tokens_text(encode, wl.source_text(seed, sentences=max(40, n // 8)), n)

    return {"W1": (state(96, 1), wl.questions_w1()), "W2": (state(300, 2), wl.questions_w2()),
            "W3": (state(max_len, 3), wl.questions_w3())}


class TorchRows:
    """Keeps the raw option logits of every row `Agent._forward` runs (as make_goldens.Recorder)."""

    def __init__(self, agent: Any):
        self.rows: List[List[float]] = []
        self.agent, self._forward = agent, agent._forward
        agent._forward = self

    def __call__(self, b: Dict[str, Any]):
        logits, act = self._forward(b)
        for i, k in enumerate(b["marker_mask"].numpy().sum(axis=1)):
            self.rows.append([float(x) for x in logits[i, :int(k)]])
        return logits, act

    def close(self) -> None:
        self.agent._forward = self._forward


class SessionRows:
    """The same for `ONNXAgent`: its session's `logits` output, cut at each row's markers."""

    def __init__(self, agent: Any):
        self.rows: List[List[float]] = []
        self.agent, self._session = agent, agent.session
        agent.session = self

    def run(self, names: List[str], inputs: Dict[str, np.ndarray]):
        out = self._session.run(names, inputs)
        for i, k in enumerate(inputs["marker_mask"].sum(axis=1)):
            self.rows.append([float(x) for x in out[0][i, :int(k)]])
        return out

    def close(self) -> None:
        self.agent.session = self._session


def answer(agent: Any, rows: Callable[[Any], Any], state: str,
           questions: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, List[float]]]:
    """Laya's result for one request and its raw logits by question id."""
    recorder = rows(agent)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = agent.predict(state, questions)
    finally:
        recorder.close()
    if len(recorder.rows) != len(questions):
        raise AssertionError("%d rows for %d questions" % (len(recorder.rows), len(questions)))
    return result, dict(zip(questions, recorder.rows))


def load_torch(path: Path, amp: bool) -> Any:
    """Laya's Agent, in FP32 or under its CPU autocast (read at load)."""
    os.environ.pop("LAYA_CPU_AMP", None)
    if amp:
        os.environ["LAYA_CPU_AMP"] = "bf16"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = laya.agent.Agent(str(path), device="cpu")
    finally:
        os.environ.pop("LAYA_CPU_AMP", None)
    if agent.dtype != (torch.bfloat16 if amp else torch.float32):
        raise AssertionError("Laya chose %s with amp=%s" % (agent.dtype, amp))
    return agent


def load_ort_int8(path: Path, fp32: Any, cache: Path) -> Any:
    """ONNXAgent on the quantized export, with one ONNX Runtime thread."""
    out = cache / (path.name + "-onnx")
    out.mkdir(parents=True, exist_ok=True)
    graph = str(out / "laya.onnx")
    check = peer_worker.export_onnx(fp32.model.eval(), str(path), graph)
    if check["max_diff"] > 1e-3:
        raise AssertionError("the ONNX export differs from torch by %g" % check["max_diff"])
    quantized = str(out / "laya.int8.onnx")
    peer_worker.quantize_onnx(graph, quantized)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = laya.onnx_agent.ONNXAgent(str(path), onnx_path=quantized)
    agent.session = peer_worker._ort_sessions(quantized, [1])[1]
    return agent


def record(names: List[str], cache: Path) -> Dict[str, Any]:
    torch.manual_seed(0)
    out: Dict[str, Any] = {
        "laya_version": laya.__version__, "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "onnxruntime_version": onnxruntime.__version__, "checkpoints": {}, "systems": PEERS,
        "cases": []}
    for name in names:
        path, info = checkpoint(name, cache)
        out["checkpoints"][name] = info
        fp32, amp = load_torch(path, amp=False), load_torch(path, amp=True)
        ort = load_ort_int8(path, fp32, cache)
        for wname, (state, questions) in workloads(path).items():
            want, want_logits = answer(fp32, TorchRows, state, questions)
            case: Dict[str, Any] = {
                "checkpoint": name, "workload": wname, "state": state, "questions": questions,
                "fp32": {"result": want, "logits": want_logits}, "peers": {}}
            for peer, agent, rows in (("laya-amp-bf16", amp, TorchRows),
                                      ("ort-int8", ort, SessionRows)):
                got, got_logits = answer(agent, rows, state, questions)
                case["peers"][peer] = {
                    "deviation": deviation(want, want_logits, got, got_logits),
                    "labels": {q: int(np.argmax(v)) for q, v in got_logits.items()}}
            out["cases"].append(case)
            print("%-18s %s  " % (name, wname) + "   ".join(
                "%s: probs %.4f logits %.4f flips %s" % (p, d["deviation"]["probs"],
                                                         d["deviation"]["logits"],
                                                         d["deviation"]["flips"])
                for p, d in case["peers"].items()), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoints", default=",".join(CHECKPOINTS))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--cache-dir", default=os.path.join("~", ".cache", "kime", "bench"),
                    help="where the base checkpoint and the ONNX exports are kept")
    args = ap.parse_args()
    names = [n for n in args.checkpoints.split(",") if n]
    unknown = sorted(set(names) - set(CHECKPOINTS) - set(mg.CHECKPOINTS) - {"large"})
    if unknown:
        ap.error("unknown checkpoints %s" % unknown)
    data = record(names, Path(os.path.expanduser(args.cache_dir)))
    Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
