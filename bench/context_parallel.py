#!/usr/bin/env python3
"""Decode context parallelism (issue 25): time per decode step on 1 GPU and sharded over the
GPUs of a torchrun group, the speed-up, the cost of the exchange and of the merge, and the
output difference against the 1-GPU result.

Workloads (W1's heads: 32 query / 8 KV heads, head 128, blocks of 16, bf16 by default):
  1m: one sequence of 1,048,576 tokens;
  w4: bench/workloads.cpp's W4: 256 sequences, lengths uniform 128..8192 (its SplitMix64,
      seed 1, so the same lengths as `pagedattn bench --workloads W4`).

    torchrun --standalone --nproc-per-node=2 bench/context_parallel.py            # 2 GPUs
    torchrun --standalone --nproc-per-node=1 bench/context_parallel.py            # 1 GPU
    python3 bench/context_parallel.py --simulate 2       # 1 GPU + 2 ranks simulated on it
    torchrun --standalone --nproc-per-node=2 bench/context_parallel.py \\
        --device cpu --shrink 256 --iters 3                                        # CPU smoke

Rank 0 first times the 1-GPU step over the whole cache (the baseline), then every scheme
(interleaved, contiguous) and merge (fp32, pairwise) on all ranks: each rank holds only its
shard's blocks (a compact cache), runs the local attention with LSE, all-gathers (out, lse)
and merges. Times are CUDA-event times per step, the whole step captured in a CUDA graph
unless --no-graph (the baseline too), reported as the slowest rank's. "local", "gather" and
"merge" are the three parts timed on their own the same way. In a group of one, --simulate N
(default 2) also runs N shards one after another on the one device: each shard's local time,
the stacking and the merge of the N partial states, an estimated N-GPU step (slowest shard +
stack + merge; no link transfer) and the merged output's difference from the 1-GPU result.
--json writes every number.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set
here before the process group exists (on a shared host multicast can take GPUs out of
service).
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import pagedattn  # noqa: E402
from pagedattn import distributed as cp  # noqa: E402

H, KVH, D, BS = 32, 8, 128, 16
MASK = (1 << 64) - 1


def w4_lens(seed: int = 1) -> list[int]:
    """W4's lengths: bench/workloads.cpp's SplitMix64 (state += golden; uniform = lo + next %
    span)."""
    state, out = seed, []
    for _ in range(256):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        out.append(128 + z % (8192 - 128 + 1))
    return out


def workloads(shrink: int):
    w = {"1m": [1 << 20], "w4": w4_lens()}
    return {k: [max(1, n // shrink) for n in v] for k, v in w.items()}


def build(lens, dtype, device, seed=0):
    """The global batch, identical on every rank: a random block permutation (seeded), N(0, 1)
    keys and values (generated on the device, then rank 0's broadcast), the query."""
    g = torch.Generator().manual_seed(seed)
    blocks = [-(-n // BS) for n in lens]
    pool = sum(blocks)
    perm = torch.randperm(pool, generator=g).to(torch.int32)
    bt = torch.zeros((len(lens), max(blocks)), dtype=torch.int32)
    nxt = 0
    for s, b in enumerate(blocks):
        bt[s, :b] = perm[nxt:nxt + b]
        nxt += b
    gd = torch.Generator(device=device).manual_seed(seed + 1)
    k = torch.empty((pool, BS, KVH, D), dtype=dtype, device=device).normal_(generator=gd)
    v = torch.empty((pool, BS, KVH, D), dtype=dtype, device=device).normal_(generator=gd)
    q = torch.randn((len(lens), H, D), generator=g).to(device, dtype)
    # Rank 0's values everywhere: a device generator need not give the same numbers on every
    # GPU, and the 1-GPU comparison needs exactly the same cache.
    for t in (k, v, q):
        dist.broadcast(t, src=0)
    return q, k, v, bt, torch.tensor(lens, dtype=torch.int32)


def timed(fn, iters, warmup, device, graph):
    """Milliseconds per call of fn (CUDA events; a CUDA graph of one call when `graph`)."""
    for _ in range(warmup):
        fn()
    run = fn
    if device.type == "cuda" and graph:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # a warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            fn()
        run = g.replay
        run()
    if device.type == "cuda":
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            run()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) / iters
    t = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - t) * 1e3 / iters


def slowest(ms: float, device) -> float:
    x = torch.tensor([ms], dtype=torch.float64, device=device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return float(x.item())


def simulate(args, name, q, k, v, bt, sl, ref, base_ms, device, graph, say):
    """N ranks simulated on the one device of a group of one: every shard's local attention
    (its own compact cache) timed on its own, then the N partial states stacked (the device
    copy an all-gather ends with; the link's transfer time is not in it) and merged. The
    estimate of an N-GPU step is the slowest shard's local time + stack + merge; the merged
    output is compared with the 1-GPU result."""
    n = args.simulate
    rows = []
    for scheme in args.schemes.split(","):
        locals_ms, states, keep = [], [], []
        for r in range(n):
            shard = cp.shard_block_table(bt, sl, BS, n, r, scheme, renumber=True)
            pb = shard.physical_blocks.long().to(device)
            if pb.numel() == 0:
                pb = torch.zeros(1, dtype=torch.long, device=device)
            cache = pagedattn.KVCache(k.index_select(0, pb), v.index_select(0, pb))
            step = cp.ContextParallelDecode(device=device)
            step.plan(shard.block_table, shard.seq_lens, num_heads=H, num_kv_heads=KVH,
                      head_size=D, cache=cache, q_dtype=q.dtype)
            states.append(step.local_state(q, cache))
            locals_ms.append(timed(lambda s_=step, c_=cache: s_.local_state(q, c_), args.iters,
                                   args.warmup, device, graph))
            keep.append((step, cache))
        packed = [cp._pack(o, l_) for o, l_ in states]
        stack_ms = timed(lambda: torch.stack(packed), args.iters, args.warmup, device, graph)
        outs, lses = cp._unpack(torch.stack(packed), D)
        for merge in args.merges.split(","):
            merge_fn = cp.merge_partial_states if merge == "fp32" else cp.merge_pairwise
            merge_ms = timed(lambda f=merge_fn: f(outs, lses), args.iters, args.warmup, device,
                             graph)
            merged, _ = merge_fn(outs, lses)
            diff = (merged.float() - ref.float()).abs().max().item()
            est = max(locals_ms) + stack_ms + merge_ms
            rows.append(dict(workload=name, world=1, simulated_ranks=n, scheme=scheme,
                             merge=merge, dtype=args.dtype, graph=graph, base_ms=base_ms,
                             local_ms=locals_ms, stack_ms=stack_ms, merge_ms=merge_ms,
                             est_step_ms=est, est_speedup=base_ms / est, max_abs_diff=diff))
            say(f"  sim {n} ranks {scheme:11s} {merge:8s} local "
                + "/".join(f"{t:.4f}" for t in locals_ms)
                + f"  stack {stack_ms:.4f}  merge {merge_ms:.4f}  est. step {est:.4f} ms "
                f"({base_ms / est:4.2f}x)  max|diff| vs 1 GPU {diff:.3e}")
        del keep, states, packed, outs, lses
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="1m,w4")
    ap.add_argument("--schemes", default="interleaved,contiguous")
    ap.add_argument("--merges", default="fp32,pairwise")
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-graph", action="store_true", help="time eager calls, no CUDA graph")
    ap.add_argument("--shrink", type=int, default=1, help="divide every length (smoke tests)")
    ap.add_argument("--simulate", type=int, default=2, metavar="N",
                    help="in a group of one: also shard over N simulated ranks on this one "
                         "device (0 = off): each shard's local time, the stacking of the N "
                         "partial states and the merge")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]

    if "RANK" not in os.environ:  # plain `python3 bench/context_parallel.py`: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29531"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if args.device == "cuda":
        if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
            raise SystemExit(f"context_parallel: rank {rank} needs cuda:{local_rank}; this "
                             f"machine has {torch.cuda.device_count()} GPU(s)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
    graph = not args.no_graph
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    say(f"context_parallel: {world} rank(s) on {args.device}, {args.dtype}, {H}/{KVH} heads, "
        f"head {D}, blocks of {BS}, {'CUDA graph' if graph and device.type == 'cuda' else 'eager'}"
        f", NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}")
    results = []
    for name in args.workloads.split(","):
        lens = workloads(args.shrink)[name]
        q, k, v, bt, sl = build(lens, dtype, device)
        say(f"\n{name}: {len(lens)} sequence(s), {sum(lens)} tokens, KV "
            f"{2 * k.numel() * k.element_size() / 2**30:.2f} GiB in all")
        # ---- the 1-GPU baseline, on rank 0
        ref = None
        base_ms = float("nan")
        if rank == 0:
            cache = pagedattn.KVCache(k, v)
            w = pagedattn.BatchAttention(device)
            w.plan(bt, sl, torch.arange(len(lens) + 1, dtype=torch.int32), num_heads=H,
                   num_kv_heads=KVH, head_size=D, cache=cache, q_dtype=dtype)
            ref = w.run(q, cache)
            base_ms = timed(lambda: w.run(q, cache), args.iters, args.warmup, device, graph)
            say(f"  1 GPU                      {base_ms:8.4f} ms/step")
            del w, cache
        dist.barrier()
        for scheme in args.schemes.split(","):
            shard = cp.shard_block_table(bt, sl, BS, world, rank, scheme, renumber=True)
            pb = shard.physical_blocks.long().to(device)
            if pb.numel() == 0:
                pb = torch.zeros(1, dtype=torch.long, device=device)
            cache = pagedattn.KVCache(k.index_select(0, pb), v.index_select(0, pb))
            for merge in args.merges.split(","):
                step = cp.ContextParallelDecode(device=device, merge=merge)
                step.plan(shard, num_heads=H, num_kv_heads=KVH, head_size=D, cache=cache,
                          q_dtype=dtype)
                out = step.run(q, cache)
                step_ms = slowest(timed(lambda: step.run(q, cache), args.iters, args.warmup,
                                        device, graph), device)
                # The parts on their own: local attention, the exchange, the merge.
                # Every rank times every part (the maxima below are collectives).
                parts = {"local": 0.0}
                local = step._local
                if local is not None:
                    q_local = q if step._idx is None else q.index_select(0, step._idx)
                    parts["local"] = timed(lambda: local.run(q_local, cache, return_lse=True),
                                           args.iters, args.warmup, device, graph)
                packed = cp._pack(out, torch.zeros((len(lens), H), dtype=torch.float32,
                                                   device=device))
                parts["gather"] = timed(lambda: cp._all_gather(packed, None), args.iters,
                                        args.warmup, device, graph)
                outs, lses = cp._unpack(cp._all_gather(packed, None), D)
                merge_fn = cp.merge_partial_states if merge == "fp32" else cp.merge_pairwise
                parts["merge"] = timed(lambda: merge_fn(outs, lses), args.iters, args.warmup,
                                       device, graph)
                parts = {p: slowest(t, device) for p, t in parts.items()}
                row = dict(workload=name, world=world, scheme=scheme, merge=merge,
                           dtype=args.dtype, graph=graph, step_ms=step_ms, base_ms=base_ms,
                           local_tokens=int(shard.seq_lens.sum()), **{f"{p}_ms": t for p, t in
                                                                     parts.items()})
                if rank == 0:
                    diff = (out.float() - ref.float()).abs().max().item()
                    scale = ref.float().abs().max().item()
                    row.update(speedup=base_ms / step_ms, max_abs_diff=diff,
                               max_abs_ref=scale)
                    say(f"  {world} GPU {scheme:11s} {merge:8s} {step_ms:8.4f} ms/step  "
                        f"speed-up {base_ms / step_ms:5.2f}x  "
                        + "  ".join(f"{p} {t:.4f}" for p, t in parts.items())
                        + f"  max|diff| vs 1 GPU {diff:.3e} (max|out| {scale:.3e})")
                results.append(row)
                del step
            del cache
        if world == 1 and args.simulate >= 2:
            results += simulate(args, name, q, k, v, bt, sl, ref, base_ms, device, graph, say)
        del q, k, v
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
