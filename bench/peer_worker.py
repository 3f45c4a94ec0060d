"""The bench's side process: Laya's torch `Agent` and `ONNXAgent` behind JSON lines.

Run by `python -m bench` with the peer interpreter (a virtual environment with laya, torch and
onnxruntime), as a file, never imported: `PEER_PYTHON bench/peer_worker.py`. kime is not imported
here and torch never enters kime's process.

Protocol: one JSON object per line on stdin, one JSON reply per line on stdout; every reply has
`ok` and, on failure, `error` and `traceback`. Anything the libraries print goes to stderr, so
stdout carries only replies. Requests (`op`):

- `hello`: versions of python, laya, torch, transformers, onnxruntime (null when missing), and
  why `laya.agent`, `laya.onnx_agent` or `onnxruntime` does not import (null when it does).
- `load_torch` {path}: `laya.agent.Agent(path, device="cpu")`.
- `export_onnx` {path, out}: export the loaded torch model to `out` (below), unless `out` and its
  stamp already match this checkpoint and torch; then check ONNX Runtime against torch.
- `load_onnx` {path, onnx, threads: [..], name: onnx|onnx-int8}: `laya.onnx_agent.ONNXAgent(path,
  onnx_path=onnx)`, and one ONNX Runtime session per thread count, built with ONNXAgent's own
  session options, kept under `name`.
- `workloads` {items: {name: {kind, states, questions}}}: keep the workloads.
- `quantize_onnx` {onnx, out}: `onnxruntime.quantization.quantize_dynamic` with its defaults
  (INT8 weights, dynamic uint8 activations) on the exported graph, unless `out` and its stamp
  already match it; what a user who wants INT8 without kime would do.
- `load_openvino` {path, export, graph, threads: [..], precision: f32|bf16, name}: the graph
  (the ONNX export, or NNCF's INT8 IR) compiled by OpenVINO for each thread count with the latency
  settings of `peer_openvino.py`, behind ONNXAgent as `name` (openvino, openvino-bf16,
  openvino-int8); replies what the compiled models report.
- `quantize_openvino` {onnx, out, workloads: [names]}: NNCF INT8 of the export (cached at
  `out`, OpenVINO IR), calibrated on every row of the named workloads, one row at a time.
- `memory`: this process's RSS now and at its peak (`rss_kb`, `peak_kb`).
- `matmul` {name, K, N, M, seed, dir, threads}: one ONNX MatMul of an [M, K] input by the
  weights numpy's `default_rng(seed).standard_normal((N, K))` makes (the ones `bench.qgemm`
  packs, transposed), written under `dir`, and its `quantize_dynamic` INT8 twin (QInt8 weights,
  dynamic uint8 input: MLAS's u8s8 kernel); one session each with ONNXAgent's options, kept under
  `name` with the [M, K] input `default_rng([seed, M])` makes (`bench.qgemm`'s A); replies the
  INT8 graph's node types and each session's first 8 outputs of the input's first row (`head`).
- `matmul_run` {name, precision: f32|int8, warm}: one timed call of that MatMul (after an
  untimed one when `warm` is true); replies `seconds`.
- `run` {engine: torch|onnx|onnx-int8|openvino|..., threads, workload, result}: one timed
  call; replies `seconds` and, when `result` is true, what the call returned.
- `quit`.

Laya ships no ONNX exporter for these checkpoints (`ONNXAgent` says "run export_onnx.py first"),
so `export_onnx` writes the graph `ONNXAgent` runs: inputs `input_ids` [n, L] int64,
`attention_mask` [n, L] int64, `marker_pos` [n, k] int64, `marker_mask` [n, k] bool, `qtype` [n]
int64; outputs `logits` [n, k] and `act_logits` [n, n_act]; every dimension dynamic. It uses
the TorchScript exporter (`dynamo=False`): Laya's `_DynamicMultiheadAttention` exists to keep that
exporter's shapes dynamic, and on this model the dynamo exporter's graph ran about 3x slower
under ONNX Runtime. The trace input has a padded row, so the graph keeps the masked path.

Also runnable as a probe for startup time and memory, in a fresh process:
`PEER_PYTHON bench/peer_worker.py --probe torch|onnx|openvino --path CKPT [--onnx FILE]
[--export FILE] [--ov-precision f32|bf16] [--first W1.json] [--then W3.json]` prints one JSON
line: `import_s`, `load_s`, `rss_load_kb`, `first_s` (the first call, `--first`) and
`rss_peak_kb` (peak RSS after `--then` runs too). For openvino, `--onnx` is the graph compiled
(the export or NNCF's IR) and `--export` the FP32 export ONNXAgent is made on.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
import warnings

STAMP_VERSION = 1


def _versions():
    """Installed versions (None when missing) and whether Laya's two agents import."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("laya", "torch", "transformers", "onnxruntime", "onnx", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    for key, module in (("torch_agent", "laya.agent"), ("onnx_agent", "laya.onnx_agent"),
                        ("onnxruntime_import", "onnxruntime")):
        try:
            __import__(module)
            out[key] = None
        except Exception as e:  # reported, not raised: the bench runs what it can
            out[key] = "%s: %s" % (type(e).__name__, e)
    import peer_openvino

    out.update(peer_openvino.versions())
    return out


def _rss_kb(current=False):
    """Peak RSS of this process in KiB (its RSS now with `current`): VmHWM, the high-water mark
    of this process's own memory map. Not `getrusage`'s ru_maxrss, which a child inherits from
    the process that started it (it survives fork and exec), so a probe started by a big bench
    would report the bench."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:" if current else "VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _call(agent, workload):
    if workload["kind"] == "predict_batch":
        return agent.predict_batch(workload["states"], workload["questions"])
    return agent.predict(workload["states"][0], workload["questions"])


def _ort_sessions(path, threads):
    """ONNX Runtime sessions with ONNXAgent's options (ORT_ENABLE_ALL, CPU provider) and a
    thread count each; 0 is ONNX Runtime's default."""
    import onnxruntime as ort  # type: ignore[import-not-found]

    out = {}
    for t in threads:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = int(t)
        out[int(t)] = ort.InferenceSession(path, sess_options=so,
                                           providers=["CPUExecutionProvider"])
    return out


def _stamp_for(path):
    import torch  # type: ignore[import-not-found]

    st = os.stat(os.path.join(path, "model.safetensors"))
    return {"version": STAMP_VERSION, "checkpoint": os.path.abspath(path), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "torch": torch.__version__, "exporter": "torchscript"}


def export_onnx(model, path, out, log=None):
    """Export `model` (Laya's DecisionModel, eval mode) to `out` unless a matching export is
    there; returns {exported, seconds, max_diff} where max_diff compares ONNX Runtime with torch
    on a fresh padded batch of another shape."""
    import numpy as np
    import torch  # type: ignore[import-not-found]

    stamp_path = out + ".json"
    stamp = _stamp_for(path)
    exported, seconds = False, 0.0
    try:
        with open(stamp_path) as f:
            fresh = json.load(f) == stamp and os.path.isfile(out)
    except (OSError, ValueError):
        fresh = False
    cfg = model.encoder.config
    max_len = 512
    try:
        with open(os.path.join(path, "rl_agent_config.json")) as f:
            max_len = int(json.load(f).get("max_len", 512))
    except (OSError, ValueError):
        pass
    vocab = int(cfg.vocab_size)
    gen = torch.Generator().manual_seed(0)
    if not fresh:
        length = min(64, max_len)
        ids = torch.randint(5, min(vocab, 1000), (2, length), generator=gen)
        att = torch.ones(2, length, dtype=torch.long)
        att[1, length - 16:] = 0
        mpos = torch.tensor([[5, 8, 11, 14], [5, 8, 0, 0]])
        mmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
        qtype = torch.tensor([0, 1])
        tmp = out + ".tmp"
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (ids, att, mpos, mmask, qtype), tmp, dynamo=False, opset_version=17,
                input_names=["input_ids", "attention_mask", "marker_pos", "marker_mask", "qtype"],
                output_names=["logits", "act_logits"],
                dynamic_axes={"input_ids": {0: "n", 1: "L"}, "attention_mask": {0: "n", 1: "L"},
                              "marker_pos": {0: "n", 1: "k"}, "marker_mask": {0: "n", 1: "k"},
                              "qtype": {0: "n"}, "logits": {0: "n", 1: "k"},
                              "act_logits": {0: "n"}})
        seconds = time.perf_counter() - t0
        os.replace(tmp, out)
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
        exported = True
    # A batch of another shape than the trace: 3 rows, one padded, 5 marker columns.
    length = min(100, max_len)
    ids = torch.randint(5, min(vocab, 1000), (3, length), generator=gen)
    att = torch.ones(3, length, dtype=torch.long)
    att[2, length - 30:] = 0
    mpos = torch.tensor([[5, 8, 11, 14, 17], [5, 8, 0, 0, 0], [3, 6, 9, 0, 0]])
    mmask = mpos > 0
    qtype = torch.tensor([0, 1, 2])
    (sess,) = _ort_sessions(out, [0]).values()
    got = sess.run(["logits", "act_logits"], {
        "input_ids": ids.numpy(), "attention_mask": att.numpy(), "marker_pos": mpos.numpy(),
        "marker_mask": mmask.numpy(), "qtype": qtype.numpy()})
    with torch.no_grad():
        want = model(ids, att, mpos, mmask, qtype)
    diff = max(float(np.abs(got[0] - want[0].numpy()).max()),
               float(np.abs(got[1] - want[1].numpy()).max()))
    del sess
    return {"exported": exported, "seconds": seconds, "max_diff": diff,
            "size_bytes": os.path.getsize(out), "exporter": "torch.onnx.export(dynamo=False)"}


def quantize_onnx(src, out):
    """`quantize_dynamic` of `src` into `out` unless a matching one is there."""
    import onnxruntime  # type: ignore[import-not-found]
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-not-found]

    st = os.stat(src)
    stamp = {"source": os.path.abspath(src), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
             "onnxruntime": onnxruntime.__version__, "weight_type": "QInt8"}
    stamp_path = out + ".json"
    try:
        with open(stamp_path) as f:
            fresh = json.load(f) == stamp and os.path.isfile(out)
    except (OSError, ValueError):
        fresh = False
    seconds = 0.0
    if not fresh:
        tmp = out + ".tmp.onnx"
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(src, tmp, weight_type=QuantType.QInt8)
        seconds = time.perf_counter() - t0
        os.replace(tmp, out)
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
    return {"quantized": not fresh, "seconds": seconds, "size_bytes": os.path.getsize(out),
            "quantizer": "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)"}


class Worker:
    def __init__(self):
        self.torch_agent = None
        self.onnx_agent = None
        self.sessions = {}  # name (onnx, onnx-int8) -> threads -> session
        self.workloads = {}
        self.matmuls = {}  # name -> ({f32, int8} -> session, input)

    def hello(self, req):
        return {"versions": _versions(), "cpu_count": os.cpu_count(), "pid": os.getpid()}

    def load_torch(self, req):
        import torch  # type: ignore[import-not-found]
        from laya.agent import Agent  # type: ignore[import-not-found]

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.torch_agent = Agent(req["path"], device="cpu")
        return {"seconds": time.perf_counter() - t0, "dtype": str(self.torch_agent.dtype),
                "threads": torch.get_num_threads()}

    def export_onnx(self, req):
        """The export, checked against torch; a torch Agent loaded only for it is dropped after
        (on `large` it holds gigabytes the ONNX Runtime and OpenVINO runs need)."""
        borrowed = self.torch_agent is None
        if borrowed:
            self.load_torch(req)
        try:
            return export_onnx(self.torch_agent.model.eval(), req["path"], req["out"])
        finally:
            if borrowed:
                self.torch_agent = None
                gc.collect()

    def memory(self, req):
        return {"rss_kb": _rss_kb(current=True), "peak_kb": _rss_kb()}

    def load_onnx(self, req):
        from laya.onnx_agent import ONNXAgent  # type: ignore[import-not-found]

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = ONNXAgent(req["path"], onnx_path=req["onnx"])
        seconds = time.perf_counter() - t0
        if self.onnx_agent is None:
            self.onnx_agent = agent  # one agent; the graph is its session, swapped per run
        del agent
        name = req.get("name") or "onnx"
        self.sessions[name] = _ort_sessions(req["onnx"], req.get("threads") or [0])
        self.onnx_agent.session = None
        gc.collect()
        return {"seconds": seconds, "threads": sorted(self.sessions[name])}

    def quantize_onnx(self, req):
        return quantize_onnx(req["onnx"], req["out"])

    def _agent(self, path, onnx):
        """The ONNXAgent every graph runs behind (made on the FP32 export if none is yet)."""
        if self.onnx_agent is None:
            from laya.onnx_agent import ONNXAgent  # type: ignore[import-not-found]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.onnx_agent = ONNXAgent(path, onnx_path=onnx)
            self.onnx_agent.session = None
        return self.onnx_agent

    def load_openvino(self, req):
        import peer_openvino

        self._agent(req["path"], req.get("export") or req["graph"])
        t0 = time.perf_counter()
        sessions, seen = {}, {}
        for t in req.get("threads") or [0]:
            sessions[int(t)], seen[int(t)] = peer_openvino.compile_session(
                req["graph"], int(t), req.get("precision") or "f32")
        self.sessions[req["name"]] = sessions
        return {"seconds": time.perf_counter() - t0, "compiled": seen}

    def quantize_openvino(self, req):
        import peer_openvino

        agent = self._agent(req["path"], req["onnx"])
        (inner,) = _ort_sessions(req["onnx"], [0]).values()
        recorder = peer_openvino.Recorder(inner)
        agent.session = recorder
        try:
            for name in req["workloads"]:
                _call(agent, self.workloads[name])
        finally:
            agent.session = None
        rows = peer_openvino.single_rows(recorder.feeds)
        del inner, recorder
        gc.collect()
        return peer_openvino.quantize(req["onnx"], req["out"], rows)

    def matmul(self, req):
        import numpy as np
        import onnx  # type: ignore[import-not-found]
        from onnx import TensorProto, helper, numpy_helper  # type: ignore[import-not-found]

        K, N, M = int(req["K"]), int(req["N"]), int(req["M"])
        seed = int(req["seed"])
        W = np.random.default_rng(seed).standard_normal((N, K), dtype=np.float32)
        x = np.random.default_rng([seed, M]).standard_normal((M, K), dtype=np.float32)
        os.makedirs(req["dir"], exist_ok=True)
        src = os.path.join(req["dir"], "%s.onnx" % req["name"])
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], req["name"],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", K])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", N])],
            [numpy_helper.from_array(np.ascontiguousarray(W.T), "w")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
        out = src[:-len(".onnx")] + ".int8.onnx"
        quantize_onnx(src, out)
        threads = [int(req.get("threads") or 0)]
        (f32,) = _ort_sessions(src, threads).values()
        (int8,) = _ort_sessions(out, threads).values()
        self.matmuls[req["name"]] = ({"f32": f32, "int8": int8}, x)
        return {"nodes": [n.op_type for n in onnx.load(out).graph.node],
                "head": {p: s.run(None, {"x": x[:1]})[0][0, :8].tolist()
                         for p, s in (("f32", f32), ("int8", int8))}}

    def matmul_run(self, req):
        sessions, x = self.matmuls[req["name"]]
        session = sessions[req["precision"]]
        if req.get("warm"):  # an untimed call first: its threads wake for that one
            session.run(None, {"x": x})
        t0 = time.perf_counter()
        session.run(None, {"x": x})
        return {"seconds": time.perf_counter() - t0}

    def set_workloads(self, req):
        self.workloads.update(req["items"])
        return {"names": sorted(self.workloads)}

    def run(self, req):
        workload = self.workloads[req["workload"]]
        threads = int(req.get("threads") or 0)
        if req["engine"] == "torch":
            import torch  # type: ignore[import-not-found]

            agent = self.torch_agent
            if threads:
                torch.set_num_threads(threads)
        elif req["engine"] in self.sessions:
            agent = self.onnx_agent
            if agent is None:
                raise ValueError("no ONNXAgent to run %r behind" % req["engine"])
            agent.session = self.sessions[req["engine"]][threads]
        else:
            raise ValueError("unknown engine %r" % (req["engine"],))
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        result = _call(agent, workload)
        seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        return {"seconds": seconds, "cpu_s": cpu_s, "result": result if req.get("result") else None}


def serve():
    # Replies go to the real stdout; everything else that writes to fd 1 lands on stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker()
    ops = {"hello": worker.hello, "load_torch": worker.load_torch,
           "export_onnx": worker.export_onnx, "load_onnx": worker.load_onnx,
           "quantize_onnx": worker.quantize_onnx, "load_openvino": worker.load_openvino,
           "quantize_openvino": worker.quantize_openvino, "workloads": worker.set_workloads,
           "memory": worker.memory, "matmul": worker.matmul, "matmul_run": worker.matmul_run,
           "run": worker.run}
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            proto.write(json.dumps({"ok": True}) + "\n")
            break
        try:
            reply = ops[req["op"]](req)
            reply["ok"] = True
        except BaseException as e:  # reported to the bench, which decides what to do
            reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e),
                     "traceback": traceback.format_exc()}
        proto.write(json.dumps(reply) + "\n")


def probe(argv):
    """Startup time and memory of a fresh process: import, load, first call, peak RSS."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", choices=["torch", "onnx", "openvino"], required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--onnx")
    ap.add_argument("--first", help="a JSON workload {kind, states, questions} to time once")
    ap.add_argument("--then", help="a JSON workload to run after it, for the peak RSS")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ov-precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--export", help="openvino: the FP32 ONNX export ONNXAgent is made on")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    if args.probe == "torch":
        import torch  # type: ignore[import-not-found]
        from laya.agent import Agent  # type: ignore[import-not-found]
    elif args.probe == "openvino":
        import openvino  # type: ignore[import-not-found]  # noqa: F401  (what its user imports)
        import peer_openvino
        from laya.onnx_agent import ONNXAgent  # type: ignore[import-not-found]
    else:
        import onnxruntime  # type: ignore[import-not-found]  # noqa: F401  (what a user of ONNXAgent imports)
        from laya.onnx_agent import ONNXAgent  # type: ignore[import-not-found]
    t1 = time.perf_counter()
    if args.probe == "torch":
        agent = Agent(args.path, device="cpu")
        if args.threads:
            torch.set_num_threads(args.threads)
    elif args.probe == "openvino":
        agent = ONNXAgent(args.path, onnx_path=args.export or args.onnx)
        agent.session = peer_openvino.compile_session(args.onnx, args.threads,
                                                      args.ov_precision)[0]
    else:
        agent = ONNXAgent(args.path, onnx_path=args.onnx)
        if args.threads:
            agent.session = _ort_sessions(args.onnx, [args.threads])[args.threads]
    t2 = time.perf_counter()
    out = {"import_s": t1 - t0, "load_s": t2 - t1, "rss_load_kb": _rss_kb()}
    for key, path in (("first", args.first), ("then", args.then)):
        if path:
            with open(path) as f:
                workload = json.load(f)
            t3 = time.perf_counter()
            _call(agent, workload)
            out[key + "_s"] = time.perf_counter() - t3
    out["rss_peak_kb"] = _rss_kb()
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    if "--probe" in sys.argv[1:]:
        probe(sys.argv[1:])
    else:
        serve()
