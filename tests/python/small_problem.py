"""A small mixed decode/prefill batch for the API tests: the cache written through write_kv,
metadata as numpy arrays, the framework's arrays on request."""

from __future__ import annotations

import numpy as np

import pagedattn


class Problem:
    """S sequences of `seq_lens` tokens (the last `q_lens` of each are this step's queries),
    blocks of 16 in a pool with spare blocks, an nhd cache."""

    def __init__(self, framework="numpy", device="cpu", dtype="fp32", H=4, KVH=2, D=64, BS=16,
                 seq_lens=(20, 5, 33), q_lens=(2, 1, 4), seed=0):
        rng = np.random.default_rng(seed)
        self.H, self.KVH, self.D, self.BS = H, KVH, D, BS
        self.framework, self.device = framework, device
        blocks = [(n + BS - 1) // BS for n in seq_lens]
        pool = sum(blocks) + 2
        perm = rng.permutation(pool).astype(np.int32)
        width = max(blocks)
        bt = np.zeros((len(seq_lens), width), np.int32)
        nxt = 0
        for s, b in enumerate(blocks):
            bt[s, :b] = perm[nxt:nxt + b]
            nxt += b
        slots = np.concatenate([bt[s, np.arange(n) // BS].astype(np.int64) * BS + np.arange(n) % BS
                                for s, n in enumerate(seq_lens)])
        self.block_table = bt
        self.seq_lens = np.array(seq_lens, np.int32)
        self.query_start_loc = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        self.num_tokens = int(self.query_start_loc[-1])
        self.slot_mapping = slots
        self.key = rng.uniform(-1, 1, (len(slots), KVH, D)).astype(np.float32)
        self.value = rng.uniform(-1, 1, (len(slots), KVH, D)).astype(np.float32)
        self.query = rng.uniform(-1, 1, (self.num_tokens, H, D)).astype(np.float32)
        self.k_cache = np.full((pool, BS, KVH, D), np.nan, np.float32)
        self.v_cache = np.full((pool, BS, KVH, D), np.nan, np.float32)
        self.dtype = dtype
        self.cache = pagedattn.KVCache(self.t(self.k_cache, True), self.t(self.v_cache, True))
        pagedattn.write_kv(self.t(self.key), self.t(self.value), self.t(self.slot_mapping),
                           self.cache)

    def t(self, a, float_dtype=None):
        """`a` in the problem's framework, dtype and device (float arrays in `dtype`)."""
        if self.framework == "numpy":
            if a.dtype == np.float32 and self.dtype == "fp16":
                return a.astype(np.float16)
            return a
        import torch

        t = torch.from_numpy(a)
        if t.is_floating_point():
            t = t.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.dtype])
        return t.to(self.device)

    def plan(self, w=None, **kw):
        w = w or pagedattn.BatchAttention(self.device)
        w.plan(self.t(self.block_table), self.t(self.seq_lens), self.t(self.query_start_loc),
               num_heads=self.H, num_kv_heads=self.KVH, head_size=self.D, **kw)
        return w

    def reference(self, **kw):
        """The oracle's (out, lse) on CPU copies, as float64 numpy arrays."""
        import torch

        cpu = (lambda x: x.cpu() if isinstance(x, torch.Tensor) else x)
        cache = pagedattn.KVCache(cpu(self.cache.k_cache), cpu(self.cache.v_cache))
        out, lse = pagedattn.reference_attention(cpu(self.t(self.query)), cache, self.block_table,
                                                 self.seq_lens, self.query_start_loc,
                                                 return_lse=True, **kw)
        return np.asarray(out, np.float64), np.asarray(lse, np.float64)
