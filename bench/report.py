"""The bench report as text: a header, a table per workload, a summary, startup and memory."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, List, Optional

FAMILIES = ("kime", "kime-int8", "kime-bf16", "kime-mixed", "kime-f16", "torch", "onnx",
            "onnx-int8", "openvino", "openvino-bf16", "openvino-int8")
"""Every engine family the bench knows, in the order tables list them."""


def _families(present: Any) -> List[str]:
    return [f for f in FAMILIES if f in present] + sorted(f for f in present if f not in FAMILIES)


def _ratio_columns(families: List[str]) -> List[tuple]:
    """(base, family) pairs the summary shows as `family p50 / base p50`: kime against the
    float peers; a second kime precision against kime and the peers at its precision (INT8
    against ONNX Runtime's and OpenVINO's INT8, BF16 against OpenVINO's BF16); kime's mixed
    precision against kime's other precisions and every INT8 and BF16 peer."""
    low = ("int8", "bf16")
    out = []
    for base in families:
        if not base.startswith("kime"):
            continue
        own = base.partition("-")[2]
        for fam in families:
            if fam == base:
                continue
            peer = not fam.startswith("kime")
            if base == "kime":
                keep = peer and not fam.endswith(low)
            elif own == "mixed":
                keep = not peer or fam.endswith(low)
            else:
                keep = fam == "kime" or (peer and fam.endswith(own))
            if keep:
                out.append((base, fam))
    return out


def _fmt_time(s: Optional[float], unit: str) -> str:
    if s is None:
        return "-"
    if unit == "ms":
        v = s * 1e3
        return "%.0f ms" % v if v >= 100 else ("%.1f ms" % v if v >= 10 else "%.2f ms" % v)
    return "%.2f s" % s if s < 100 else "%.0f s" % s


def _unit(values: List[float]) -> str:
    return "ms" if values and max(values) < 2.0 else "s"


def _qps(q: float) -> str:
    return "%.0f" % q if q >= 100 else ("%.1f" % q if q >= 10 else "%.2f" % q)


def _mb(kb: Optional[float]) -> str:
    return "-" if kb is None else "%.0f MB" % (kb / 1024.0)


def _table(header: List[str], rows: List[List[str]], indent: str = "  ") -> List[str]:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    out = []
    for r in [header] + rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _label(key: str) -> str:
    fam, _, threads = key.partition("@")
    return fam if not threads else "%s (%s thr)" % (fam, threads)


def _versions_line(report: Dict[str, Any]) -> List[str]:
    lines = []
    k = report["kime"]
    lines.append("  kime     %s, %s, precision %s" % (k["version"], k["device"], k["precision"]))
    blas = [b for b in k.get("blas", []) if b.get("user_api") == "blas"]
    peers = report.get("peers", {})
    vers = peers.get("versions") or {}
    threads = peers.get("threads")
    tdesc = ""
    if threads:
        tdesc = (", threads %s (best shown)" % " and ".join(map(str, threads)) if len(threads) > 1
                 else ", %d thread%s" % (threads[0], "" if threads[0] == 1 else "s"))
    if "torch" in peers:
        lines.append("  torch    laya %s Agent, torch %s, transformers %s, %s%s"
                     % (vers.get("laya"), vers.get("torch"), vers.get("transformers"),
                        peers["torch"].get("dtype", "").replace("torch.", ""), tdesc))
    for key, a in (k.get("others") or {}).items():
        lines.append("  %-8s %s" % (key, a["device"]))
    if "onnx" in peers:
        lines.append("  onnx     laya %s ONNXAgent, onnxruntime %s, graph from %s%s"
                     % (vers.get("laya"), vers.get("onnxruntime"), peers["onnx"].get("exporter"),
                        tdesc))
    if "onnx-int8" in peers:
        lines.append("  onnx-int8 the same graph through %s; ONNXAgent on it%s"
                     % (peers["onnx-int8"].get("quantizer"), tdesc))
    for fam in ("openvino", "openvino-bf16", "openvino-int8"):
        if fam in peers:
            seen = next(iter((peers[fam].get("compiled") or {}).values()), {})
            lines.append("  %-8s openvino %s%s, %s; %s; ONNXAgent on it" % (
                fam, vers.get("openvino"),
                ", " + peers[fam]["quantizer"] if "quantizer" in peers[fam] else " on the export",
                ", ".join("%s=%s" % kv for kv in seen.items()), tdesc.lstrip(", ")))
    if "torch" not in peers and "onnx" not in peers:
        lines.append("  peers    none (%s)" % (peers.get("found") or "--peers none"))
    if blas:
        lines.append("  numpy    " + ", ".join("%s %s (%s threads)" % (b["internal_api"],
                                                                      b.get("version"),
                                                                      b.get("num_threads"))
                                              for b in blas))
    return lines


def render(report: Dict[str, Any]) -> str:
    m = report["machine"]
    md = report["model"]
    s = report["settings"]
    out: List[str] = []
    out.append("kime bench: shape %s (%s layout: %s layers, d=%s, %s heads, vocab %s, max_len %s), "
               "random weights" % (s["shape"], md.get("encoder"), md.get("layers"),
                                   md.get("hidden"), md.get("heads"), md.get("vocab"),
                                   md.get("max_len")))
    out.append("  command  %s" % report["command"])
    unset = report.get("unset_env")
    out.append("  machine  %s, %d cores, %s, Python %s%s"
               % (m["cpu"], m["cores"], m["os"], m["python"],
                  ", load avg %.2f at start" % m["loadavg_start"][0]
                  if "loadavg_start" in m else ""))
    out.extend(_versions_line(report))
    if s["quick"]:
        how = ("--quick: 1 timed run per workload, a warm-up on the first only; a smoke run, not "
               "numbers to quote")
    else:
        how = ("1 warm-up run per workload, then %s timed runs, interleaved across engines with "
               "the order rotated every round"
               % ("%d" % s["repeat"] if s["repeat"] else
                  "3-30 (a %.0f-s budget per engine)" % s["budget_s"]))
    out.append("  timing   %s; wall time of one call" % how)
    if unset:
        out.append("  note     %s were set; the bench restarted without them" % ", ".join(unset))
    if report.get("still_set_env"):
        out.append("  note     %s set in this process (its peers and probes ran without them)"
                   % ", ".join(report["still_set_env"]))

    summary: List[Any] = []
    for w in report["workloads"]:
        stats = w["stats"]
        out.append("")
        busy = w.get("other_cores")
        noise = ""
        if busy is not None:
            noise = "; other load %.1f cores%s" % (busy, ", NOISY" if busy > 0.25 else "")
        out.append("%s  %s  [%s; %d run%s%s]" % (w["name"], w["title"], w["rows_text"], w["runs"],
                                                 "" if w["runs"] == 1 else "s", noise))
        fams = _families(w["best"])
        keys = [w["best"][f] for f in fams]
        unit = _unit([stats[k]["p99"] for k in keys])
        batch = w["kind"] == "predict_batch"
        bases = [f for f in fams if f.startswith("kime") and f in w["speedup"]]
        many = len(keys) > 1
        header = (["", "p50", "p95", "p99"] + (["questions/s"] if batch else [])
                  + (["%s faster by" % b for b in bases] if many else []))
        rows = []
        for k in keys:
            st = stats[k]
            fam = k.split("@")[0]
            row = [_label(k), _fmt_time(st["p50"], unit), _fmt_time(st["p95"], unit),
                   _fmt_time(st["p99"], unit)]
            if batch:
                row.append(_qps(w["questions_per_s"][k]))
            if many:
                row += ["" if fam == b else "%.2fx" % w["speedup"][b][fam] for b in bases]
            rows.append(row)
        if rows:
            out.extend(_table(header, rows))
        others = [k for k in stats if k not in keys]
        if others:
            out.append("  also: " + ", ".join(
                "%s p50 %s" % (_label(k), _fmt_time(stats[k]["p50"], unit))
                for k in sorted(others)))
        agree = w.get("agreement") or {}
        if agree:
            parts = []
            for fam in _families({k.split("@")[0] for k in agree}):
                ks = [k for k in agree if k.split("@")[0] == fam]
                if not ks:
                    continue
                worst = max(agree[k]["max_abs"] for k in ks)
                flips = sum(len(agree[k]["mismatches"]) for k in ks)
                bad_w1 = any(agree[k].get("w1_check") for k in ks)
                layout = any(agree[k]["layout"] for k in ks)
                text = "%s max |diff| %.1e" % (fam, worst)
                if flips:
                    text += ", %d label%s differ" % (flips, "" if flips == 1 else "s")
                if layout:
                    text += ", LAYOUT DIFFERS"
                if w["name"] == "W1" and not fam.endswith(("int8", "bf16")) and report[
                        "settings"]["precision"] not in ("int8", "bf16"):
                    text += " (FAILS the 1e-3 check)" if bad_w1 else " (same choice, within 1e-3)"
                parts.append(text)
            out.append("  answers vs kime (Laya's dicts, 4 decimals): " + "; ".join(parts))
        summary.append((w, fams))

    all_fams = _families({f for w, _ in summary for f in w["best"]})
    ratios = _ratio_columns(all_fams)
    if summary and len(all_fams) > 1:
        out.append("")
        out.append("Summary (p50, or questions/s for batches; A vs B = B's p50 / A's p50, above 1 "
                   "means A is faster)")
        rows = []
        for w, _fams in summary:
            stats, best = w["stats"], w["best"]
            batch = w["kind"] == "predict_batch"
            unit = _unit([stats[k]["p50"] for k in best.values()])
            cells = [w["name"] + (" (q/s)" if batch else "")]
            for f in all_fams:
                k = best.get(f)
                if k is None:
                    cells.append("-")
                elif batch:
                    cells.append(_qps(w["questions_per_s"][k]))
                else:
                    cells.append(_fmt_time(stats[k]["p50"], unit))
            for b, f in ratios:
                r = w["speedup"].get(b, {}).get(f)
                cells.append("-" if r is None else "%.2fx" % r)
            rows.append(cells)
        out.extend(_table([""] + all_fams + ["%s vs %s" % bf for bf in ratios], rows))

    st = report.get("startup")
    if st:
        out.append("")
        busy = st.get("other_cores")
        out.append("Startup in a new process (warm page cache; median of %d) and peak RSS%s"
                   % (st["runs"], "" if busy is None else "  [other load %.1f cores%s]"
                      % (busy, ", NOISY" if busy > 0.25 else "")))
        rows = []
        for fam in _families([k for k in st if isinstance(st[k], dict)]):
            e = st.get(fam)
            if not e:
                continue
            if "error" in e:
                rows.append([fam, "failed", "", "", "", ""])
                continue
            rows.append([fam, "%.2f s" % e["import_s"], "%.2f s" % e["load_s"],
                         _fmt_time(e.get("first_w1_s"),
                                   "ms" if (e.get("first_w1_s") or 0) < 2 else "s"),
                         _mb(e.get("rss_load_kb")), _mb(e.get("rss_w3_kb"))])
        out.extend(_table(["", "import", "load", "first W1", "RSS after load", "peak RSS, W3"],
                          rows))

    problems = report.get("problems") or []
    out.append("")
    for note in report.get("notes") or []:
        out.append("note: " + note.splitlines()[0])
    if problems:
        out.append("PROBLEMS")
        out.extend("  - " + p.splitlines()[0] for p in problems)
    out.append("(%.0f s in all%s)" % (report["elapsed_s"],
                                       "; load avg %.2f at the end" % m["loadavg_end"][0]
                                       if "loadavg_end" in m else ""))
    return "\n".join(out) + "\n"


def emit(text: str, report: Dict[str, Any], out: Optional[str],
         log: Callable[[str], None]) -> None:
    """Print a bench's rendered report on stdout and, with `--out`, write its JSON there."""
    sys.stdout.write(text)
    sys.stdout.flush()
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        log("wrote %s" % out)
