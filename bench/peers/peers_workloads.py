"""The peers bench's workloads and data (bench/peers/run_peers.py): the workload definitions
(from `pagedattn bench --list-workloads`, plus the fp8 / head-size / prefill configurations),
one paged cache per workload filled through pagedattn with each library's metadata, and the
oracle check of sampled rows (pagedattn.reference_attention)."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from dataclasses import dataclass, replace

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
    for h in (80, 96, 256, 512):
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
    bs = batch.w.block_size
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
