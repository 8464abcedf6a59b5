"""Worker of tests/python/test_distributed.py: one rank of a Gloo process group on the CPU.
It builds the same global batch as every other rank (seeded), takes its shard, runs
pagedattn.distributed.context_parallel_decode and compares with the single-process result
(pagedattn.paged_attention over the whole sequences) and the oracle. Kept in its own module so
that torch.multiprocessing's spawned processes can import it."""

from __future__ import annotations

import json
import math
import os

import torch
import torch.distributed as dist

import pagedattn
from pagedattn import distributed as cp

# Output budget against the single-process result: the partial outputs are rounded to the
# query dtype before the merge, so a few ulps of the dtype (pagedattn's table is 1e-3 / 8e-3
# for one rounding; two roundings and the merge's fp32 arithmetic stay within twice that).
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_batch(seq_lens, block_size, dtype, H=8, KVH=2, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    blocks = [-(-n // block_size) for n in seq_lens]
    pool = sum(blocks) + 3
    perm = torch.randperm(pool, generator=g).to(torch.int32)
    width = max(blocks)
    bt = torch.zeros((len(seq_lens), width), dtype=torch.int32)
    k = torch.full((pool, block_size, KVH, D), float("nan"), dtype=dtype)
    v = torch.full((pool, block_size, KVH, D), float("nan"), dtype=dtype)
    nxt = 0
    for s, (n, b) in enumerate(zip(seq_lens, blocks)):
        bt[s, :b] = perm[nxt:nxt + b]
        nxt += b
        for p in range(n):
            blk, off = int(bt[s, p // block_size]), p % block_size
            k[blk, off] = (torch.rand((KVH, D), generator=g) * 2 - 1).to(dtype)
            v[blk, off] = (torch.rand((KVH, D), generator=g) * 2 - 1).to(dtype)
    q = (torch.rand((len(seq_lens), H, D), generator=g) * 2 - 1).to(dtype)
    sinks = torch.rand((H,), generator=g) * 3 - 1
    return q, k, v, bt, torch.tensor(seq_lens, dtype=torch.int32), sinks


def cases():
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for scheme in cp.SCHEMES:
            out.append(dict(dtype=dtype, scheme=scheme, block_size=16,
                            seq_lens=[1, 16, 17, 40, 100, 257], renumber=scheme == "contiguous"))
    out.append(dict(dtype=torch.float16, scheme="interleaved", block_size=1,
                    seq_lens=[1, 2, 3, 29], renumber=True))
    out.append(dict(dtype=torch.float32, scheme="interleaved", block_size=16,
                    seq_lens=[1, 5, 70], renumber=False, sinks=True, softcap=5.0))
    out.append(dict(dtype=torch.bfloat16, scheme="interleaved", block_size=16,
                    seq_lens=[1, 5, 70, 300], renumber=False, sinks=True, merge="pairwise"))
    out.append(dict(dtype=torch.float32, scheme="contiguous", block_size=16, seq_lens=[9],
                    renumber=True))  # one block: every rank but one empty
    return out


def check_mismatches_are_refused(rank, world):
    """A shard made for another world size or rank is a ValueError naming the argument, on
    every rank, before any collective (so no rank is left waiting in one)."""
    bt = torch.arange(8, dtype=torch.int32).reshape(1, 8)
    lens = torch.tensor([100], dtype=torch.int32)
    kw = dict(num_heads=4, num_kv_heads=1, head_size=64)
    step = cp.ContextParallelDecode()
    for other_world in (world + 1, max(1, world // 2)):
        wrong = cp.shard_block_table(bt, lens, 16, other_world, 0)
        try:
            step.plan(wrong, **kw)
        except ValueError as e:
            assert "world_size" in str(e) and f"has {world}" in str(e), str(e)
        else:
            raise AssertionError(f"a shard for {other_world} ranks ran on a group of {world}")
        try:  # the same through the tensors and their world_size
            cache = pagedattn.KVCache(torch.zeros(8, 16, 1, 64), torch.zeros(8, 16, 1, 64))
            cp.context_parallel_decode(torch.zeros(1, 4, 64), cache, wrong.block_table,
                                       wrong.seq_lens, world_size=other_world)
        except ValueError as e:
            assert "world_size" in str(e), str(e)
        else:
            raise AssertionError("world_size mismatch through tensors was accepted")
    other = cp.shard_block_table(bt, lens, 16, world, (rank + 1) % world)
    try:
        step.plan(other, **kw)
    except ValueError as e:
        assert "rank" in str(e) and f"is rank {rank}" in str(e), str(e)
    else:
        raise AssertionError(f"rank {rank} ran rank {(rank + 1) % world}'s shard")


def run(rank, world, port, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    report = []
    try:
        for i, c in enumerate(cases()):
            dtype, bs = c["dtype"], c["block_size"]
            q, k, v, bt, lens, sinks = make_batch(c["seq_lens"], bs, dtype, seed=i)
            sinks = sinks if c.get("sinks") else None
            softcap = c.get("softcap", 0.0)
            S, H, D = q.shape
            scale = 6.0 / math.sqrt(D)  # a peaked softmax, as the C++ tests use
            qsl = torch.arange(S + 1, dtype=torch.int32)
            single = pagedattn.paged_attention(q, pagedattn.KVCache(k, v), bt, lens, qsl,
                                               scale=scale, softcap=softcap, sinks=sinks)
            oracle = pagedattn.reference_attention(q, pagedattn.KVCache(k, v), bt, lens, qsl,
                                                   scale=scale, softcap=softcap, sinks=sinks)
            shard = cp.shard_block_table(bt, lens, bs, world, rank, c["scheme"], c["renumber"])
            if c["renumber"]:
                pb = shard.physical_blocks.long()
                if pb.numel() == 0:  # a rank without blocks still needs a cache of one
                    pb = torch.zeros(1, dtype=torch.long)
                cache = pagedattn.KVCache(k[pb].contiguous(), v[pb].contiguous())
            else:
                cache = pagedattn.KVCache(k, v)
            # Every other case the LocalShard itself (its world size and rank checked), the
            # others its tensors.
            meta = (shard,) if i % 2 else (shard.block_table, shard.seq_lens)
            out, lse = cp.context_parallel_decode(q, cache, *meta, scale=scale, softcap=softcap, sinks=sinks,
                                                  return_lse=True,
                                                  merge=c.get("merge", "fp32"))
            tol = TOL[dtype]
            diff = (out.float() - single.float()).abs().max().item()
            diff_oracle = (out.float() - oracle).abs().max().item()
            assert diff <= tol, f"case {i} {c}: max |cp - single| = {diff} > {tol}"
            assert diff_oracle <= tol, f"case {i} {c}: max |cp - oracle| = {diff_oracle} > {tol}"
            assert torch.isfinite(lse).all(), f"case {i}: non-finite lse {lse}"
            # Every rank merged the same states in the same order: the same bits.
            outs = [torch.empty_like(out) for _ in range(world)]
            dist.all_gather(outs, out)
            assert all(torch.equal(o, outs[0]) for o in outs), f"case {i}: ranks differ"
            empty = int((shard.seq_lens == 0).sum())
            report.append(dict(case=i, diff=diff, diff_oracle=diff_oracle, empty_shards=empty))
        check_mismatches_are_refused(rank, world)
        if rank == 0:
            with open(os.path.join(out_dir, f"cp_w{world}.json"), "w") as f:
                json.dump(report, f)
    finally:
        dist.destroy_process_group()
