"""OpenVINO as a bench peer: the exported Laya graph compiled for the CPU as an expert would,
behind the ONNX Runtime session interface Laya's `ONNXAgent` calls, so the same Laya code lays
out the questions and reads the answers whichever runtime runs the graph.

Imported by `peer_worker.py` in the peer interpreter (never by kime): `PEER_PYTHON -m pip
install openvino nncf` puts it there.

The settings are OpenVINO's own advice for one request at a time: `PERFORMANCE_HINT=LATENCY`,
`NUM_STREAMS=1`, `INFERENCE_NUM_THREADS` = the thread count asked for (kime's), and
`INFERENCE_PRECISION_HINT` f32 or bf16 (OpenVINO's default on a CPU with AVX512_BF16 is bf16
everywhere, so FP32 has to be asked for). INT8 is NNCF's post-training quantization of the graph
with `model_type=TRANSFORMER` (SmoothQuant on the MatMuls' inputs, then min-max ranges), which
quantizes the weight MatMuls and attention's QK^T and P.V, calibrated on single rows of the
bench's own workloads (whole W3 calls would need past 15 GB); its other operations run in FP32
(`INFERENCE_PRECISION_HINT=f32`), as kime INT8's and ONNX Runtime INT8's do.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import warnings

STAMP_VERSION = 1
OUTPUTS = ("logits", "act_logits")
INPUTS = ("input_ids", "attention_mask", "marker_pos", "marker_mask", "qtype")

_core = None


def versions():
    """openvino's and nncf's versions (None when missing) and why openvino does not import."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("openvino", "nncf"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    try:
        import openvino  # noqa: F401  # type: ignore[import-not-found]

        out["openvino_import"] = None
    except Exception as e:  # reported, not raised: the bench runs what it can
        out["openvino_import"] = "%s: %s" % (type(e).__name__, e)
    return out


def core():
    global _core
    if _core is None:
        import openvino as ov  # type: ignore[import-not-found]

        _core = ov.Core()
    return _core


class Session:
    """A compiled OpenVINO model behind `onnxruntime.InferenceSession.run`'s signature: one
    infer request, reused, its outputs copied out (Laya keeps them past the next call)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.ports = {o.get_any_name(): o for o in compiled.outputs}

    def run(self, names, feeds):
        result = self.request.infer(feeds, share_inputs=False, share_outputs=False)
        return [result[self.ports[n]] for n in names]


def compile_session(path, threads, precision):
    """`path` (an ONNX graph, or OpenVINO IR .xml) compiled for the CPU with the latency
    settings above; returns (Session, the properties the compiled model reports)."""
    import openvino.properties as props  # type: ignore[import-not-found]
    import openvino.properties.hint as hints  # type: ignore[import-not-found]

    if precision not in ("f32", "bf16"):
        raise ValueError("OpenVINO runs the graph in f32 or bf16, not %r" % (precision,))
    config = {hints.performance_mode: hints.PerformanceMode.LATENCY, props.num_streams: 1,
              hints.inference_precision: precision}
    if threads:
        config[props.inference_num_threads] = int(threads)
    model = core().read_model(path)
    compiled = core().compile_model(model, "CPU", config)
    seen = {}
    for key in ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS",
                "INFERENCE_PRECISION_HINT"):
        try:
            seen[key] = str(compiled.get_property(key))
        except RuntimeError:
            seen[key] = None
    return Session(compiled), seen


class Recorder:
    """A session that runs `inner` and keeps every batch of inputs it was given."""

    def __init__(self, inner):
        self.inner = inner
        self.feeds = []

    def run(self, names, feeds):
        self.feeds.append({k: v.copy() for k, v in feeds.items()})
        return self.inner.run(names, feeds)


def single_rows(batches):
    """Each row of recorded batches as a batch of its own, its padding cut: what a call with
    one question on one state feeds the graph."""
    rows = []
    for feeds in batches:
        att = feeds["attention_mask"]
        for i in range(att.shape[0]):
            n = int(att[i].sum())
            rows.append({"input_ids": feeds["input_ids"][i:i + 1, :n],
                         "attention_mask": att[i:i + 1, :n],
                         "marker_pos": feeds["marker_pos"][i:i + 1],
                         "marker_mask": feeds["marker_mask"][i:i + 1],
                         "qtype": feeds["qtype"][i:i + 1]})
    return rows


def _digest(rows):
    h = hashlib.sha256()
    for row in rows:
        for name in INPUTS:
            h.update(row[name].tobytes())
    return h.hexdigest()[:16]


def quantize(onnx, out, rows):
    """NNCF INT8 of the graph at `onnx`, calibrated on `rows` (single-row feeds), saved as
    OpenVINO IR at `out` (.xml) unless a matching one is there (a stamp beside it names the
    graph, the rows and both versions)."""
    import nncf  # type: ignore[import-not-found]
    import openvino as ov  # type: ignore[import-not-found]

    st = os.stat(onnx)
    stamp = {"version": STAMP_VERSION, "source": os.path.abspath(onnx), "size": st.st_size,
             "mtime_ns": st.st_mtime_ns, "openvino": ov.__version__,
             "nncf": nncf.__version__, "rows": len(rows), "rows_digest": _digest(rows)}
    stamp_path = out + ".json"
    try:
        with open(stamp_path) as f:
            fresh = json.load(f) == stamp and os.path.isfile(out)
    except (OSError, ValueError):
        fresh = False
    seconds = 0.0
    if not fresh:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = core().read_model(onnx)
            quantized = nncf.quantize(model, nncf.Dataset(rows),
                                      model_type=nncf.ModelType.TRANSFORMER,
                                      subset_size=len(rows))
        tmp = out[:-len(".xml")] + ".tmp.xml"
        ov.save_model(quantized, tmp, compress_to_fp16=False)
        os.replace(tmp, out)
        os.replace(tmp[:-len(".xml")] + ".bin", out[:-len(".xml")] + ".bin")
        seconds = time.perf_counter() - t0
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
    return {"quantized": not fresh, "seconds": seconds, "rows": len(rows),
            "size_bytes": os.path.getsize(out[:-len(".xml")] + ".bin"),
            "quantizer": "nncf.quantize(model_type=TRANSFORMER, subset_size=%d), nncf %s"
                         % (len(rows), nncf.__version__)}
