#!/usr/bin/env python3
"""pagedattn beside its peers on the same data, in one run (issue 22): FlashInfer's tensor-core
decode and paged prefill (fa2, fa3), vLLM's Triton unified_attention and PyTorch SDPA (cuDNN,
flash) on dense K/V, on pagedattn's bench workloads.

Workloads: W1-W7 and the trace steps exactly as `pagedattn bench` defines them (read from
`pagedattn bench --list-workloads`, so shapes, lengths and W4's seeded lengths are the C++
ones; the blocks are placed in the same seeded random permutation of a pool 16 blocks larger
than needed); the W1 shape with an fp8 e4m3 cache and with head sizes 80, 96 and 256; and two
prefill shapes (bf16, 32/8 heads, head 128, block 16): 4 chunks of 2048 tokens ending an 8192
context, and 1 fresh causal sequence of 8192.

Data: one paged cache per workload filled through pagedattn (KVCache + write_kv from random
dense K/V, uniform in [-1, 1)); every peer reads that same cache memory through its own
metadata (FlashInfer: page indptr/indices/last-page lengths; vLLM: the block table; NHD page
layout [num_blocks, block_size, KV heads, head]). SDPA gets dense K/V gathered from it (only
for batches of equal lengths: dense attention has no ragged batch).

Checking: before a peer is timed its output is compared with pagedattn's oracle
(pagedattn.reference_attention, CPU, double accumulation) on sampled rows (the first, last and
longest sequences; first, last and two random query rows of each), within the project's
tolerance (pagedattn._C.testing.tolerance_for). A peer that fails the check is reported as
'wrong', one that cannot run the workload (page size, fp8, head size, ...) as 'n/a' with the
library's reason; neither is timed.

Timing: as `pagedattn bench` (bench/bench_support.cu): before each call the L2 is flushed by a
write then a read of max(2 x L2, 64 MB); CUDA events around the call; median of --iters calls
after --warmup. A short spin kernel (torch.cuda._sleep) precedes each flush so that the host,
whose Python launch path differs from library to library, is always ahead of the GPU and no
launch latency falls between the events.

Output: one table on stdout (us; % of the read ceiling for decode, from useful bytes as in
DESIGN.md §6, with the ceiling measured by `pagedattn bench` in the same run; TFLOP/s for
prefill, FLOPs = 4 x allowed (query, key) pairs x head size x heads; ratio = best peer time /
pagedattn time, > 1 when pagedattn is faster), and --json/--md/--png.

  python3 bench/peers/run_peers.py --cli build/pagedattn --json peers.json --md peers.md \\
      --png peers.png
  python3 bench/peers/run_peers.py --prebuild-flashinfer fi_aot   # JIT only: fi_aot_<k>.tar.xz
  python3 bench/peers/run_peers.py --from-json peers.json --md peers.md --png peers.png
  python3 bench/peers/run_peers.py --cpu-smoke                            # CPU-side self-test
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

sys.path.insert(0, HERE)
from peers_fi_jit import prebuild  # noqa: E402
from peers_impls import (DEFAULT_PEERS, FlashInfer, PagedAttn, Sdpa, Unsupported,  # noqa: E402
                         VllmTriton, _first_line, make_impls)
from peers_workloads import (Batch, SplitMix64, Workload, check_rows, cli_workloads,  # noqa: E402
                             compare, derived_workloads, oracle, replace, scaled_down, select,
                             tolerance)

# ----------------------------------------------------------------------------- timing
class Timer:
    """`pagedattn bench`'s method (bench/bench_support.cu time_call), in PyTorch."""

    def __init__(self, device: str, iters: int, warmup: int, flush: str):
        import torch
        self.iters, self.warmup, self.flush_mode = iters, warmup, flush
        self.cpu = device == "cpu"
        if self.cpu:  # --device cpu: the run's bookkeeping only (wall clock, no flush)
            return
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush = None if flush == "none" else torch.empty(
            max(2 * l2, 64 << 20) // 16 * 16, dtype=torch.uint8, device=device)
        # ~100 us of spin at the H200's clock: longer than any library's host launch path.
        self.spin_cycles = 200_000

    def __call__(self, fn) -> list:
        import torch
        for _ in range(self.warmup):
            fn()
        if self.cpu:
            ts = []
            for _ in range(self.iters):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
            return ts
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for i in range(self.iters):
            torch.cuda._sleep(self.spin_cycles)
            if self.flush is not None:
                self.flush.fill_(i & 0xFF)
                if self.flush_mode == "clean":  # the read evicts the dirty lines first
                    self.flush.view(torch.int32).sum()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


# ----------------------------------------------------------------------------- run
def read_ceiling_and_cxx(cli: str, names: list, iters: int, flush: str):
    """Run `pagedattn bench` (C++) on the standard/trace workloads among `names` (W7 if none):
    the read ceiling of this run and pagedattn's own C++ timings."""
    import tempfile
    sel = names or ["W7"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        p = subprocess.run([cli, "bench", "--workloads", ",".join(sel), "--iters", str(iters),
                            "--flush", flush, "--json", path], capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(path):
            print(f"run_peers: pagedattn bench failed ({p.returncode}): {p.stderr.strip()[:300]}",
                  file=sys.stderr)
            return 0.0, {}
        j = json.load(open(path))
    return j["read_ceiling_gbps"], {r["name"]: r["median_us"] for r in j["results"]}


def run(args) -> int:
    import torch
    import pagedattn
    base = cli_workloads(args.cli, args.seed)
    workloads = select(base + derived_workloads(base), args.workloads)
    impls = make_impls(args.peers.split(","))
    FlashInfer.allow_jit = args.allow_jit
    device = args.device
    dev_name = "cpu" if device == "cpu" else torch.cuda.get_device_name(0)

    def sync():
        if device != "cpu":
            torch.cuda.synchronize()
    cxx_names = [w.name for w in workloads if w.group in ("standard", "trace")]
    resume = None
    if args.resume:
        # A run continued after a peer broke the CUDA context (see the end of the loop): its
        # rows, read ceiling and C++ timings are those of the process before.
        with open(args.resume) as f:
            resume = json.load(f)
        ceiling = resume["read_ceiling_gbps"]
        cxx = {r["name"]: r["pagedattn_cxx_us"] for r in resume["results"]
               if "pagedattn_cxx_us" in r}
    else:
        ceiling, cxx = read_ceiling_and_cxx(args.cli, cxx_names if args.cxx_bench else [],
                                            args.iters, args.flush)
    print(f"device: {dev_name}; read ceiling {ceiling:.0f} GB/s (pagedattn bench); "
          f"median of {args.iters} calls after {args.warmup}, L2 flush {args.flush}",
          flush=True)
    versions = {"torch": torch.__version__, "pagedattn": pagedattn.__version__}
    for mod in ("flashinfer", "triton"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            versions[mod] = f"unavailable ({_first_line(e)})"
    src = os.path.join(ROOT, ".peers", "carry", "vllm_triton", "SOURCE")
    if os.path.exists(src):
        versions["vllm"] = open(src).read().split(":")[0]
    timer = Timer(device, args.iters, args.warmup, args.flush)
    results = resume["results"] if resume else []
    sticky = False
    doc = {"device": dev_name, "read_ceiling_gbps": ceiling, "iters": args.iters,
           "warmup": args.warmup, "l2_flush": args.flush, "versions": versions,
           "peers": [i.name for i in impls], "results": results, "complete": False,
           "restarts": resume.get("restarts", 0) + 1 if resume else 0,
           "command": resume["command"] if resume else
           " ".join([os.path.basename(sys.executable)] + sys.argv)}
    earlier = {r["name"]: r for r in results}
    for w in workloads:
        t0 = time.time()
        old = earlier.get(w.name)
        if not pending(old):
            continue  # measured by the process before
        try:
            b = Batch(w, device, args.seed)
        except Exception as e:  # noqa: BLE001
            print(f"{w.name}: data: {_first_line(e)}", flush=True)
            results.append({"name": w.name, "error": _first_line(e)})
            continue
        rows = check_rows(w, args.check_rows, args.seed)
        ref = oracle(b, rows)
        tol = tolerance(w)
        row = {"name": w.name, "group": w.group, "description": w.description,
               "num_seqs": len(w.seq_lens), "num_tokens": w.num_tokens,
               "total_kv_tokens": sum(w.seq_lens), "head_size": w.head_size,
               "block_size": w.block_size, "kv_dtype": w.kv_dtype,
               "useful_bytes": w.useful_bytes(), "flops": w.flops(),
               "checked_rows": len(rows), "tolerance": list(tol), "impls": {}}
        if w.name in cxx:
            row["pagedattn_cxx_us"] = cxx[w.name]
        if old is not None:  # the row the process before stopped in: its libraries so far
            row["impls"] = old["impls"]
            results[results.index(old)] = row
        else:
            results.append(row)
        for impl in impls:
            if impl.name in row["impls"]:
                continue
            r = {"library": impl.library}
            try:
                fn = impl.prepare(b)
                out = fn()
                sync()
                ok, maxdiff, worst, detail = compare(impl.rows(out, b, rows), ref, tol)
                r.update(max_abs_error=maxdiff, worst_ratio=worst, kernel=impl.label())
                if not ok:
                    r.update(status="wrong", reason=f"outside the tolerance by {worst:.2f}x "
                             f"({detail})")
                else:
                    ts = timer(fn)
                    med = statistics.median(ts)
                    r.update(status="ok", median_us=med,
                             p10_us=sorted(ts)[len(ts) // 10], p90_us=sorted(ts)[9 * len(ts) // 10])
                    if w.is_prefill:
                        r["tflops"] = w.flops() / (med * 1e-6) / 1e12
                    elif ceiling > 0:
                        r["pct_of_ceiling"] = 100.0 * w.useful_bytes() / (med * 1e-6) / 1e9 \
                            / ceiling
            except Unsupported as e:
                r.update(status="n/a", reason=str(e))
            except Exception as e:  # noqa: BLE001
                r.update(status="error", reason=_first_line(e))
                if args.verbose:
                    traceback.print_exc()
            row["impls"][impl.name] = r
            # After every library: a run stopped by a time limit keeps what it measured.
            write_outputs(doc, args, final=False)
            try:
                sync()
            except Exception as e:  # noqa: BLE001  (a sticky CUDA error: nothing more runs)
                r.update(status="error", reason="CUDA error after the call: " + _first_line(e))
                sticky = True
                break
        finish_row(row)
        row["done"] = not sticky or len(row["impls"]) == len(impls)
        print(format_row(row, [i.name for i in impls]) + f"   [{time.time() - t0:.0f} s]",
              flush=True)
        write_outputs(doc, args, final=False)
        if sticky:
            # A peer's fault (say an illegal memory access) leaves the CUDA context unusable
            # for everything after it in this process; the run goes on in a new one, from the
            # next (workload, library), with what is measured so far (its JSON).
            if args.json and doc["restarts"] < args.max_restarts:
                print("run_peers: the CUDA context is broken: continuing in a new process",
                      flush=True)
                sys.stdout.flush()
                os.execv(sys.executable, [sys.executable, os.path.abspath(sys.argv[0])] +
                         resume_argv(sys.argv[1:], args.json))
            print("run_peers: stopping: the CUDA context is broken", flush=True)
            break
        del b
        if device != "cpu":
            torch.cuda.empty_cache()
    doc["complete"] = not sticky
    write_outputs(doc, args, final=True)
    bad = [r["name"] for r in results if "error" in r or
           r["impls"].get("pagedattn", {}).get("status") not in (None, "ok")]
    return 1 if bad else 0


def resume_argv(argv: list, json_path: str) -> list:
    """The arguments of the process that continues a run: `argv` (the script's, without the
    program) less any --resume, plus --resume `json_path`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume":
            skip = True
        elif not a.startswith("--resume="):
            out.append(a)
    return out + ["--resume", json_path]


def pending(row) -> bool:
    """Whether a workload's row (None: not reached) still has libraries to run: a row the
    process before finished ("done") or whose data failed ("error") has none."""
    return row is None or not (row.get("done") or "error" in row)


def write_outputs(doc: dict, args, final: bool):
    md = markdown(doc)
    if final:
        print()
        print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    if args.png and final:
        plot(doc, args.png)


def finish_row(row: dict):
    """Best peer and the ratio best-peer time / pagedattn time (> 1: pagedattn faster)."""
    peers = {n: r for n, r in row["impls"].items()
             if n != "pagedattn" and r.get("status") == "ok"}
    if peers:
        best = min(peers, key=lambda n: peers[n]["median_us"])
        row["best_peer"] = best
        pa = row["impls"].get("pagedattn", {})
        if pa.get("status") == "ok":
            row["ratio"] = peers[best]["median_us"] / pa["median_us"]


DECODE_TARGET, PREFILL_TARGET = 1.05, 1.0

FA3_DECODE_NOTE = (
    "flashinfer-fa3 on decode rows: a configuration FlashInfer does not choose itself "
    "(backend=\"auto\" runs single-token tensor-core decode on fa2; fa3 is its Hopper prefill "
    "path). Its SM90 scheduler gives each query head its own work item, so the GQA group is not "
    "packed into the query tile and each KV head is read once per query head (4x at 32/8 "
    "heads), and it does not split the KV of long sequences: about 4x fa2's decode time is "
    "the expected limitation, not a misuse. fa2 is FlashInfer's decode number.")


def target_lines(doc: dict) -> list:
    """One line per workload with a ratio: met, or by how much it misses its target (the
    speed-up pagedattn still needs, in %)."""
    out = []
    for row in doc["results"]:
        if "ratio" not in row:
            continue
        target = PREFILL_TARGET if row.get("group") == "prefill" else DECODE_TARGET
        r = row["ratio"]
        verdict = ("met" if r >= target else
                   f"misses by {100 * (target / r - 1):.0f}% (pagedattn needs {target / r:.2f}x)")
        out.append(f"- {row['name']}: {r:.2f} vs {row['best_peer']} (target {target:.2f}): "
                   f"{verdict}")
    return out or ["- (no workload with pagedattn and a peer both timed)"]


def _cell(r: dict, prefill: bool) -> str:
    st = r.get("status")
    if st != "ok":
        return st or "-"
    metric = (f"{r['tflops']:.0f} TF/s" if prefill else
              f"{r['pct_of_ceiling']:.1f}%" if "pct_of_ceiling" in r else "")
    return f"{r['median_us']:.1f} ({metric})" if metric else f"{r['median_us']:.1f}"


def format_row(row: dict, names: list) -> str:
    prefill = row.get("group") == "prefill"
    cells = [_cell(row["impls"].get(n, {}), prefill) for n in names]
    ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "-"
    return f"{row['name']:18s} " + " | ".join(f"{c:>18s}" for c in cells) + f" | {ratio}"


def markdown(doc: dict) -> str:
    names = doc["peers"]
    lines = [f"pagedattn and its peers on {doc['device']} (read ceiling "
             f"{doc['read_ceiling_gbps']:.0f} GB/s; median of {doc['iters']} calls, L2 flush "
             f"{doc['l2_flush']}; versions: "
             + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()) + ")", "",
             "µs (decode: % of the read ceiling; prefill: TFLOP/s); ratio = best peer's time / "
             "pagedattn's (≥ 1.05 is the decode target, ≥ 1.0 prefill)", "",
             "| workload | " + " | ".join(names) + " | best peer | ratio | pagedattn C++ |",
             "|---|" + "---:|" * len(names) + "---|---:|---:|"]
    if not doc.get("complete", True):
        lines[0] += " — INCOMPLETE: the run stopped after these rows"
    if doc.get("restarts"):
        lines[0] += (f"; a peer's fault broke the CUDA context {doc['restarts']} time(s), and "
                     "the run went on in a new process from the next (workload, library)")
    notes = []
    for row in doc["results"]:
        if "error" in row:
            lines.append(f"| {row['name']} | " + " | ".join("-" for _ in names) +
                         f" | data: {row['error']} | - | - |")
            continue
        prefill = row.get("group") == "prefill"
        cells = []
        for n in names:
            r = row["impls"].get(n, {})
            cells.append(_cell(r, prefill))
            if r.get("status") in ("n/a", "wrong", "error"):
                notes.append(f"- {row['name']} / {n}: {r['status']}: {r.get('reason', '')}")
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else "-"
        # The same workload through `pagedattn bench` (C++, same run): the Python path's
        # timing should agree with it.
        cxx = f"{row['pagedattn_cxx_us']:.1f}" if "pagedattn_cxx_us" in row else "-"
        lines.append(f"| {row['name']} | " + " | ".join(cells) +
                     f" | {row.get('best_peer', '-')} | {ratio} | {cxx} |")
    lines += ["", "Targets (ratio ≥ 1.05 on decode, ≥ 1.0 on prefill):"] + target_lines(doc)
    if any(n == "flashinfer-fa3" for n in names):
        lines += ["", FA3_DECODE_NOTE]
    if notes:
        lines += ["", "Not timed:"] + notes
    lines += ["", "Command: `" + doc.get("command", "") + "`", ""]
    return "\n".join(lines)


def plot(doc: dict, path: str):
    """One bar per timed peer and workload: the peer's speed relative to pagedattn's
    (pagedattn time / peer time; log scale, < 1: pagedattn faster), the targets as lines
    (the best peer at or below 1/1.05 on decode, 1/1.0 on prefill), the ratio to the best peer
    above each group, and 'n/a' where a peer did not run."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"run_peers: no plot ({_first_line(e)}; bench/peers/README.md says how to plot "
              f"from the JSON elsewhere)", file=sys.stderr)
        return
    rows = [r for r in doc["results"] if "impls" in r]
    names = [n for n in doc["peers"] if n != "pagedattn"]
    fig, ax = plt.subplots(figsize=(max(9, 0.75 * len(rows) * max(1, len(names)) / 3), 5))
    width = 0.8 / max(1, len(names))
    ax.set_yscale("log", base=2)
    for k, n in enumerate(names):
        xs, ys = [], []
        for i, r in enumerate(rows):
            c = r["impls"].get(n, {})
            pa = r["impls"].get("pagedattn", {})
            x = i + (k - (len(names) - 1) / 2) * width
            if c.get("status") == "ok" and pa.get("status") == "ok":
                xs.append(x)
                ys.append(pa["median_us"] / c["median_us"])
            elif c:
                ax.text(x, 1.0, c.get("status", "?"), rotation=90, ha="center", va="bottom",
                        fontsize=6, color="0.5")
        ax.bar(xs, [y - 1 for y in ys], width, bottom=1.0, label=n)  # from 1: up = peer faster
    for i, r in enumerate(rows):
        target = PREFILL_TARGET if r.get("group") == "prefill" else DECODE_TARGET
        ax.hlines(1 / target, i - 0.45, i + 0.45, colors="k", linestyles="dashed", lw=0.8)
        if "ratio" in r:
            ax.text(i, 1.01, f"{r['ratio']:.2f}", transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8,
                    color="green" if r["ratio"] >= target else "red")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["name"] for r in rows], rotation=45, ha="right")
    ax.set_ylabel("peer speed / pagedattn speed (log2)")
    ax.set_title(f"pagedattn and its peers, {doc['device']}: up = the peer is faster; every bar "
                 f"below the dashed line meets the target; on top: best peer / pagedattn",
                 fontsize=9, pad=16)
    ax.legend(fontsize=7, ncol=min(5, len(names)), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


# ----------------------------------------------------------------------------- self-test
def self_test(args) -> int:
    """No torch, no GPU: this file's copies of the C++ definitions agree with the CLI's, and
    the bookkeeping checks of peers_selftest.py pass."""
    p = subprocess.run([args.cli, "bench", "--list-workloads", "--seed", str(args.seed)],
                       capture_output=True, text=True, check=True)
    listed = {w["name"]: w for w in json.loads(p.stdout)["workloads"]}
    fails = []
    rng = SplitMix64(args.seed)  # bench/workloads.cpp: W4's lengths, uniform 128..8192
    w4 = [rng.uniform(128, 8192) for _ in range(256)]
    if listed["W4"]["seq_lens"] != w4:
        fails.append("W4 lengths differ from SplitMix64's")
    for w in cli_workloads(args.cli, args.seed):
        if w.useful_bytes() != listed[w.name]["useful_bytes"]:
            fails.append(f"{w.name}: useful bytes {w.useful_bytes()} != "
                         f"{listed[w.name]['useful_bytes']}")
    # Pairs under the bottom-right mask: a fresh causal 3 x 3 has 6; a 2-row chunk ending a
    # context of 5 has 4 + 5.
    if Workload("a", "prefill", "", [3], [3]).allowed_pairs() != 6 or \
            Workload("b", "prefill", "", [5], [2]).allowed_pairs() != 9:
        fails.append("allowed_pairs")
    chunks = next(w for w in derived_workloads([]) if w.name == "P-chunks")
    if chunks.allowed_pairs() != 4 * (2048 * 6144 + 2048 * 2049 // 2):
        fails.append("P-chunks pairs")
    # The bookkeeping around the peers (ninja's log, packing, staging, the table's ratios).
    from peers_selftest import offline_checks
    fails += offline_checks()
    for f in fails:
        print("self-test:", f)
    print(f"self-test: {len(fails)} failures over {len(listed)} listed workloads")
    return 1 if fails else 0


# ----------------------------------------------------------------------------- CPU smoke
def cpu_smoke(args) -> int:
    """The data, metadata and oracle-check paths on the CPU at small scale: pagedattn's CPU
    backend and SDPA's math backend must pass the check; a wrong output must fail it."""
    base = cli_workloads(args.cli, args.seed)
    workloads = select(base + derived_workloads(base), args.workloads)
    impls = [PagedAttn(), Sdpa("math")]
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if interpret:  # vLLM's kernel in Triton's CPU interpreter, which has no bf16: fp16 data
        impls.append(VllmTriton())
    failures = 0
    for w0 in workloads:
        w = scaled_down(w0, 64, 4)
        if interpret:
            w = replace(w, dtype="fp16",
                        kv_dtype=w.kv_dtype if w.kv_dtype.startswith("fp8") else "fp16")
        b = Batch(w, "cpu", args.seed)
        # The permutation matches the C++ one (checked against an independent Fisher-Yates
        # of the same generator in the unit test of this file); the metadata must be sane.
        assert int(b.block_table.max()) < b.num_blocks
        rows = check_rows(w, args.check_rows, args.seed)
        ref = oracle(b, rows)
        tol = tolerance(w)
        for impl in impls:
            try:
                fn = impl.prepare(b)
                got = impl.rows(fn(), b, rows)
            except Unsupported as e:
                print(f"{w.name:10s} {impl.name:12s} n/a: {e}")
                continue
            ok, md, worst, detail = compare(got, ref, tol)
            print(f"{w.name:10s} {impl.name:12s} {'ok' if ok else 'WRONG'} max|diff| {md:.2e} "
                  f"worst/budget {worst:.3f} ({len(rows)} rows) {detail}")
            failures += not ok
            # A perturbed output must fail the same check (the check can fail).
            bad = got.clone().float()
            bad[0, 0, 0] += 0.1
            if compare(bad, ref, tol)[0]:
                print(f"{w.name}: the check passed a perturbed output")
                failures += 1
    print(f"cpu smoke: {failures} failures")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "pagedattn"),
                    help="the pagedattn CLI (workload definitions, read ceiling)")
    ap.add_argument("--workloads", default="standard,trace,config,prefill",
                    help="names or groups (standard, trace, config, prefill, all)")
    ap.add_argument("--peers", default=DEFAULT_PEERS, help="comma list; pagedattn first")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a test of the run's bookkeeping (pagedattn's CPU backend, wall "
                         "clock)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--flush", choices=["clean", "dirty", "none"], default="clean")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-rows", type=int, default=4, help="query rows checked per sampled "
                    "sequence (prefill chunks)")
    ap.add_argument("--no-cxx-bench", dest="cxx_bench", action="store_false",
                    help="skip pagedattn's C++ bench on the same workloads (the read ceiling "
                         "is still measured)")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--resume", metavar="JSON",
                    help="continue the run whose --json this is, skipping what it measured "
                         "(the run does this itself, in a new process, when a peer breaks the "
                         "CUDA context)")
    ap.add_argument("--max-restarts", type=int, default=8,
                    help="new processes at most after broken CUDA contexts (needs --json)")
    ap.add_argument("--prebuild-flashinfer", metavar="PREFIX",
                    help="only JIT-build the FlashInfer modules of the selected workloads and "
                         "pack them as PREFIX_<k>.tar.xz for fetch_peers.sh --aot")
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="prebuild: stop building after this many seconds, pack what is built")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="prebuild: compiles at once (all modules in one ninja run)")
    ap.add_argument("--no-smoke", dest="smoke", action="store_false",
                    help="prebuild: skip the small check of each module against a dense "
                         "reference (it needs a GPU)")
    ap.add_argument("--from-json", metavar="FILE",
                    help="only rewrite --md / --png (and the table on stdout) from the JSON of "
                         "an earlier run")
    ap.add_argument("--allow-jit", action="store_true",
                    help="let FlashInfer compile a module it lacks during the run (minutes)")
    ap.add_argument("--cpu-smoke", action="store_true", help=cpu_smoke.__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true", help=self_test.__doc__)
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters >= 1, --warmup >= 0")
    if args.max_restarts < 0:
        ap.error("--max-restarts >= 0")
    if args.resume:  # a run to continue must be there and be one of this script's JSONs
        try:
            with open(args.resume) as f:
                prev = json.load(f)
            if not isinstance(prev, dict) or not isinstance(prev.get("results"), list) or \
                    "read_ceiling_gbps" not in prev or "command" not in prev:
                ap.error(f"--resume {args.resume}: not the --json of a run_peers.py run")
        except (OSError, ValueError) as e:
            ap.error(f"--resume {args.resume}: cannot read it ({e})")
    for p in (args.json, args.md, args.png):
        if p:  # a bad path fails now, not after minutes of GPU work
            try:
                open(p, "a").close()
            except OSError as e:
                ap.error(f"{p}: cannot open for writing ({e.strerror})")
    if args.self_test:
        return self_test(args)
    if args.cpu_smoke:
        return cpu_smoke(args)
    if args.prebuild_flashinfer:
        base = cli_workloads(args.cli, args.seed)
        wl = select(base + derived_workloads(base), args.workloads)
        backends = [p.split("-", 1)[1] for p in args.peers.split(",")
                    if p.startswith("flashinfer-")]
        import glob
        partial = sorted(glob.glob(os.path.join(ROOT, ".peers", "carry",
                                                "flashinfer_partial*.tar.xz")))
        return prebuild(wl, backends, args.prebuild_flashinfer, args.jobs, args.deadline_s,
                        smoke=args.smoke, resume=partial)
    if args.from_json:
        with open(args.from_json) as f:
            doc = json.load(f)
        args.json = None
        write_outputs(doc, args, final=True)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
