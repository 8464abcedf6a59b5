"""Inputs of one case of the shared matrix (pagedattn._C.testing.matrix_cases, the list that
GoogleTest and `pagedattn verify` run), built the way src/testing/harness.cpp builds them:
a random permutation of a block pool larger than needed, a NaN-poisoned cache (tails, unused
blocks, page padding, blocks below a sliding window), K/V rows in shuffled order with padding
rows (slot -1) and rows past the slot mapping's length, strided activations and metadata, and
the fault classes (NaN queries, -inf keys, -inf sinks). The random draws differ from the C++
harness (numpy's generator); the configurations are the same.

Tensors are made with torch on `device`; `as_numpy` views the CPU ones as numpy arrays (fp32
and fp16 only: numpy has no bf16 or fp8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

TORCH_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "int32": torch.int32,
    "int64": torch.int64,
}


@dataclass
class CaseInputs:
    config: object
    query: torch.Tensor
    out: torch.Tensor | None          # the case's own output view (strided / in place), or None
    key: torch.Tensor
    value: torch.Tensor
    slot_mapping: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    k_init: torch.Tensor              # the poisoned cache before write_kv (CPU copies)
    v_init: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor            # the run's lengths
    plan_seq_lens: torch.Tensor       # the lengths to plan from (planned_seq_lens, else seq_lens)
    query_start_loc: torch.Tensor
    alibi_slopes: torch.Tensor | None
    sinks: torch.Tensor | None
    k_scale: float = 1.0
    v_scale: float = 1.0
    num_tokens: int = 0
    extra: dict = field(default_factory=dict)


def cache_views(layout, num_blocks, block_size, kvh, d, dtype, page_pad, device, fill=math.nan):
    """K-shaped and V-shaped views of `layout` over [num_blocks, block + page_pad] buffers."""
    elems = block_size * kvh * d
    x = 16 // torch.empty((), dtype=dtype).element_size()

    def one(shape):
        buf = torch.full((num_blocks, elems + page_pad), fill, dtype=torch.float32, device=device)
        buf = buf.to(dtype)
        return buf[:, :elems].unflatten(1, shape)

    if layout == "nhd":
        return one((block_size, kvh, d)), one((block_size, kvh, d))
    if layout == "hnd":
        return one((kvh, block_size, d)), one((kvh, block_size, d))
    return one((kvh, d // x, block_size, x)), one((kvh, d, block_size))


def _strided(buf_elems, shape, strides, dtype, device, fill=math.nan):
    buf = torch.full((max(buf_elems, 1),), fill, dtype=torch.float32, device=device).to(dtype)
    return buf.as_strided(shape, strides)


def build(config, device: str) -> CaseInputs:
    c = config
    rng = np.random.default_rng(c.seed)
    dt = TORCH_DTYPES[c.dtype]
    kvdt = TORCH_DTYPES[c.kv_dtype]
    H, KVH, D, BS = c.num_heads, c.num_kv_heads, c.head_size, c.block_size
    seq_lens = list(c.seq_lens)
    q_lens = list(c.query_lens)
    S = len(seq_lens)
    blocks_of = [(n + BS - 1) // BS for n in seq_lens]
    pool = max(1, sum(blocks_of) + c.extra_blocks)
    perm = rng.permutation(pool).astype(np.int32)
    width = max(blocks_of) + 1
    bt_stride = width + (3 if c.strided_metadata else 0)
    unused = int(perm[pool - 1])
    bt_full = np.full((S, bt_stride), -1, np.int32)
    nxt = 0
    for s in range(S):
        for j in range(width):
            if j < blocks_of[s]:
                bt_full[s, j] = perm[nxt]
                nxt += 1
            else:
                bt_full[s, j] = unused
    bt = bt_full[:, :width]

    # K/V rows: every token at or above the first block of the first query row's window.
    slots = []
    for s in range(S):
        n, q = seq_lens[s], q_lens[s]
        lo = max(0, n - q - c.sliding_window + 1) if c.sliding_window > 0 and q > 0 else 0
        t = np.arange(lo // BS * BS, n, dtype=np.int64)
        slots.append(bt[s, t // BS].astype(np.int64) * BS + t % BS)
    slots.append(np.array([-1, -2], np.int64))  # padding rows: skipped, NaN never written
    slots = np.concatenate(slots)
    slots = slots[rng.permutation(len(slots))]
    n_rows = len(slots)
    kv = rng.uniform(-1, 1, (n_rows + 3, 2, KVH, D)).astype(np.float32)
    kv[n_rows:] = np.nan
    kv[:n_rows][slots < 0] = np.nan
    real = slots >= 0
    k_amax = float(np.abs(kv[:n_rows][real][:, 0]).max(initial=0))
    v_amax = float(np.abs(kv[:n_rows][real][:, 1]).max(initial=0))
    if c.neg_inf_keys:
        kv[:n_rows, 0, 0, 0][real] = -np.inf
    kv_t = torch.from_numpy(kv).to(dt).to(device)
    key, value = kv_t[:, 0], kv_t[:, 1]
    sdt = TORCH_DTYPES[c.slot_dtype]
    if c.strided_metadata:
        sm = torch.zeros(2 * n_rows, dtype=sdt)
        sm[::2] = torch.from_numpy(slots).to(sdt)
        slot_mapping = sm.to(device)[::2]
    else:
        slot_mapping = torch.from_numpy(slots).to(sdt).to(device)
    k_scale = v_scale = 1.0
    if c.kv_dtype.startswith("fp8"):
        k_scale = c.k_scale if c.k_scale != 0 else max(k_amax, 1e-6) / 64
        v_scale = c.v_scale if c.v_scale != 0 else max(v_amax, 1e-6) / 64

    # Query (and output) with head and token padding.
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    T = int(starts[-1])
    hs = D + c.head_pad
    ts = H * hs + c.token_pad
    span = (T - 1) * ts + (H - 1) * hs + D if T > 0 else 0
    q32 = torch.full((max(span, 1),), math.nan)
    qv = q32.as_strided((T, H, D), (ts, hs, 1))
    qv.copy_(torch.from_numpy(rng.uniform(-1, 1, (T, H, D)).astype(np.float32)))
    if c.neg_inf_keys:
        qv[:, : H // KVH, 0] = 0.5
    if c.nan_query:
        t, h = np.nonzero((7 * np.arange(T)[:, None] + np.arange(H)[None, :]) % 5 == 0)
        qv[torch.from_numpy(t), torch.from_numpy(h), torch.from_numpy((t + 3 * h) % D)] = math.nan
    query = q32.to(dt).to(device).as_strided((T, H, D), (ts, hs, 1))
    out = None
    if c.in_place:
        out = query
    elif c.out_token_pad >= 0 or c.head_pad > 0 or c.token_pad > 0:
        ots = H * hs + (c.out_token_pad if c.out_token_pad >= 0 else c.token_pad)
        ospan = (T - 1) * ots + (H - 1) * hs + D if T > 0 else 0
        out = _strided(ospan, (T, H, D), (ots, hs, 1), dt, device)

    # Caches, poisoned; the value cache may have its own padding.
    vpad = c.value_page_pad if c.value_page_pad >= 0 else c.page_pad
    k_cache, _ = cache_views(c.layout, pool, BS, KVH, D, kvdt, c.page_pad, device)
    _, v_cache = cache_views(c.layout, pool, BS, KVH, D, kvdt, vpad, device)

    ms = 2 if c.strided_metadata else 1

    def meta(values):
        full = torch.full((len(values) * ms,), 0x7FFFFFFF, dtype=torch.int32)
        full[::ms] = torch.tensor(values, dtype=torch.int32)
        return full.to(device)[::ms]

    alibi = sinks = None
    slopes = [2.0 ** (-8.0 * (h + 1) / H) * rng.uniform(0.5, 1.5) for h in range(H)]
    sink_vals = [rng.uniform(-1.0, 3.0) for _ in range(H)]
    if c.neg_inf_sinks:
        sink_vals = [-math.inf if h % 2 == 0 else v for h, v in enumerate(sink_vals)]
    if c.alibi:
        alibi = torch.tensor(slopes, dtype=torch.float32, device=device)
    if c.sinks:
        sinks = torch.tensor(sink_vals, dtype=torch.float32, device=device)
    planned = list(c.planned_seq_lens) or seq_lens
    return CaseInputs(
        config=c, query=query, out=out, key=key, value=value, slot_mapping=slot_mapping,
        k_cache=k_cache, v_cache=v_cache, k_init=clone_storage(k_cache), v_init=clone_storage(v_cache),
        block_table=torch.from_numpy(bt_full).to(device)[:, :width], seq_lens=meta(seq_lens),
        plan_seq_lens=meta(planned), query_start_loc=meta(starts.tolist()), alibi_slopes=alibi,
        sinks=sinks, k_scale=k_scale, v_scale=v_scale, num_tokens=T)


def clone_storage(t):
    """A CPU copy of the whole storage behind view `t` (padding included), viewed like `t`."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.as_strided((n,), (1,), 0).cpu().clone()
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def as_numpy(t):
    """A numpy view of a CPU tensor (fp32, fp16, int32, int64), strides kept; None stays."""
    return None if t is None else t.numpy()


def numpy_ok(config) -> bool:
    return config.dtype in ("fp32", "fp16") and config.kv_dtype == config.dtype
