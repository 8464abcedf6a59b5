#!/usr/bin/env python3
"""Dense PyTorch scaled_dot_product_attention (GQA) on contiguous KV, for the decode workloads
that have a dense equivalent (equal lengths): W1, W2, W3, W7, and the context/batch sweeps;
and for the prefill workloads (P-*, --workloads prefill), with TFLOP/s.

Same shapes, dtype (bf16) and timing rule as `pagedattn bench`: CUDA events around each call,
L2 flushed before each call the same way (--flush clean|dirty|none, as `pagedattn bench
--flush`), median of --iters calls after warm-up. Every SDPA backend that
accepts the shape is timed and the fastest is reported (so the comparison is against the best
dense kernel PyTorch has on this GPU). Writes JSON.
"""
import argparse
import json
import os
import statistics

# name: (batch, context, num_heads, num_kv_heads, head_size)
WORKLOADS = {
    "W1": (64, 4096, 32, 8, 128),
    "W2": (128, 2048, 32, 8, 64),
    "W3": (1, 131072, 32, 8, 128),
    "W7": (1, 1024, 32, 8, 128),
}
for ctx in [512, 1024, 2048, 4096, 8192, 16384, 32768]:
    WORKLOADS[f"ctx-{ctx}"] = (64, ctx, 32, 8, 128)
for b in [1, 2, 4, 8, 16, 32, 64, 128, 256]:
    WORKLOADS[f"batch-{b}"] = (b, 4096, 32, 8, 128)

# Prefill workloads of `pagedattn bench` (issue 23), causal with the last query token at the
# end of the sequence: name: (batch, query_len, context, num_heads, num_kv_heads, head_size).
# A chunk after a prefix (query_len < context) is timed as the same work in two dense calls:
# the chunk against the prefix without a mask, plus the chunk against itself with is_causal
# (cuDNN's is_causal is top-left aligned, so one call with the whole context would mask a
# different set of pairs).
PREFILL = {
    "P-chunks-8k": (4, 2048, 8192, 32, 8, 128),
    "P-fresh-8k": (1, 8192, 8192, 32, 8, 128),
    "P-chunks-8k-h64": (4, 2048, 8192, 32, 8, 64),
    "P-fresh-8k-h64": (1, 8192, 8192, 32, 8, 64),
    "P-chunks-8k-h256": (4, 2048, 8192, 32, 8, 256),
    "P-fresh-8k-h256": (1, 8192, 8192, 32, 8, 256),
}


def prefill_flops(b, ql, ctx, h, d):
    """4 x allowed (query, key) pairs x head_size x num_heads, as `pagedattn bench`."""
    pairs = b * (ql * (ctx - ql) + ql * (ql + 1) // 2)
    return 4 * pairs * d * h


# SDPA backends tried (torch.nn.attention.SDPBackend member names).
BACKENDS = {
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
}


def time_us(fn, iters, warmup, flush, clean):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flush is not None:
            flush.fill_(i & 0xFF)
            if clean:  # read it back: its dirty lines are written back before the call
                flush.view(torch.int32).sum()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--workloads", default="W1,W2,W3,W7")
    ap.add_argument("--json", default="sdpa.json")
    ap.add_argument("--flush", choices=["clean", "dirty", "none"], default=None,
                    help="how L2 is flushed before each call, as pagedattn bench --flush: clean "
                         "(default: a write then a read of 2 x L2), dirty (the write only), none")
    ap.add_argument("--no-flush", action="store_true", help="same as --flush none")
    args = ap.parse_args()
    if args.no_flush and args.flush not in (None, "none"):
        ap.error("--no-flush excludes --flush " + args.flush)
    mode = "none" if args.no_flush else (args.flush or "clean")
    # A bad output path fails now, not after minutes of GPU work (an existing file is kept
    # until the results replace it).
    existed = os.path.exists(args.json)
    try:
        open(args.json, "a").close()
    except OSError as e:
        ap.error(f"--json {args.json}: cannot open for writing ({e.strerror})")
    if not existed:
        os.remove(args.json)
    known = {**WORKLOADS, **PREFILL}
    if args.workloads == "all":
        names = list(known)
    elif args.workloads == "prefill":
        names = list(PREFILL)
    else:
        names = args.workloads.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"--workloads: unknown {', '.join(unknown)} "
                 f"(known: all, prefill, {', '.join(known)})")
    # Imported here so that --help and argument errors work without PyTorch.
    global torch, F
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = None if mode == "none" else torch.empty(max(2 * l2, 64 << 20) // 16 * 16,
                                                     dtype=torch.uint8, device=dev)
    out = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "l2_flushed": flush is not None, "l2_flush": mode, "results": []}
    g = torch.Generator(device=dev).manual_seed(0)
    for name in names:
        if name in PREFILL:
            b, ql, s, h, kvh, d = PREFILL[name]
        else:
            (b, s, h, kvh, d), ql = WORKLOADS[name], 1
        q = torch.rand(b, h, ql, d, device=dev, dtype=torch.bfloat16, generator=g) * 2 - 1
        k = torch.rand(b, kvh, s, d, device=dev, dtype=torch.bfloat16, generator=g) * 2 - 1
        v = torch.rand(b, kvh, s, d, device=dev, dtype=torch.bfloat16, generator=g) * 2 - 1
        row = {"name": name, "per_backend_us": {}}

        def call():
            if name not in PREFILL:
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            if ql == s:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            F.scaled_dot_product_attention(q, k[:, :, :s - ql], v[:, :, :s - ql],
                                           enable_gqa=True)
            return F.scaled_dot_product_attention(q, k[:, :, s - ql:], v[:, :, s - ql:],
                                                  is_causal=True, enable_gqa=True)

        for bname, member in BACKENDS.items():
            try:
                with sdpa_kernel([getattr(SDPBackend, member)]):
                    fn = call
                    fn()
                    torch.cuda.synchronize()
                    row["per_backend_us"][bname] = time_us(
                        fn, args.iters, args.warmup, flush, mode == "clean")
            except Exception as e:  # a backend that rejects the shape is skipped
                row["per_backend_us"][bname] = None
                row.setdefault("errors", {})[bname] = str(e).splitlines()[0][:160]
        ok = {k_: t for k_, t in row["per_backend_us"].items() if t is not None}
        if ok:
            best = min(ok, key=ok.get)
            row["best_backend"] = best
            row["median_us"] = ok[best]
        tf = ""
        if name in PREFILL and ok:
            fl = prefill_flops(b, ql, s, h, d)
            row["tflops"] = {k_: fl / (t * 1e-6) / 1e12 for k_, t in ok.items()}
            tf = "  TFLOP/s " + " ".join(f"{k_}={x:.0f}" for k_, x in row["tflops"].items())
        print(f"{name:10s} " + " ".join(
            f"{k_}={t:.1f}us" if t is not None else f"{k_}=n/a"
            for k_, t in row["per_backend_us"].items()) + tf, flush=True)
        out["results"].append(row)
        del q, k, v
        torch.cuda.empty_cache()
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
