"""kime's benchmarks. Speed is measured here, never asserted in tests.

Run (the `env -u` keeps two OpenBLAS settings that slow a current OpenBLAS out of every
process; the bench also drops them itself, restarting once, if they are set):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench --shape base
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench --shape base --quick
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench --shape tiny --out tiny.json

Options: `--shape` (tiny, multilingual-tiny, base, large), `--precision f32` (int8, bf16, mixed,
or several side by side: f32,bf16), `--threads 0` (kime's threads; 0 = every core), `--peers
auto|none`, `--peer-python PATH`, `--openvino auto|on|off`,
`--peer-threads 1,2`, `--repeat N`, `--budget S`, `--quick`, `--workloads W1,W3`,
`--no-startup`, `--cache-dir DIR`, `--out report.json`. `--quick` is a smoke run: W1-W3 only, one
timed run each, peers at every core only, one startup run. Exit status 1 when a problem is listed
at the end of the report (a peer that does not give kime's W1 answer, a peer that failed).

What it does:

1. Writes a random checkpoint of the shape with `kime.testing.write_checkpoint` once, under
   `~/.cache/kime/bench/<shape>-seed0`, and reuses it (`bench/workloads.py`).
2. Builds the workloads with the checkpoint's own tokenizer and checks them with
   `Kime.rows_for`: W1 a 96-token state and a choice of 4; W2 a 300-token state and 5 questions;
   W3 a `max_len`-token state (rows exactly `max_len`, the state cut to fit) and 10 questions;
   W4 the same state and 50 questions; W9 `predict_batch` over 16 300-token states with the W2
   questions, in questions per second.
3. Times each through Laya's API (`kime.load(...).predict` / `.predict_batch`; the same calls on
   the peers): a warm-up run, then timed runs, fewer for slow workloads (as many as fit a
   60-s budget per engine, 3 to 30), reported as p50/p95/p99. The machine is shared, so each
   workload also reports how many cores other processes kept busy meanwhile (from /proc/stat,
   less the bench's own processes) and is marked NOISY above a quarter of a core.
4. Peers (`--peers auto`, when laya imports here or with the peer interpreter, see
   `bench/peers.py`): Laya's torch `Agent` at 1 and all threads, and Laya's `ONNXAgent` under
   ONNX Runtime at 1 and all threads, the best of each reported. They run in a side process
   (`bench/peer_worker.py`, JSON over stdin/stdout; torch never enters kime's process). The
   checkpoint is exported to ONNX once (cached next to it). Where the peer interpreter has
   `openvino` and `nncf` (`PEER_PYTHON -m pip install openvino nncf`), the same `ONNXAgent` also
   runs the export on OpenVINO at each precision timed (`bench/peer_openvino.py`: latency
   settings, FP32 or BF16 by its precision hint, INT8 from NNCF's SmoothQuant calibrated on
   single rows of the workloads), and ONNX Runtime on its `quantize_dynamic` INT8 when kime runs
   int8. Runs are interleaved (kime W1,
   torch W1, onnx W1, kime W1, ...; the order rotated each round) so machine noise hits all
   alike, and every peer's answers are compared with kime's: on W1 the same choice and every
   probability within 1e-3, or the run is flagged.
5. New processes, with a warm page cache: the import time and the load time (`kime.load`;
   the peers' `Agent` and `ONNXAgent`) and the first W1 answer, medians of 3; the last process
   then runs W3, and its peak RSS is the memory figure. Peak RSS is VmHWM from
   /proc/self/status, not `resource.getrusage`'s ru_maxrss: a child process inherits that from
   its parent across fork and exec, so a probe started by the bench (which holds a model) would
   report at least the bench's own RSS. ru_maxrss is the fallback where /proc is missing.
6. Prints a table per workload, a summary, startup and memory to stdout (progress goes to
   stderr) and, with `--out`, the whole report with every sample as JSON.

`python -m bench.table` (`bench/table.py`) is the peers table in one run: kime, ONNX Runtime
and OpenVINO at every precision, W1 and W3 quiet and W1 beside a process spinning on one core,
p50 / p90. `python -m bench.busy` is W1 against ONNX Runtime quiet, back to back and beside a
spinner, with the CPU each call ran.

The GEMM and attention micro-benchmarks (`bench/gemm.py`, `bench/qgemm.py`, `bench/bgemm.py`,
`bench/attention.py`) and the reference forward's own timer (`bench/reference.py`) are separate
modules.
"""
