#!/usr/bin/env python3
"""Host overhead of BatchAttention.run() from Python over the C++ run_attention call.

A tiny CPU problem (one decode row, one KV head, 16 keys, one worker thread) keeps the kernel
time small; the same plan runs (a) through `BatchAttention.run(query, cache, out=out)` from
Python and (b) in a C++ loop over run_attention with the arguments built once
(pagedattn._C.time_run_planned). The difference per call is the Python layer: argument
import, plan lookup, stream lookup, the GIL release. Repetitions alternate (a) and (b) and
the minimum over the repetitions (the run least disturbed by other work on the machine) is
reported beside the median, so that load on the machine hits both alike.

    python3 bench/python_overhead.py [--iters 20000] [--reps 7] [--json out.json]
"""

import argparse
import json
import statistics
import time

import numpy as np

import pagedattn
from pagedattn import _C
from pagedattn import _frameworks as fw


def build(framework):
    H = KVH = 1
    D, BS = 64, 16
    rng = np.random.default_rng(0)
    k = rng.uniform(-1, 1, (2, BS, KVH, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, BS, KVH, D)).astype(np.float32)
    q = rng.uniform(-1, 1, (1, H, D)).astype(np.float32)
    bt = np.array([[1]], np.int32)
    sl = np.array([16], np.int32)
    qsl = np.array([0, 1], np.int32)
    if framework == "torch":
        import torch

        k, v, q, bt, sl, qsl = (torch.from_numpy(a) for a in (k, v, q, bt, sl, qsl))
    cache = pagedattn.KVCache(k, v)
    w = pagedattn.BatchAttention("cpu")
    w.plan(bt, sl, qsl, num_heads=H, num_kv_heads=KVH, head_size=D, cache=cache, num_threads=1)
    out = w.run(q, cache)
    return w, q, cache, out


def python_per_call(w, q, cache, out, iters):
    run = w.run
    t0 = time.perf_counter()
    for _ in range(iters):
        run(q, cache, out=out)
    return (time.perf_counter() - t0) / iters


def cpp_per_call(w, q, cache, out, iters):
    plan = w._state.plan_for(fw.dtype_name(q.dtype), cache._c, False)
    return _C.time_run_planned(plan, fw.arg(q, "query"), cache._c, fw.arg(out, "out"), iters)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args()
    frameworks = ["numpy"]
    try:
        import torch  # noqa: F401

        frameworks.append("torch")
    except ImportError:
        pass
    results = {}
    for f in frameworks:
        w, q, cache, out = build(f)
        py, cpp = [], []
        python_per_call(w, q, cache, out, args.iters // 10)  # warm
        for _ in range(args.reps):
            py.append(python_per_call(w, q, cache, out, args.iters))
            cpp.append(cpp_per_call(w, q, cache, out, args.iters))
        r = {"python_us": min(py) * 1e6, "cpp_us": min(cpp) * 1e6,
             "python_median_us": statistics.median(py) * 1e6,
             "cpp_median_us": statistics.median(cpp) * 1e6}
        r["overhead_us"] = r["python_us"] - r["cpp_us"]
        r["overhead_median_us"] = r["python_median_us"] - r["cpp_median_us"]
        results[f] = r
        print(f"{f:6s} BatchAttention.run {r['python_us']:7.2f} us/call   C++ run_attention "
              f"{r['cpp_us']:7.2f} us/call   overhead {r['overhead_us']:6.2f} us "
              f"(target <= 5; medians {r['python_median_us']:.2f} / {r['cpp_median_us']:.2f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
