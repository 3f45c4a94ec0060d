"""`kime` on the command line: arguments -> engine, answers -> JSON on stdout.

Errors are one line on stderr without a traceback (`--verbose` shows it), and the exit code
says what went wrong: 2 for a bad request or arguments, 3 for a model that is not found or does
not load, 4 for a device or feature this machine cannot run, 5 for a precision gate that fails,
1 for anything else.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Dict, List, Optional

from ._version import __version__
from .errors import (BadOption, CheckpointError, InvalidRequest, KimeError, ModelNotFound,
                     Unsupported)

EXIT_USAGE, EXIT_MODEL, EXIT_DEVICE, EXIT_OTHER, EXIT_GATE = 2, 3, 4, 1, 5


def _read_state(args: argparse.Namespace) -> Any:
    if args.state is not None and args.state_file is not None:
        raise _Usage("give the state with --state or --state-file, not both")
    if args.state_file is not None:
        text = sys.stdin.read() if args.state_file == "-" else open(args.state_file, encoding="utf-8").read()
    elif args.state is not None:
        text = args.state
    else:
        if sys.stdin.isatty():
            raise _Usage("no state: pass --state TEXT, --state-file FILE, or pipe it on stdin")
        text = sys.stdin.read()
    if args.json_state:
        try:
            return json.loads(text)
        except ValueError as e:
            raise _Usage("--json-state: the state is not JSON: %s" % e) from e
    return text


class _Usage(Exception):
    pass


def _read_questions(path: Optional[str]) -> Any:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise _Usage("cannot read --questions %s: %s" % (path, e.strerror)) from e
    except ValueError as e:
        raise _Usage("--questions %s is not JSON: %s" % (path, e)) from e


def _routed(args: argparse.Namespace) -> bool:
    """`--model auto`: a Router picks each request's checkpoint, as Laya's CLI does. Without it,
    the flags that only choose a checkpoint have nothing to choose."""
    if args.model.strip().lower() == "auto":
        return True
    given = [flag for flag, value in (("--task", args.task), ("--lang-guess", args.lang_guess))
             if value is not None]
    if given:
        raise _Usage("%s choose among checkpoints: use them with --model auto"
                     % " and ".join(given))
    return False


def _decide(args: argparse.Namespace) -> int:
    questions = _read_questions(args.questions)
    if args.batch is None:
        if questions is None:
            raise _Usage("--questions is required (or give each request its own in --batch)")
        state = _read_state(args)
    elif args.state is not None or args.state_file is not None:
        raise _Usage("--batch reads its states from its lines: drop --state/--state-file")
    if _routed(args):
        from .laya.router import Router

        answerer: Any = Router(device=args.device, agent_kwargs={
            "precision": args.precision, "threads": args.threads})
    else:
        from .laya import load

        answerer = load(args.model, device=args.device, precision=args.precision,
                        threads=args.threads)
    from .decide_batch import CONTROLS

    defaults = {key: getattr(args, key) for key in CONTROLS if getattr(args, key) is not None}
    if args.batch is not None:
        return _decide_batch(args, answerer, questions, defaults)
    result = answerer.predict(state, questions, min_confidence=args.min_confidence, **defaults)
    json.dump(result, sys.stdout, ensure_ascii=False, indent=None if args.compact else 2)
    sys.stdout.write("\n")
    return 0


def _decide_batch(args: argparse.Namespace, answerer: Any, questions: Any,
                  defaults: Dict[str, Any]) -> int:
    from .decide_batch import answer_lines

    if args.batch_size < 1:
        raise _Usage("--batch-size must be a positive integer, got %d" % args.batch_size)
    try:
        handle = sys.stdin if args.batch == "-" else open(args.batch, encoding="utf-8")
    except OSError as e:
        raise _Usage("cannot read --batch %s: %s" % (args.batch, e.strerror)) from e
    with handle:
        failed = answer_lines(handle, answerer, questions, defaults, args.batch_size,
                              args.min_confidence, sys.stdout)
    if failed:
        print("kime: error: %d request(s) failed, on line(s) %s" % (
            len(failed), ", ".join(map(str, failed))), file=sys.stderr)
        return EXIT_USAGE
    return 0


def _model_name(value: str) -> Optional[str]:
    """`kime route --model`: a checkpoint name or alias, or `auto` (None: let routing choose)."""
    if value.strip().lower() == "auto":
        return None
    from .laya.routing import normalise_name

    try:
        return normalise_name(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError("%s, or 'auto'" % e) from None


def _min_confidence(value: str) -> Any:
    """`--min-confidence`: a number the confidence gate accepts (its range, its message)."""
    from .laya.confidence import check_min_confidence

    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number in [0.0, 1.0], got %r"
                                         % value) from None
    try:
        return check_min_confidence(number)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _route(args: argparse.Namespace) -> int:
    """Laya's default command: which checkpoint a text goes to and why, loading nothing."""
    from .laya.router import Router

    text = " ".join(args.text).strip()
    if not text:
        raise _Usage("no text to route")
    decision = Router().route({"text": text}, model=args.model, task=args.task, lang=args.lang,
                              lang_guess=args.lang_guess, explain=args.explain)
    if args.json:
        print(json.dumps(dict(decision), ensure_ascii=False, indent=2, default=str))
        return 0
    print("Model     :", decision["model"])
    print("Reason    :", decision["reason"])
    if decision.get("detection"):
        print("Detected  :", json.dumps(decision["detection"], ensure_ascii=False))
    return 0


_DOCTOR_PACKAGES = ("numpy", "tokenizers", "safetensors", "huggingface_hub", "threadpoolctl")


def _version(package: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(package.replace("_", "-"))
    except metadata.PackageNotFoundError:
        try:
            return str(__import__(package).__version__)
        except Exception:
            return None


def _doctor_report() -> dict:
    from .backend import cpu_count

    report: dict = {
        "kime": __version__,
        "python": "%s (%s)" % (platform.python_version(), sys.executable),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in _DOCTOR_PACKAGES},
    }
    cpu: dict = {"threads": cpu_count(), "kime_isa_env": os.environ.get("KIME_ISA")}
    try:
        from ._cpu import _bgemm, _forward, _ops, _qgemm
        from ._cpu.backend import bf16_missing

        cpu["isa"] = _forward.isa_name(_forward.isa_detect())
        cpu["int8_kernels"] = _qgemm.impl_name()
        cpu["kime_qgemm_env"] = os.environ.get("KIME_QGEMM")
        cpu["bf16_missing"] = bf16_missing()
        cpu["bf16_kernels"] = _bgemm.KERNELS if cpu["bf16_missing"] is None else None
        cpu["openmp"] = bool(_ops.has_openmp())
    except Exception as e:  # a broken build is what doctor is for: report it, don't die
        cpu["isa"] = None
        cpu["openmp"] = None
        cpu["error"] = "%s: %s" % (type(e).__name__, e)
    cpu["backend"] = os.environ.get("KIME_CPU_BACKEND", "compiled")
    report["cpu"] = cpu
    gpu: dict = {"cupy": None, "devices": 0}
    try:
        import cupy  # type: ignore[import-not-found]  # optional: kime never needs it

        gpu["cupy"] = str(cupy.__version__)
        gpu["devices"] = int(cupy.cuda.runtime.getDeviceCount())
    except ImportError:
        pass
    except Exception as e:
        gpu["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    from ._cuda.device import cupy_advice, driver_cuda_version, installed_cupy, probe

    driver, source = driver_cuda_version()
    gpu["driver_cuda"] = None if driver is None else "%d.%d" % (driver // 1000, driver % 1000 // 10)
    gpu["driver_cuda_from"] = source if driver is not None else None
    gpu["cupy_for_driver"] = cupy_advice(driver, installed_cupy(), why=source)
    gpu["cuda0"] = probe(0)  # None: device='cuda' runs here; else why not
    gpu["auto"] = "cuda" if gpu["cuda0"] is None else "cpu"
    report["gpu"] = gpu
    from ._cpu.weights import cache_dir

    caches: dict = {"packed": cache_dir(), "hf_hub": None,
                    "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")}
    try:
        from huggingface_hub import constants

        caches["hf_hub"] = constants.HF_HUB_CACHE
        caches["hf_hub_offline"] = bool(constants.HF_HUB_OFFLINE)
    except Exception:
        pass
    report["caches"] = caches
    return report


def _doctor(args: argparse.Namespace) -> int:
    report = _doctor_report()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    cpu, gpu, caches = report["cpu"], report["gpu"], report["caches"]
    lines = [("kime", report["kime"]), ("python", report["python"]),
             ("platform", report["platform"])]
    lines += [(name, version or "not installed") for name, version in report["packages"].items()]
    isa = cpu["isa"] or "unavailable (%s)" % cpu.get("error")
    if cpu["kime_isa_env"]:
        isa += " (capped by KIME_ISA=%s)" % cpu["kime_isa_env"]
    int8 = cpu.get("int8_kernels") or "unavailable"
    if cpu.get("kime_qgemm_env"):
        int8 += " (capped by KIME_QGEMM=%s)" % cpu["kime_qgemm_env"]
    bf16 = cpu.get("bf16_kernels") or "unavailable (%s)" % (cpu.get("bf16_missing")
                                                           or cpu.get("error"))
    lines += [("cpu isa / kernels", isa),
              ("int8 kernels", int8),
              ("bf16 kernels", bf16),
              ("openmp", {True: "yes", False: "no", None: "unknown"}[cpu["openmp"]]),
              ("threads (threads=0)", cpu["threads"]),
              ("cpu backend", cpu["backend"])]
    if gpu["cupy"] is None:
        lines.append(("cupy", "not installed" + (" (%s)" % gpu["error"] if "error" in gpu else "")))
    else:
        lines.append(("cupy", "%s, %d GPU(s)%s" % (gpu["cupy"], gpu["devices"],
                                                  " (%s)" % gpu["error"] if "error" in gpu else "")))
    lines.append(("cupy for this driver", gpu["cupy_for_driver"]))
    lines += [("device='auto' runs on", gpu["auto"] + ("" if gpu["cuda0"] is None else
                                                     " (cuda: %s)" % gpu["cuda0"]))]
    lines += [("packed-weight cache", caches["packed"]),
              ("hugging face cache", caches["hf_hub"] or "unknown"),
              ("HF_HUB_OFFLINE", "yes" if caches["hf_hub_offline"] else "no")]
    width = max(len(key) for key, _ in lines) + 1
    for key, value in lines:
        print("%-*s  %s" % (width, key + ":", value))
    return 0


def _pull(args: argparse.Namespace) -> int:
    from .hub import pull

    directory = pull(args.name, revision=args.revision, token=args.token)
    print(directory)
    return 0


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


def _convert(args: argparse.Namespace) -> int:
    from .engine import Kime

    engine = Kime(args.model, device=args.device, precision=args.precision, threads=args.threads)
    backend = engine.backend
    path = backend.weights_file
    if path is None:
        raise Unsupported("the %s backend keeps no packed weights to convert (unset "
                          "KIME_CPU_BACKEND to use the compiled one)" % backend.describe())
    if not os.path.isfile(path):
        raise OSError("packed the weights for %s, but could not write the cache file %s "
                      "(is the directory writable? set KIME_CACHE to move it)"
                      % (backend.kernels, path))
    print("model:  %s (%s)" % (args.model, engine.checkpoint.path))
    print("isa:    %s" % backend.kernels)
    print("device: %s" % backend.describe())
    print("cache:  %s" % path)
    print("size:   %s (%d bytes)" % (_size(os.path.getsize(path)), os.path.getsize(path)))
    print("status: %s" % ("built now" if backend.weights_from == "packed" else "already cached"))
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from .serve import ConfigError, load_settings, serve
        from .serve.settings import flags_from
    except ImportError as e:
        raise _Usage("kime serve needs the HTTP stack: pip install 'kime[serve]' (%s)" % e) from e
    try:
        settings = load_settings(flags_from(args), config=args.config)
        serve(settings)
    except ConfigError as e:
        raise _Usage(str(e)) from e
    return 0


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    """`kime serve`'s flags, generated from the settings' declaration. Without the serve extra
    the command stays listed and, run with any flags, says what to install."""
    try:
        from .serve.settings import add_arguments
    except ImportError:
        parser.set_defaults(any_arguments=True)
    else:
        add_arguments(parser)
    parser.set_defaults(run=_serve)


def _gate(args: argparse.Namespace) -> int:
    from .gate import gate, load_requests

    requests = load_requests(args.requests) if args.requests else None
    progress = None if args.json else (lambda msg: print("kime gate: " + msg, file=sys.stderr))
    report = gate(args.model, requests, threads=args.threads, threshold=args.threshold,
                  limit=args.limit, progress=progress, source=args.requests,
                  precision=args.precision)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format())
    return 0 if report.passed else EXIT_GATE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kime", description="Laya's decision models without "
                                     "PyTorch: typed questions about a state, calibrated answers.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version="kime " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("decide", help="answer questions about one state; prints Laya's JSON",
                       description="Answer the questions in a JSON file about one state and print "
                       "Laya's result dict as JSON; or, with --batch, answer a JSONL file of "
                       "requests and print one JSON line per request.")
    d.add_argument("--model", "-m", default="laya", help="alias, hf://org/repo[/sub], or a "
                   "checkpoint directory (default: laya); auto: route each request to english, "
                   "multilingual or typed-decisions as Laya's Router does (results carry "
                   "`routing`)")
    d.add_argument("--lang", default=None, help="the state's language code (e.g. de): picks "
                   "the checkpoint's per-language temperatures, and with --model auto routes")
    d.add_argument("--lang-guess", dest="lang_guess", default=None, metavar="CODE",
                   help="with --model auto: a soft language hint, checked after --lang and "
                   "before detection")
    d.add_argument("--task", default=None, help="with --model auto: route to this checkpoint's "
                   "task (typed-decisions)")
    d.add_argument("--min-confidence", dest="min_confidence", type=_min_confidence, default=None,
                   metavar="P", help="mark answers whose confidence is below P (0.0-1.0) "
                   "low_confidence, with Laya's abstention fields; the answers are kept")
    d.add_argument("--batch", default=None, metavar="FILE", help="JSONL requests ('-': stdin), "
                   "one JSON object per line: state, and optionally questions (default: "
                   "--questions), model (with --model auto), task, lang, lang_guess, max_len, "
                   "head_max_len (default: the flags). Prints one JSON line per request, in "
                   "order; a line that fails prints {\"line\": N, \"error\": {...}} and the "
                   "run goes on (exit 2 at the end)")
    d.add_argument("--batch-size", dest="batch_size", type=int, default=64, metavar="N",
                   help="--batch requests answered together, in shared forward passes "
                   "(default 64)")
    d.add_argument("--state", "-s", help="the state text")
    d.add_argument("--state-file", help="read the state from this file ('-' for stdin)")
    d.add_argument("--json-state", action="store_true", help="parse the state as JSON (a dict or "
                   "a conversation list)")
    d.add_argument("--questions", "-q", default=None, help="JSON file: {id: question, ...} "
                   "(required without --batch)")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--precision", default="auto", help="auto (default: f16 on a GPU, f32 on the "
                   "CPU), f16, f32, int8 or bf16 (CPU with AVX512_BF16)")
    d.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    d.add_argument("--max-len", type=int, default=None, help="override the checkpoint's max_len")
    d.add_argument("--head-max-len", type=int, default=None, help="override head_max_len")
    d.add_argument("--compact", action="store_true", help="print JSON on one line")
    d.set_defaults(run=_decide)

    r = sub.add_parser("route", help="which checkpoint a text goes to, and why (loads nothing)",
                       description="Laya's default command: route a text as laya.Router does "
                       "(explicit model > task > lang > lang guess > detected language > "
                       "default) and print the decision, without loading a checkpoint.")
    r.add_argument("text", nargs="+", help="the request text")
    r.add_argument("--model", type=_model_name, default=None, metavar="NAME", help="pin a "
                   "checkpoint by name or alias, or auto (the default) to route")
    r.add_argument("--lang", default=None, help="the text's language code, e.g. en or de")
    r.add_argument("--lang-guess", dest="lang_guess", default=None, metavar="CODE",
                   help="a soft language hint, checked after --lang and before detection")
    r.add_argument("--task", default=None, help="route to a task's checkpoint (typed-decisions)")
    r.add_argument("--explain", action="store_true", help="add the language detector's "
                   "diagnostic")
    r.add_argument("--json", action="store_true", help="print the decision as JSON")
    r.set_defaults(run=_route)

    doc = sub.add_parser("doctor", help="report versions, the CPU's kernel path and the caches",
                         description="Print kime's and its dependencies' versions, the ISA kime's "
                         "kernels use on this CPU (capped by KIME_ISA), OpenMP, the default "
                         "thread count, CuPy and GPUs if present, the CuPy wheel that fits the "
                         "NVIDIA driver, and the cache directories.")
    doc.add_argument("--json", action="store_true", help="print the report as JSON")
    doc.set_defaults(run=_doctor)

    p = sub.add_parser("pull", help="download a model into the Hugging Face cache",
                       description="Download the checkpoint a model name points at (an alias, "
                       "hf://org/repo[/sub] or org/repo) into the Hugging Face cache, then print "
                       "its local directory. Only the checkpoint's files are fetched.")
    p.add_argument("name", help="alias, hf://org/repo[/sub], or org/repo")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--token", default=None, help="Hugging Face token (default: $HF_TOKEN or the "
                   "saved login)")
    p.set_defaults(run=_pull)

    c = sub.add_parser("convert", help="pack a model's weights for this CPU ahead of time",
                       description="Load a model so the CPU backend packs its weights for this "
                       "machine's ISA and writes the packed cache ($KIME_CACHE, else "
                       "~/.cache/kime); print the cache file, its size, and whether it was "
                       "built now or already there.")
    c.add_argument("model", help="alias, hf://org/repo[/sub], org/repo or a checkpoint directory")
    c.add_argument("--device", default="cpu", help="cpu (default) or auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    c.add_argument("--precision", default="auto", help="auto (default: f32 on the CPU), f32, "
                   "int8 or bf16: which packed weights to build")
    c.set_defaults(run=_convert)

    s = sub.add_parser("serve", help="serve laya-serve's HTTP API (needs kime[serve])",
                       description="Serve Laya's HTTP API (POST /v1/systemone, "
                       "/v1/systemone/batch; GET /health, /ready, /v1/models, /metrics) on "
                       "FastAPI + uvicorn: one checkpoint (--model SOURCE), or, as laya serve, a "
                       "Router that sends each request to its checkpoint (no --model: Laya's "
                       "english, multilingual and typed-decisions; --model NAME=SOURCE, "
                       "repeatable, and LAYA_EXTRA_MODELS register others). Settings: flags > "
                       "KIME_* / LAYA_* environment > --config TOML file > defaults.")
    _serve_arguments(s)

    g = sub.add_parser("gate", help="compare INT8 or BF16 with FP32 on a request set; pass or "
                       "fail", description="Run a request set through the model in FP32 and in "
                       "INT8 (or BF16: --precision bf16) on the CPU and report the argmax "
                       "agreement per question type, the largest and mean probability "
                       "differences and, for labelled requests, accuracy and ECE under each "
                       "precision. Exit 0 when every question type agrees at the threshold or "
                       "better, 5 when not.")
    g.add_argument("model", help="alias, hf://org/repo[/sub], org/repo or a checkpoint directory")
    g.add_argument("--requests", default=None, help="JSON list or JSON lines of {state, "
                   "questions[, labels]} (default: a built-in varied set of 200 requests)")
    g.add_argument("--limit", type=int, default=None, help="use only the first N requests")
    g.add_argument("--threshold", type=float, default=0.995, help="argmax agreement needed per "
                   "question type (default 0.995)")
    g.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    g.add_argument("--precision", default="int8", choices=["int8", "bf16"], help="the precision "
                   "compared with FP32 (default int8; bf16 needs AVX512_BF16)")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.set_defaults(run=_gate)

    b = sub.add_parser("bench", help="run the benchmarks in a source checkout's bench/ folder",
                       description="Run `python -m bench` (end to end, beside Laya when it is "
                       "importable), or `--what gemm|attention|qgemm|bgemm|load|reference`; every "
                       "other argument goes to that bench. The benches live in the source tree, "
                       "not in the installed package.", add_help=True)
    b.add_argument("--what", default="", choices=["", "gemm", "attention", "qgemm", "bgemm",
                                                   "load", "reference"],
                   help="which bench (default: "
                   "end to end)")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the bench")
    b.set_defaults(run=_bench)
    from .jobs.cli import add_commands  # score and calibrate: the offline jobs own their flags

    add_commands(sub)
    return parser


def _bench(args: argparse.Namespace) -> int:
    import importlib.util
    import os
    import subprocess

    module = "bench" + ("." + args.what if args.what else "")
    if importlib.util.find_spec("bench") is None or importlib.util.find_spec(module) is None:
        raise _Usage("the benches live in a kime source checkout (its bench/ folder); run "
                     "`kime bench` from the checkout's root")
    # The machine notes: OpenBLAS's CORETYPE and L2 overrides slow a current numpy, so the
    # benches run without them (the end-to-end bench also re-executes itself for the same reason).
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    rest = [a for a in args.rest if a != "--"]
    return subprocess.call([sys.executable, "-m", module] + rest, env=env)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "any_arguments", False):
        parser.error("unrecognized arguments: %s" % " ".join(unknown))
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, and an exit code that says which kind of failure
        if args.verbose:
            raise
        if isinstance(e, (_Usage, InvalidRequest, BadOption)):
            code = EXIT_USAGE
        elif isinstance(e, (ModelNotFound, CheckpointError)):
            code = EXIT_MODEL
        elif isinstance(e, Unsupported):
            code = EXIT_DEVICE
        else:
            code = EXIT_OTHER
        name = "error" if isinstance(e, (_Usage, KimeError)) else type(e).__name__
        print("kime: %s: %s" % (name, _one_line(str(e))), file=sys.stderr)
        return code


def _one_line(text: str) -> str:
    """A multi-line message (a heading, then one problem per line) as one line of stderr:
    `3 problems in the request: first; second; third`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return text
    head, rest = lines[0], [line[2:] if line.startswith("- ") else line for line in lines[1:]]
    if head.endswith(":") and rest:
        return head + " " + "; ".join(rest)
    return "; ".join([head] + rest)


if __name__ == "__main__":
    sys.exit(main())
