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
  python3 bench/peers/run_peers.py --prebuild-flashinfer fi_aot.tar.xz   # JIT only, no timing
  python3 bench/peers/run_peers.py --cpu-smoke                            # CPU-side self-test
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field, replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MASK64 = (1 << 64) - 1


class SplitMix64:
    """bench/workloads.cpp's generator, bit for bit (the block permutation and W4's lengths)."""

    def __init__(self, seed: int):
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self, lo: int, hi: int) -> int:
        return lo + self.next() % ((hi - lo) + 1)


@dataclass
class Workload:
    name: str
    group: str
    description: str
    seq_lens: list
    query_lens: list  # one per sequence
    num_heads: int = 32
    num_kv_heads: int = 8
    head_size: int = 128
    block_size: int = 16
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    page_pad: int = 0  # elements after each block (padded pages)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_decode(self) -> bool:
        return all(q == 1 for q in self.query_lens)

    @property
    def is_prefill(self) -> bool:
        return self.group == "prefill"

    @property
    def equal_lengths(self) -> bool:
        return len(set(self.seq_lens)) == 1 and len(set(self.query_lens)) == 1

    def useful_bytes(self) -> int:
        """bench/workloads.cpp useful_bytes: K and V of every token once, the query and output
        rows."""
        kv_elem = 1 if self.kv_dtype.startswith("fp8") else 2
        kv = 2 * sum(self.seq_lens) * self.num_kv_heads * self.head_size * kv_elem
        qo = 2 * self.num_tokens * self.num_heads * self.head_size * 2
        return kv + qo

    def allowed_pairs(self) -> int:
        """(query, key) pairs the bottom-right causal mask allows."""
        total = 0
        for s, q in zip(self.seq_lens, self.query_lens):
            # Query i (0-based) sits at position s - q + i and sees keys 0 .. s - q + i.
            total += q * (s - q) + q * (q + 1) // 2
        return total

    def flops(self) -> int:
        return 4 * self.allowed_pairs() * self.head_size * self.num_heads


def cli_workloads(cli: str, seed: int) -> list:
    """W1-W7 and the trace steps from `pagedattn bench --list-workloads`."""
    try:
        p = subprocess.run([cli, "bench", "--list-workloads", "--seed", str(seed)],
                           capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"run_peers: {cli} bench --list-workloads failed ({e}); build the CLI "
                 f"(ninja -C build pagedattn_cli) or pass --cli")
    out = []
    for w in json.loads(p.stdout)["workloads"]:
        if w["group"] not in ("standard", "trace"):
            continue
        q = w["query_lens"] or [1] * len(w["seq_lens"])
        out.append(Workload(name=w["name"], group=w["group"], description=w["description"],
                            seq_lens=list(w["seq_lens"]), query_lens=list(q),
                            num_heads=w["num_heads"], num_kv_heads=w["num_kv_heads"],
                            head_size=w["head_size"], block_size=w["block_size"],
                            dtype=w["dtype"], kv_dtype=w["kv_dtype"], page_pad=w["page_pad"]))
    return out


def derived_workloads(base: list) -> list:
    """The fp8 and head-size configurations at the W1 shape, and the prefill shapes."""
    w1 = next((w for w in base if w.name == "W1"), None)
    if w1 is None:
        w1 = Workload("W1", "standard", "", [4096] * 64, [1] * 64)
    out = [replace(w1, name="W1-fp8", group="config", kv_dtype="fp8_e4m3",
                   description="W1 with an fp8 e4m3 cache (scale 1)")]
    for h in (80, 96, 256):
        out.append(replace(w1, name=f"W1-h{h}", group="config", head_size=h,
                           description=f"W1 with head size {h}"))
    out.append(Workload("P-chunks", "prefill", "4 x 2048-token chunks ending an 8192 context",
                        [8192] * 4, [2048] * 4))
    out.append(Workload("P-fresh", "prefill", "1 x 8192 fresh, causal", [8192], [8192]))
    return out


def select(workloads: list, spec: str) -> list:
    names = [s for s in spec.split(",") if s]
    groups = {"standard", "trace", "config", "prefill"}
    known = {w.name for w in workloads} | groups | {"all"}
    bad = [n for n in names if n not in known]
    if bad:
        sys.exit(f"run_peers: --workloads: unknown {', '.join(bad)} (known: all, "
                 f"{', '.join(sorted(groups))}, {', '.join(w.name for w in workloads)})")
    return [w for w in workloads
            if "all" in names or w.name in names or w.group in names]


def scaled_down(w: Workload, factor: int, max_seqs: int) -> Workload:
    """A small copy of `w` for the CPU smoke test (same structure, lengths / factor)."""
    n = min(len(w.seq_lens), max_seqs)
    seq, q = [], []
    for s, ql in zip(w.seq_lens[:n], w.query_lens[:n]):
        s2 = max(1, s // factor)
        q2 = max(1, min(s2, ql // factor if ql > 1 else 1))
        seq.append(s2)
        q.append(q2)
    bs = min(w.block_size, 64)
    return replace(w, seq_lens=seq, query_lens=q, block_size=bs,
                   page_pad=64 if w.page_pad else 0)


# ----------------------------------------------------------------------------- data
_TORCH_DTYPES = {}


def torch_dtype(name: str):
    import torch
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({"bf16": torch.bfloat16, "fp16": torch.float16,
                              "fp32": torch.float32, "fp8_e4m3": torch.float8_e4m3fn,
                              "fp8_e5m2": torch.float8_e5m2})
    return _TORCH_DTYPES[name]


class Batch:
    """One workload's data on `device`: the paged cache (filled through pagedattn), the query
    and the metadata in each library's form."""

    def __init__(self, w: Workload, device: str, seed: int):
        import torch
        import pagedattn
        self.w = w
        self.device = device
        S, bs = len(w.seq_lens), w.block_size
        nblocks = [(s + bs - 1) // bs for s in w.seq_lens]
        needed = sum(nblocks)
        self.max_blocks = max(1, max(nblocks))
        pool = needed + 16
        # bench/runner.cpp: the blocks in a seeded random permutation of the pool.
        perm = list(range(pool))
        rng = SplitMix64(seed)
        for i in range(pool - 1, 0, -1):
            j = rng.uniform(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        table = [[0] * self.max_blocks for _ in range(S)]
        nxt = 0
        for s in range(S):
            for j in range(nblocks[s]):
                table[s][j] = perm[nxt]
                nxt += 1
        self.num_blocks = pool
        i32 = torch.int32
        self.block_table = torch.tensor(table, dtype=i32)
        self.seq_lens = torch.tensor(w.seq_lens, dtype=i32)
        qsl = [0]
        for q in w.query_lens:
            qsl.append(qsl[-1] + q)
        self.qsl = torch.tensor(qsl, dtype=i32)
        self.nblocks = nblocks
        dev = torch.device(device)
        g = torch.Generator(device=dev).manual_seed(seed)
        kvh, d = w.num_kv_heads, w.head_size
        block_elems = bs * kvh * d
        stride = block_elems + w.page_pad
        kv_t = torch_dtype(w.kv_dtype)
        q_t = torch_dtype(w.dtype)

        def cache_tensor():
            raw = (torch.rand(pool * stride, device=dev, generator=g, dtype=torch.float32)
                   * 2 - 1).to(kv_t)
            return raw.as_strided((pool, bs, kvh, d), (stride, kvh * d, d, 1))

        self.k_cache = cache_tensor()
        self.v_cache = cache_tensor()
        # fp8: stored = fp8(x / scale); scale 1 gives every library its fastest path (no
        # separate rescaling of the output); the oracle check covers the dequantisation.
        self.k_scale = self.v_scale = 1.0
        self.cache = pagedattn.KVCache(self.k_cache, self.v_cache, layout="nhd",
                                       k_scale=self.k_scale, v_scale=self.v_scale)
        # The sequences' tokens through write_kv, from dense K/V in the query dtype.
        lens = self.seq_lens.long()
        seq_of = torch.repeat_interleave(torch.arange(S), lens)
        starts = torch.cumsum(lens, 0) - lens
        pos = torch.arange(int(lens.sum())) - torch.repeat_interleave(starts, lens)
        slot = (self.block_table.long()[seq_of, pos // bs] * bs + pos % bs).to(dev)
        n = slot.numel()
        chunk = 1 << 20
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            key = torch.rand(b - a, kvh, d, device=dev, generator=g) * 2 - 1
            val = torch.rand(b - a, kvh, d, device=dev, generator=g) * 2 - 1
            pagedattn.write_kv(key.to(q_t), val.to(q_t), slot[a:b], self.cache)
        self.query = (torch.rand(self.w.num_tokens, w.num_heads, d, device=dev, generator=g)
                      * 2 - 1).to(q_t)
        self.scale = 1.0 / math.sqrt(d)
        if device != "cpu":
            torch.cuda.synchronize()
        self._dev_meta = None

    def device_meta(self):
        """block_table, seq_lens, query_start_loc on the device (int32)."""
        if self._dev_meta is None:
            self._dev_meta = tuple(x.to(self.device) for x in
                                   (self.block_table, self.seq_lens, self.qsl))
        return self._dev_meta

    def flashinfer_meta(self):
        """FlashInfer's page metadata: indptr [S + 1], indices, last page lengths [S]."""
        import torch
        bs = self.w.block_size
        indptr = [0]
        indices = []
        last = []
        for s, n in enumerate(self.nblocks):
            indptr.append(indptr[-1] + n)
            indices.extend(self.block_table[s, :n].tolist())
            last.append(self.w.seq_lens[s] - (n - 1) * bs)
        f = lambda x: torch.tensor(x, dtype=torch.int32, device=self.device)  # noqa: E731
        return f(indptr), f(indices), f(last)

    def dense_kv(self):
        """[S, KVH, L, D] K and V gathered from the cache (equal lengths only)."""
        w = self.w
        L = w.seq_lens[0]
        nb = self.nblocks[0]
        bt = self.block_table[:, :nb].to(self.device).long()
        out = []
        for c in (self.k_cache, self.v_cache):
            x = c[bt]  # [S, nb, bs, KVH, D]
            x = x.reshape(len(w.seq_lens), nb * w.block_size, w.num_kv_heads, w.head_size)
            out.append(x[:, :L].permute(0, 2, 1, 3).contiguous())
        return out


# ----------------------------------------------------------------------------- oracle
@dataclass
class CheckRow:
    token: int      # row of the [T, H, D] output
    seq: int
    visible: int    # keys the row sees (the oracle's seq_len for it)
    first_block: int = 0  # the row's keys start at this logical block of its sequence


def check_rows(w: Workload, rows_per_seq: int, seed: int) -> list:
    S = len(w.seq_lens)
    seqs = sorted({0, S - 1, max(range(S), key=lambda s: w.seq_lens[s])})
    rng = random.Random(seed)
    qsl = [0]
    for q in w.query_lens:
        qsl.append(qsl[-1] + q)
    out = []
    for s in seqs:
        q = w.query_lens[s]
        picks = {0, q - 1}
        while len(picks) < min(q, rows_per_seq):
            picks.add(rng.randrange(q))
        for i in sorted(picks):
            out.append(CheckRow(qsl[s] + i, s, w.seq_lens[s] - q + i + 1))
    return out


def oracle(batch: Batch, rows: list):
    """reference_attention of the sampled rows, each as a one-row sequence over a CPU copy of
    the blocks it reads; [R, H, D] fp32."""
    import torch
    import pagedattn
    w, bs = batch.w, batch.w.block_size
    need = {}
    for r in rows:
        last = r.first_block + (r.visible + bs - 1) // bs
        need[r.seq] = max(need.get(r.seq, 0), last)
    host_blocks = []
    base = {}
    for s, n in sorted(need.items()):
        base[s] = len(host_blocks)
        host_blocks.extend(batch.block_table[s, :n].tolist())
    idx = torch.tensor(host_blocks, dtype=torch.long, device=batch.k_cache.device)

    def gather(c):  # through a byte view: indexing has no fp8 kernels
        raw = c.view(torch.uint8) if c.element_size() == 1 else c
        return raw[idx].cpu().contiguous().view(c.dtype)
    k, v = gather(batch.k_cache), gather(batch.v_cache)
    cache = pagedattn.KVCache(k, v, layout="nhd", k_scale=batch.k_scale, v_scale=batch.v_scale)
    width = max((r.visible + bs - 1) // bs for r in rows)
    table = torch.zeros(len(rows), width, dtype=torch.int32)
    for i, r in enumerate(rows):
        n = (r.visible + bs - 1) // bs
        start = base[r.seq] + r.first_block
        table[i, :n] = torch.arange(start, start + n, dtype=torch.int32)
    q = batch.query[[r.token for r in rows]].cpu()
    lens = torch.tensor([r.visible for r in rows], dtype=torch.int32)
    qsl = torch.arange(len(rows) + 1, dtype=torch.int32)
    return pagedattn.reference_attention(q, cache, table, lens, qsl, scale=batch.scale)


def tolerance(w: Workload):
    try:
        from pagedattn import _C
        return _C.testing.tolerance_for(w.dtype, w.kv_dtype)
    except Exception:  # built without the test list: DESIGN.md §4's bf16/fp16 budgets
        return {"bf16": (8e-3, 8e-3), "fp16": (1e-3, 1e-3)}.get(w.dtype, (1e-5, 1e-5))


def compare(got, ref, tol) -> tuple:
    """(ok, max |diff|, worst |diff| / budget, first bad description)."""
    import torch
    atol, rtol = tol
    got = got.double().cpu()
    ref = ref.double().cpu()
    diff = (got - ref).abs()
    budget = atol + rtol * ref.abs()
    finite = torch.isfinite(got)
    ratio = torch.where(finite, diff / budget, torch.full_like(diff, math.inf))
    worst = ratio.max().item() if ratio.numel() else 0.0
    ok = bool(worst <= 1.0)
    detail = ""
    if not ok:
        i = int(ratio.reshape(-1).argmax())
        detail = f"got {got.reshape(-1)[i].item():.5g}, oracle {ref.reshape(-1)[i].item():.5g}"
    return ok, diff[finite].max().item() if finite.any() else math.inf, worst, detail


# ----------------------------------------------------------------------------- timing
class Timer:
    """`pagedattn bench`'s method (bench/bench_support.cu time_call), in PyTorch."""

    def __init__(self, device: str, iters: int, warmup: int, flush: str):
        import torch
        self.iters, self.warmup, self.flush_mode = iters, warmup, flush
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush = None if flush == "none" else torch.empty(
            max(2 * l2, 64 << 20) // 16 * 16, dtype=torch.uint8, device=device)
        # ~100 us of spin at the H200's clock: longer than any library's host launch path.
        self.spin_cycles = 200_000

    def __call__(self, fn) -> list:
        import torch
        for _ in range(self.warmup):
            fn()
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


# ----------------------------------------------------------------------------- implementations
class Unsupported(Exception):
    """The library cannot run this workload (the message says why)."""


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (type(e).__name__ + ": " + (s[0] if s else ""))[:200]


class Impl:
    name = "?"
    library = "?"
    #: Output rows in token order [T, H, D] (False: the impl's fn returns something else and
    #: rows() maps it).
    def prepare(self, b: Batch):
        """Plan for `b`; returns fn() -> output. Raises Unsupported."""
        raise NotImplementedError

    def rows(self, out, b: Batch, rows: list):
        return out[[r.token for r in rows]]

    def label(self) -> str:
        return ""


class PagedAttn(Impl):
    name = "pagedattn"
    library = "pagedattn"

    def prepare(self, b):
        import torch
        import pagedattn
        w = b.w
        att = pagedattn.BatchAttention(b.device)
        att.plan(b.block_table, b.seq_lens, b.qsl, num_heads=w.num_heads,
                 num_kv_heads=w.num_kv_heads, head_size=w.head_size, cache=b.cache,
                 q_dtype=b.query.dtype, scale=b.scale)
        self.kernel = att.explain(b.cache, q_dtype=b.query.dtype).get("kernel", "")
        out = torch.empty_like(b.query)
        return lambda: att.run(b.query, b.cache, out=out)

    def label(self):
        return self.kernel


_FI_WORKSPACE = {}


def _fi_workspace(device):
    import torch
    if device not in _FI_WORKSPACE:
        _FI_WORKSPACE[device] = torch.empty(512 << 20, dtype=torch.uint8, device=device)
    return _FI_WORKSPACE[device]


class FlashInfer(Impl):
    """Decode batches: BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True, backend);
    mixed and prefill batches: BatchPrefillWithPagedKVCacheWrapper(backend), causal."""
    library = "flashinfer"

    #: False: a module that is neither prebuilt nor in the JIT cache makes the workload 'n/a'
    #: instead of a compile of minutes in the middle of the timed run.
    allow_jit = False

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"flashinfer-{backend}"

    def prepare(self, b):
        import torch
        try:
            import flashinfer
        except Exception as e:
            raise Unsupported(f"import flashinfer: {_first_line(e)}")
        w = b.w
        if b.device == "cpu":
            raise Unsupported("CUDA only")
        if self.backend == "fa3":  # FlashInfer's own rules (flashinfer/utils.py)
            if w.kv_dtype != w.dtype:
                raise Unsupported(f"fa3 reads an fp8 cache only with an fp8 query")
            if w.head_size not in (64, 128, 256):
                raise Unsupported(f"fa3 has head sizes 64, 128, 256 (not {w.head_size})")
        ready, module = flashinfer_module_ready(flashinfer_module_args(w, self.backend))
        if not ready and not self.allow_jit:
            raise Unsupported(f"module {module[:60]}... not built (run_peers.py "
                              f"--prebuild-flashinfer, or --allow-jit)")
        indptr, indices, last = b.flashinfer_meta()
        kv_t = torch_dtype(w.kv_dtype)
        ws = _fi_workspace(b.device)
        try:
            if w.is_decode:
                self.kind = "decode (tensor cores)"
                wr = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    ws, "NHD", use_tensor_cores=True, backend=self.backend)
                wr.plan(indptr, indices, last, w.num_heads, w.num_kv_heads, w.head_size,
                        w.block_size, pos_encoding_mode="NONE", q_data_type=b.query.dtype,
                        kv_data_type=kv_t, sm_scale=b.scale)
            else:
                self.kind = "paged prefill"
                wr = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD",
                                                                    backend=self.backend)
                wr.plan(b.qsl.to(b.device), indptr, indices, last, w.num_heads,
                        w.num_kv_heads, w.head_size, w.block_size, causal=True,
                        pos_encoding_mode="NONE", q_data_type=b.query.dtype,
                        kv_data_type=kv_t, sm_scale=b.scale)
        except Exception as e:
            raise Unsupported(f"plan: {_first_line(e)}")
        out = torch.empty_like(b.query)
        kv = (b.k_cache, b.v_cache)
        return lambda: wr.run(b.query, kv, out=out)

    def label(self):
        return self.kind


class VllmTriton(Impl):
    """vLLM's Triton unified_attention, called as vLLM's TritonAttentionImpl calls it: the
    split-K (3D) scratch of its metadata builder (16 segments, up to 128 / KV heads sequences)
    and per-tensor fp8 descales."""
    name = "vllm-triton"
    library = "vllm"

    def prepare(self, b):
        import torch
        try:
            from vllm.v1.attention.ops.triton_unified_attention import unified_attention
            from vllm.v1.kv_cache_interface import KVQuantMode
        except Exception as e:
            raise Unsupported(f"import: {_first_line(e)}")
        w = b.w
        dev = b.device
        bt, sl, qsl = b.device_meta()
        threshold = 128 // w.num_kv_heads  # MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
        segments = 16                        # NUM_PAR_SOFTMAX_SEGMENTS
        rows3d = threshold
        dpad = 1 << (w.head_size - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=dev)
        segm_out = torch.empty(rows3d, w.num_heads, segments, dpad, **f32)
        segm_max = torch.empty(rows3d, w.num_heads, segments, **f32)
        segm_sum = torch.empty(rows3d, w.num_heads, segments, **f32)
        k_descale = torch.tensor([b.k_scale], **f32)
        v_descale = torch.tensor([b.v_scale], **f32)
        fp8 = w.kv_dtype.startswith("fp8")
        mode = KVQuantMode.FP8_PER_TENSOR if fp8 else KVQuantMode.NONE
        out = torch.empty_like(b.query)
        max_q, max_k = max(w.query_lens), max(w.seq_lens)
        self.kind = "3D split-K" if (len(w.seq_lens) <= threshold and max_q == 1) else "2D"

        def fn():
            unified_attention(q=b.query, k=b.k_cache, v=b.v_cache, out=out, cu_seqlens_q=qsl,
                              max_seqlen_q=max_q, seqused_k=sl, max_seqlen_k=max_k,
                              softmax_scale=b.scale, causal=True, window_size=(-1, -1),
                              block_table=bt, softcap=0, q_descale=None, k_descale=k_descale,
                              v_descale=v_descale, seq_threshold_3D=threshold,
                              num_par_softmax_segments=segments, softmax_segm_output=segm_out,
                              softmax_segm_max=segm_max, softmax_segm_expsum=segm_sum,
                              kv_quant_mode=mode)
            return out
        return fn

    def label(self):
        return self.kind


class Sdpa(Impl):
    """torch.nn.functional.scaled_dot_product_attention on dense [S, H, L, D] tensors of the
    same values, one backend forced. A chunk that ends a longer context (query length < key
    length) needs the bottom-right causal mask: the flash backend takes it as
    causal_lower_right; cuDNN's is_causal is top-left, so there the equal work is two calls
    (the chunk over the earlier context, unmasked, and over itself, causal), timed together and
    merged, for the check only, with their log-sum-exps."""
    library = "torch"

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"sdpa-{backend}"
        self.kind = ""

    def prepare(self, b):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        w = b.w
        if not w.equal_lengths:
            raise Unsupported("dense attention needs equal lengths (ragged batch)")
        if w.kv_dtype != w.dtype:
            raise Unsupported(f"no {w.kv_dtype} K/V in SDPA")
        member = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                  "math": SDPBackend.MATH}[self.backend]
        S, ql, L = len(w.seq_lens), w.query_lens[0], w.seq_lens[0]
        k, v = b.dense_kv()
        q = b.query.view(S, ql, w.num_heads, w.head_size).permute(0, 2, 1, 3).contiguous()
        scale = b.scale
        self._shape = (S, ql)

        def run1(q_, k_, v_, causal, mask=None):
            with sdpa_kernel([member]):
                return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask,
                                                      is_causal=causal, scale=scale,
                                                      enable_gqa=True)

        try:
            if ql == 1:
                self.kind = "dense decode"
                fn = lambda: run1(q, k, v, False)  # noqa: E731
            elif ql == L:
                self.kind = "dense causal"
                fn = lambda: run1(q, k, v, True)  # noqa: E731
            elif self.backend == "cudnn":
                self.kind = "2 calls (context + causal chunk)"
                fn = self._cudnn_two_calls(q, k, v, L - ql, scale)
            else:
                from torch.nn.attention.bias import causal_lower_right
                mask = causal_lower_right(ql, L)
                self.kind = "dense, causal_lower_right"
                fn = lambda: run1(q, k, v, False, mask)  # noqa: E731
            fn()
            torch.cuda.synchronize() if b.device != "cpu" else None
        except Unsupported:
            raise
        except Exception as e:
            raise Unsupported(_first_line(e))
        return fn

    def _cudnn_two_calls(self, q, k, v, ctx, scale):
        import torch
        op = torch.ops.aten._scaled_dot_product_cudnn_attention
        kc, vc = k[:, :, :ctx], v[:, :, :ctx]
        ks, vs = k[:, :, ctx:], v[:, :, ctx:]
        rep = q.shape[1] // k.shape[1]
        if rep > 1:  # the aten op has no GQA flag: expanded once, outside the timing
            kc, vc, ks, vs = (x.repeat_interleave(rep, dim=1).contiguous()
                              for x in (kc, vc, ks, vs))
        self._parts = None

        def fn():
            a = op(q, kc, vc, None, True, 0.0, False, False, scale=scale)
            c = op(q, ks, vs, None, True, 0.0, True, False, scale=scale)
            self._parts = (a, c)
            return None
        return fn

    def rows(self, out, b, rows):
        import torch
        S, ql = self._shape
        if out is None:  # two cuDNN calls: merge (out, lse) pairs
            (oa, la), (oc, lc) = self._parts[0][:2], self._parts[1][:2]
            la, lc = la.float().reshape(oa.shape[:3]), lc.float().reshape(oc.shape[:3])
            m = torch.maximum(la, lc)
            wa, wc = torch.exp(la - m), torch.exp(lc - m)
            out = ((oa.float() * wa[..., None] + oc.float() * wc[..., None])
                   / (wa + wc)[..., None])
        tok = out.permute(0, 2, 1, 3).reshape(S * ql, out.shape[1], out.shape[3])
        return tok[[r.token for r in rows]]

    def label(self):
        return self.kind


def make_impls(names: list) -> list:
    table = {"pagedattn": PagedAttn, "flashinfer-fa2": lambda: FlashInfer("fa2"),
             "flashinfer-fa3": lambda: FlashInfer("fa3"), "vllm-triton": VllmTriton,
             "sdpa-cudnn": lambda: Sdpa("cudnn"), "sdpa-flash": lambda: Sdpa("flash"),
             "sdpa-math": lambda: Sdpa("math")}
    bad = [n for n in names if n not in table]
    if bad:
        sys.exit(f"run_peers: --peers: unknown {', '.join(bad)} (known: {', '.join(table)})")
    return [table[n]() for n in names]


DEFAULT_PEERS = "pagedattn,flashinfer-fa2,flashinfer-fa3,vllm-triton,sdpa-cudnn,sdpa-flash"


# ----------------------------------------------------------------------------- FlashInfer JIT
def flashinfer_module_args(w: Workload, backend: str):
    """The (backend, *args) of flashinfer.prefill.get_batch_prefill_module that the wrappers
    above ask for on `w` (the tensor-core decode runs the prefill module)."""
    import torch
    return (backend, torch_dtype(w.dtype), torch_dtype(w.kv_dtype), torch_dtype(w.dtype),
            torch.int32, w.head_size, w.head_size, 0, False, False, False)


def _spec(spec_args):
    from flashinfer.jit.attention import modules as m
    backend, *args = spec_args
    gen = m._gen_batch_prefill_primary_module if backend == "fa2" else \
        m.gen_batch_prefill_module
    return gen(backend, *args)


def flashinfer_module_ready(spec_args) -> tuple:
    """(prebuilt or already compiled, module name)."""
    spec = _spec(spec_args)
    return spec.is_aot or spec.jit_library_path.exists(), spec.name


def _build_one(spec_args):
    """Build (not load) one FlashInfer module in a worker process; returns (name, seconds,
    error)."""
    t = time.time()
    try:
        spec = _spec(spec_args)
        if spec.is_aot:
            return spec.name, 0.0, None, None  # carried prebuilt: nothing to pack
        spec.build()
        return spec.name, time.time() - t, None, str(spec.jit_library_path)
    except Exception as e:  # noqa: BLE001
        return repr(spec_args[:1] + (spec_args[5],)), time.time() - t, _first_line(e), None


def prebuild_flashinfer(workloads: list, backends: list, out_path: str, jobs: int) -> int:
    """JIT-build every FlashInfer module the run needs, several at once, and pack the built
    .so files as flashinfer/data/aot/<module>/<module>.so (FlashInfer's own AOT location) into
    `out_path` for fetch_peers.sh --aot."""
    import concurrent.futures as cf
    import multiprocessing as mp
    wanted = []
    for w in workloads:
        for be in backends:
            if be == "fa3" and (w.kv_dtype != w.dtype or w.head_size not in (64, 128, 256)):
                continue  # FlashInfer's fa3 does not run it (FlashInfer.prepare says why)
            a = flashinfer_module_args(w, be)
            if a not in wanted:
                wanted.append(a)
    print(f"prebuild: {len(wanted)} FlashInfer modules, {jobs} at once", flush=True)
    built, failed = [], 0
    ctx = mp.get_context("spawn")
    # Each module's ninja gets a share of the cores (several modules build at once).
    os.environ.setdefault("MAX_JOBS", str(max(1, (os.cpu_count() or 1) // max(1, jobs))))
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        for name, sec, err, path in ex.map(_build_one, wanted):
            state = "FAILED " + err if err else "prebuilt" if path is None else f"{sec:.0f} s"
            print(f"  {name[:100]}: {state}", flush=True)
            failed += err is not None
            if path:
                built.append((name, path))
    if built:
        with tarfile.open(out_path, "w:xz", preset=3) as t:
            for name, path in built:
                t.add(path, arcname=f"flashinfer/data/aot/{name}/{name}.so")
        print(f"prebuild: {len(built)} modules built -> {out_path} "
              f"({os.path.getsize(out_path) / 1e6:.1f} MB)", flush=True)
    else:
        print("prebuild: 0 modules built (all prebuilt)", flush=True)
    return 1 if failed else 0


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
    device = "cuda"
    dev_name = torch.cuda.get_device_name(0)
    cxx_names = [w.name for w in workloads if w.group in ("standard", "trace")]
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
    results = []
    for w in workloads:
        t0 = time.time()
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
        for impl in impls:
            r = {"library": impl.library}
            try:
                fn = impl.prepare(b)
                out = fn()
                torch.cuda.synchronize()
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
            torch.cuda.synchronize()
        finish_row(row)
        results.append(row)
        print(format_row(row, [i.name for i in impls]) + f"   [{time.time() - t0:.0f} s]",
              flush=True)
        del b
        torch.cuda.empty_cache()
    doc = {"device": dev_name, "read_ceiling_gbps": ceiling, "iters": args.iters,
           "warmup": args.warmup, "l2_flush": args.flush, "versions": versions,
           "peers": [i.name for i in impls], "results": results,
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    md = markdown(doc)
    print()
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    if args.png:
        plot(doc, args.png)
    bad = [r["name"] for r in results if "error" in r or
           r["impls"].get("pagedattn", {}).get("status") not in (None, "ok")]
    return 1 if bad else 0


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
             "| workload | " + " | ".join(names) + " | best peer | ratio |",
             "|---|" + "---:|" * len(names) + "---|---:|"]
    notes = []
    for row in doc["results"]:
        if "error" in row:
            lines.append(f"| {row['name']} | " + " | ".join("-" for _ in names) +
                         f" | data: {row['error']} | - |")
            continue
        prefill = row.get("group") == "prefill"
        cells = []
        for n in names:
            r = row["impls"].get(n, {})
            cells.append(_cell(r, prefill))
            if r.get("status") in ("n/a", "wrong", "error"):
                notes.append(f"- {row['name']} / {n}: {r['status']}: {r.get('reason', '')}")
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else "-"
        lines.append(f"| {row['name']} | " + " | ".join(cells) +
                     f" | {row.get('best_peer', '-')} | {ratio} |")
    if notes:
        lines += ["", "Not timed:"] + notes
    lines += ["", "Command: `" + doc.get("command", "") + "`", ""]
    return "\n".join(lines)


def plot(doc: dict, path: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"run_peers: no plot ({_first_line(e)})", file=sys.stderr)
        return
    rows = [r for r in doc["results"] if "impls" in r]
    names = doc["peers"]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 4.5))
    width = 0.8 / max(1, len(names))
    for k, n in enumerate(names):
        xs, ys = [], []
        for i, r in enumerate(rows):
            c = r["impls"].get(n, {})
            pa = r["impls"].get("pagedattn", {})
            if c.get("status") == "ok" and pa.get("status") == "ok":
                xs.append(i + (k - (len(names) - 1) / 2) * width)
                ys.append(pa["median_us"] / c["median_us"])  # speed relative to pagedattn
        ax.bar(xs, ys, width, label=n)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["name"] for r in rows], rotation=45, ha="right")
    ax.set_ylabel("speed relative to pagedattn (pagedattn time / time)")
    ax.set_title(f"pagedattn and peers, {doc['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


# ----------------------------------------------------------------------------- self-test
def self_test(args) -> int:
    """No torch, no GPU: this file's copies of the C++ definitions agree with the CLI's."""
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
    for f in fails:
        print("self-test:", f)
    print(f"self-test: {len(fails)} failures over {len(listed)} listed workloads")
    return 1 if fails else 0


# ----------------------------------------------------------------------------- CPU smoke
def cpu_smoke(args) -> int:
    """The data, metadata and oracle-check paths on the CPU at small scale: pagedattn's CPU
    backend and SDPA's math backend must pass the check; a wrong output must fail it."""
    import torch
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
    ap.add_argument("--prebuild-flashinfer", metavar="OUT.tar.xz",
                    help="only JIT-build the FlashInfer modules of the selected workloads and "
                         "pack them for fetch_peers.sh --aot")
    ap.add_argument("--jobs", type=int, default=4, help="modules built at once (prebuild)")
    ap.add_argument("--allow-jit", action="store_true",
                    help="let FlashInfer compile a module it lacks during the run (minutes)")
    ap.add_argument("--cpu-smoke", action="store_true", help=cpu_smoke.__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true", help=self_test.__doc__)
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters >= 1, --warmup >= 0")
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
        return prebuild_flashinfer(wl, backends, args.prebuild_flashinfer, args.jobs)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
