"""The public Python API over pagedattn._C (include/pagedattn/*.h); the math, the checks and the
kernel selection live in the C++ library, so its errors arrive here as ValueError (invalid
argument), NotImplementedError (unsupported) or RuntimeError (device unavailable, CUDA error)
with the library's message, and a call that raises has written nothing.

Conventions of every function: tensors are any objects with ``__dlpack__`` (torch, numpy,
cupy, jax) on one device; outputs a call allocates come back in the framework of its first
tensor argument (torch in, torch out); CUDA work is queued on the caller's current stream
(torch.cuda.current_stream() for torch tensors) and the GIL is released while the library runs.
Shapes use T = num_tokens, H = num_heads, KVH = num_kv_heads, D = head_size, S = num_seqs.
"""

from __future__ import annotations

import itertools
import weakref

from . import _C
from . import _frameworks as fw

_torch = fw.torch
_compiling = _torch.compiler.is_compiling if _torch is not None else (lambda: False)
_Tensor = fw._Tensor
_to_dlpack = fw._to_dlpack
_run_planned = _C.run_planned


def _planned_for(query, cache, block_table, seq_lens, query_start_loc, **options):
    """A BatchAttention on the query's device, planned for `query` (``[T, H, D]``; a
    ValueError naming query.ndim otherwise) over `cache`: the one-shot calls' set-up."""
    fw.check_array(query, "query")
    shape = tuple(query.shape)
    if len(shape) != 3:
        raise ValueError(f"query.ndim = {len(shape)}: expected 3 ([num_tokens, num_heads, "
                         f"head_size]), got shape {list(shape)}")
    w = BatchAttention(fw.device_of(query))
    w.plan(block_table, seq_lens, query_start_loc, num_heads=shape[1],
           num_kv_heads=cache.num_kv_heads, head_size=cache.head_size, **options)
    return w


class KVCache:
    """A paged KV cache of one attention layer over caller-owned tensors (DESIGN.md §1).

    Args:
        k_cache, v_cache: the key and value caches, fp32/fp16/bf16 (the query dtype) or
            fp8_e4m3/fp8_e5m2 (torch.float8_e4m3fn/float8_e5m2, dequantised with the scales),
            on the CPU or a CUDA device. Shapes by `layout`:
            ``"nhd"``: both ``[num_blocks, block_size, KVH, D]``;
            ``"hnd"``: both ``[num_blocks, KVH, block_size, D]``;
            ``"split"`` (vLLM's native layout): key ``[num_blocks, KVH, D // x, block_size, x]``
            with ``x = 16 // element size``, value ``[num_blocks, KVH, D, block_size]``.
            Every stride may be chosen freely except the innermost (1): in particular the
            block stride may exceed one block (padded pages of hybrid models). D: multiples of
            8 in 8..512.
        layout: ``"nhd"``, ``"hnd"`` or ``"split"``.
        k_scale, v_scale: fp8 scales (stored = fp8(x / scale), read = float(stored) * scale;
            DESIGN.md §2.6); ignored for other dtypes.
        k_scales, v_scales: optional fp8 scales as tensors on the cache's device, fp32,
            contiguous, shape ``[1]`` (per tensor) or ``[KVH]`` (per KV head, as calibrated
            checkpoints ship them); both or neither, fp8 caches only. They replace k_scale /
            v_scale in write_kv and every reader, and are read when the call runs, not when
            the cache or the plan is made: changing their values in place
            (``k_scales.copy_(new)``) is seen by the next call, and by a replayed CUDA graph.
            Values must be finite and > 0: CPU tensors are checked at every call (ValueError
            naming the element, nothing written); CUDA ones are read only by the kernels.
            Not supported under torch.compile (NotImplementedError).

    Raises:
        ValueError: shapes, strides or dtypes that do not form a cache (the message names
            ``k_cache``/``v_cache`` and the dimension, or ``k_scales``/``v_scales``);
            NotImplementedError: a head size or dtype outside the supported set.

    The tensors are referenced, not copied: writes through write_kv land in them. The
    attributes are read-only (AttributeError on assignment): the checked description is made
    once, here, and every path (eager, torch ops, the oracle) must read the same one; make a
    new KVCache for other tensors or scales.
    """

    __slots__ = ("_k_cache", "_v_cache", "_layout", "_k_scale", "_v_scale", "_k_scales",
                 "_v_scales", "_c", "_sig", "__weakref__")

    k_cache = property(lambda self: self._k_cache, doc="The key cache tensor.")
    v_cache = property(lambda self: self._v_cache, doc="The value cache tensor.")
    layout = property(lambda self: self._layout, doc='"nhd", "hnd" or "split".')
    k_scale = property(lambda self: self._k_scale, doc="fp8 key scale (float).")
    v_scale = property(lambda self: self._v_scale, doc="fp8 value scale (float).")
    k_scales = property(lambda self: self._k_scales,
                        doc="fp8 key scales tensor ([1] or [KVH] fp32) or None.")
    v_scales = property(lambda self: self._v_scales,
                        doc="fp8 value scales tensor ([1] or [KVH] fp32) or None.")

    def __init__(self, k_cache, v_cache, layout: str = "nhd", k_scale: float = 1.0,
                 v_scale: float = 1.0, k_scales=None, v_scales=None):
        fw.check_array(k_cache, "k_cache")
        fw.check_array(v_cache, "v_cache")
        if not isinstance(layout, str):
            raise TypeError(f"layout: expected 'nhd', 'hnd' or 'split', got {layout!r}")
        self._k_cache = k_cache
        self._v_cache = v_cache
        self._layout = layout
        self._k_scale = float(k_scale)
        self._v_scale = float(v_scale)
        self._k_scales = k_scales
        self._v_scales = v_scales
        self._c = _C.make_cache(fw.arg(k_cache, "k_cache"), fw.arg(v_cache, "v_cache"), layout,
                                self._k_scale, self._v_scale,
                                fw.opt_arg(k_scales, "k_scales"), fw.opt_arg(v_scales, "v_scales"))
        self._sig = _signature(self._c)

    @property
    def dtype(self) -> str:
        """Element dtype, the library's name ("fp16", "fp8_e4m3", ...)."""
        return self._c.dtype

    @property
    def device(self) -> str:
        return self._c.device

    num_blocks = property(lambda self: self._c.num_blocks, doc="Physical blocks.")
    block_size = property(lambda self: self._c.block_size, doc="Tokens per block.")
    num_kv_heads = property(lambda self: self._c.num_kv_heads, doc="KV heads (KVH).")
    head_size = property(lambda self: self._c.head_size, doc="Head size (D).")

    def __repr__(self):
        c = self._c
        return (f"KVCache(layout={c.layout!r}, dtype={c.dtype!r}, device={c.device!r}, "
                f"num_blocks={c.num_blocks}, block_size={c.block_size}, "
                f"num_kv_heads={c.num_kv_heads}, head_size={c.head_size}, access={c.access!r})")


def _signature(c) -> tuple:
    """What a plan depends on in a cache (ProblemDesc): equal signatures share plans."""
    return (c.layout, c.dtype, c.device, c.num_blocks, c.block_size, c.num_kv_heads,
            c.head_size, c.access)


def write_kv(key, value, slot_mapping, cache: KVCache, *, host_slot_mapping=None) -> None:
    """Store new tokens' keys and values into `cache` (vLLM's reshape_and_cache).

    Args:
        key, value: ``[>= N, KVH, D]``, fp32/fp16/bf16, the cache dtype or any of the three
            for an fp8 cache (quantised with the cache's scales, round to nearest even,
            saturating); last dimension contiguous. Rows past N are ignored.
        slot_mapping: ``[N]`` int32 or int64, ``slot = block_id * block_size + offset``; N is
            its length; a negative slot skips the row (padding).
        cache: the layer's KVCache (written in place).
        host_slot_mapping: optional host copy of a CUDA slot_mapping, so that out-of-range or
            repeated slots are reported before any launch (without it the kernel skips
            out-of-range slots, memory-safe but silent).

    Raises:
        ValueError: shape/dtype/device mismatches, a slot >= num_blocks * block_size, two rows
            mapped to one slot, inputs sharing memory with the cache. Nothing is written then.
    """
    if fw.is_torch(key) and _compiling():
        _no_scale_tensors_under_compile(cache)
        return _torch.ops.pagedattn.write_kv(key, value, slot_mapping, cache.k_cache,
                                             cache.v_cache, cache.layout, cache.k_scale,
                                             cache.v_scale)
    _C.write_kv(fw.arg(key, "key"), fw.arg(value, "value"), fw.arg(slot_mapping, "slot_mapping"),
                cache._c, fw.opt_arg(host_slot_mapping, "host_slot_mapping"), fw.stream_of(key))


def _no_scale_tensors_under_compile(cache: KVCache) -> None:
    # The torch ops carry the scalar scales only: tracing would drop the tensors silently.
    if cache.k_scales is not None:
        raise NotImplementedError("KVCache.k_scales / v_scales: scale tensors are not supported "
                                  "under torch.compile (use the scalar k_scale / v_scale)")


# Plan states by id, for the torch ops (which take the id, an int, instead of the wrapper).
_STATES: "weakref.WeakValueDictionary[int, _PlanState]" = weakref.WeakValueDictionary()
_ids = itertools.count(1)


class _PlanState:
    """One step's metadata and parameters, the plans made from them (one per query dtype,
    cache signature and lse request) and the workspace they share."""

    __slots__ = ("id", "device", "host", "dev", "num_tokens", "num_heads", "num_kv_heads",
                 "head_size", "scale", "softcap", "sliding_window", "alibi", "sinks",
                 "options", "plans", "fast", "workspace", "workspace_bytes", "torch_like",
                 "__weakref__")

    def plan_for(self, q_dtype: str, cache_c, lse: bool):
        key = (q_dtype, _signature(cache_c), lse)
        p = self.plans.get(key)
        if p is not None:
            return p
        if cache_c.num_kv_heads != self.num_kv_heads:
            raise ValueError(f"num_kv_heads = {self.num_kv_heads} (plan) but the cache has "
                             f"{cache_c.num_kv_heads} KV heads")
        if cache_c.head_size != self.head_size:
            raise ValueError(f"head_size = {self.head_size} (plan) but the cache has head size "
                             f"{cache_c.head_size}")
        a = fw.arg
        bt, sl, qsl = self.dev
        hbt, hsl, hqsl = self.host
        p = _C.plan(cache_c, q_dtype, self.num_tokens, self.num_heads, lse,
                    a(bt, "block_table"), a(sl, "seq_lens"), a(qsl, "query_start_loc"),
                    a(hbt, "block_table"), a(hsl, "seq_lens"), a(hqsl, "query_start_loc"),
                    self.scale, self.softcap, self.sliding_window,
                    fw.opt_arg(self.alibi, "alibi_slopes"), fw.opt_arg(self.sinks, "sinks"),
                    *self.options)
        need = p.workspace_bytes
        if need > self.workspace_bytes:
            # Grow once; every plan of the step shares the buffer (one run at a time).
            self.workspace = self._alloc(need)
            self.workspace_bytes = need
            for q in self.plans.values():
                q.set_workspace(fw.arg(self.workspace, "workspace"))
        if self.workspace is not None:
            p.set_workspace(fw.arg(self.workspace, "workspace"))
        self.plans[key] = p
        return p

    def _alloc(self, nbytes: int):
        # fp32 elements: framework allocations are at least 16-byte aligned
        # (kWorkspaceAlignment), and every framework has fp32.
        return fw.empty_on(self.device, ((nbytes + 3) // 4,), "fp32", self.torch_like)


def _same(x):
    return x


def _normalize_device(device) -> str:
    if device is None:
        return None
    s = str(device)
    if s == "cuda":
        return "cuda:0"
    if s == "cpu" or s.startswith("cuda:"):
        return s
    raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")


def _require_backend(device) -> None:
    """Raises RuntimeError for a CUDA device when this build has no CUDA backend (an install
    with PAGEDATTN_CUDA=OFF or without nvcc): torch could not help there."""
    if device is not None and device.startswith("cuda") and not _C.built_with_cuda():
        raise RuntimeError(
            f"device {device!r}: this pagedattn was built without the CUDA backend "
            "(pagedattn.built_with_cuda is False); reinstall it where nvcc is present, with "
            "PAGEDATTN_CUDA unset or ON")


def _last(x) -> int:
    """query_start_loc[-1] (num_tokens) when `x` is a non-empty vector; 0 otherwise (the
    library then reports the shape)."""
    try:
        return int(x[-1])
    except (TypeError, ValueError, IndexError):
        return 0


class BatchAttention:
    """Paged attention over a batch mixing decode rows and prefill chunks, planned once per
    step and run once per layer (DESIGN.md §3). The wrapper owns the workspace and the
    device copies of the metadata.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` (or a torch.device); None = the device of
            the block_table given to plan().

    Raises:
        ValueError: an unknown device string.
        RuntimeError: a CUDA device (here or, for None, at plan()) in a build without the CUDA
            backend (``pagedattn.built_with_cuda`` False).

    Example::

        w = pagedattn.BatchAttention("cuda")
        w.plan(block_table, seq_lens, query_start_loc, num_heads=32, num_kv_heads=8,
               head_size=128, cache=caches[0])
        for layer in range(num_layers):
            out = w.run(q[layer], caches[layer])
    """

    def __init__(self, device=None):
        self._device = _normalize_device(device)
        _require_backend(self._device)
        self._state = None
        self._id = next(_ids)

    def plan(self, block_table, seq_lens, query_start_loc, *, num_heads: int,
             num_kv_heads: int, head_size: int, scale: float | None = None,
             softcap: float = 0.0, sliding_window: int = 0, alibi_slopes=None, sinks=None,
             cache: KVCache | None = None, q_dtype=None, return_lse: bool = False,
             num_splits: int = 0, tile_tokens: int = 0, num_threads: int = 0,
             batch_invariant: bool = False) -> None:
        """Plan the step: validate the metadata values on the host and choose the kernel.

        Args:
            block_table: ``[S, max_blocks_per_seq]`` int32, physical block of logical block j
                of sequence s (only the first ceil(seq_len / block_size) entries are read).
            seq_lens: ``[S]`` int32, KV length of each sequence including this step's tokens.
            query_start_loc: ``[S + 1]`` int32, prefix sum of the query lengths (starts at 0,
                ends at T); a query length of 0 skips a sequence.
                The three are read on the host: host arrays (copied to the device once
                here) or device tensors (copied to the host here, a synchronisation; then
                used in place).
            num_heads, num_kv_heads, head_size: H, KVH (H % KVH == 0), D.
            scale: softmax scale, default 1 / sqrt(head_size).
            softcap: ``z = softcap * tanh(z / softcap)`` after scaling; 0 = off.
            sliding_window: keys with ``q_pos - j < sliding_window``; 0 = off.
            alibi_slopes: optional ``[H]`` fp32 on the run device (``z += slope * (j - q_pos)``),
                finite.
            sinks: optional ``[H]`` fp32 on the run device: a logit per head that joins the
                softmax denominator only (finite or -inf). Both are read in place at each run;
                CPU values are checked there (ValueError naming the element, nothing written),
                CUDA ones are read only by the kernels (a NaN gives NaN rows).
            cache, q_dtype, return_lse: when given, the plan for a query of `q_dtype` (default:
                the cache dtype) on caches like `cache` is made now, so that run() does no
                planning (needed before CUDA-graph capture); otherwise run() plans on its first
                call for each query dtype / cache geometry / lse request (and the metadata
                values, which are checked against the cache's block count, are validated
                then).
            num_splits, tile_tokens, num_threads: overrides of the selection (0 = choose).
            batch_invariant: cut every sequence's keys at split points fixed in tokens
                (PlanOptions::batch_invariant), so that a sequence's output and LSE are the
                same bits alone or in any batch of this step's kind (costs some speed on
                small batches of short sequences).

        Raises:
            ValueError: inconsistent metadata (the message names the argument and index, e.g.
                "seq_lens[2] = 3 < query_len 5"); NotImplementedError: no kernel can run the
                configuration; RuntimeError: the device is not available; TypeError:
                batch_invariant is not a bool (a string such as "false" would read as true).
        """
        for x, n in ((block_table, "block_table"), (seq_lens, "seq_lens"),
                     (query_start_loc, "query_start_loc")):
            fw.check_array(x, n)
        device = self._device or fw.device_of(block_table)
        _require_backend(device)
        st = _PlanState()
        st.id = self._id
        st.device = device
        st.torch_like = fw.is_torch(block_table)
        host = tuple(fw.to_host(x) for x in (block_table, seq_lens, query_start_loc))
        prev = self._state
        # A plan that fails must not leave the previous step's plan for run() to use.
        self._state = None
        _STATES.pop(self._id, None)
        dev = []
        for i, (x, h) in enumerate(zip((block_table, seq_lens, query_start_loc), host)):
            if fw.device_of(x) == device:
                dev.append(x)
                continue
            old = prev.dev[i] if prev is not None else None
            # Same shape as last step's copy: refill it, so that its address (which a captured
            # CUDA graph holds) stays valid.
            if (old is not None and fw.is_torch(old) and fw.is_torch(h)
                    and old.shape == h.shape and old.dtype == h.dtype):
                old.copy_(h, non_blocking=True)
                dev.append(old)
            else:
                dev.append(fw.to_device(h, device, st.torch_like))
        st.host = host
        st.dev = tuple(dev)
        st.num_tokens = _last(host[2])
        st.num_heads = int(num_heads)
        st.num_kv_heads = int(num_kv_heads)
        st.head_size = int(head_size)
        st.scale = float(_C.default_scale(st.head_size) if scale is None else scale)
        st.softcap = float(softcap)
        st.sliding_window = int(sliding_window)
        st.alibi = alibi_slopes
        st.sinks = sinks
        if not isinstance(batch_invariant, bool):
            raise TypeError(f"batch_invariant = {batch_invariant!r}: expected True or False")
        st.options = (int(num_splits), int(tile_tokens), int(num_threads), batch_invariant)
        st.plans = {}
        st.fast = {}
        st.workspace = prev.workspace if prev is not None and prev.device == device else None
        st.workspace_bytes = prev.workspace_bytes if st.workspace is not None else 0
        if cache is not None:
            if q_dtype is None:
                if cache.dtype.startswith("fp8"):
                    raise ValueError("q_dtype: required with an fp8 cache (the query dtype)")
                q_dtype = cache.dtype
            st.plan_for(fw.dtype_name(q_dtype), cache._c, bool(return_lse))
        self._state = st
        _STATES[self._id] = st

    def run(self, query, cache: KVCache, out=None, return_lse: bool = False):
        """Attention of every planned row.

        Args:
            query: ``[T, H, D]`` fp32/fp16/bf16 on the plan's device; heads and tokens may be
                strided, the last dimension contiguous. Rows packed per sequence in the order
                of query_start_loc.
            cache: the layer's KVCache (same dtype as the query, or fp8).
            out: optional ``[T, H, D]`` of the query dtype to write into (may be `query`
                itself); allocated (contiguous, in the query's framework) when None.
            return_lse: also return the ``[T, H]`` fp32 natural-log log-sum-exp of each row's
                logits (after scale, softcap and ALiBi; with the sink term).

        Returns:
            out, or (out, lse) when return_lse.

        Raises:
            ValueError: shapes, dtypes or devices other than the plan's (plan again for a new
                batch shape), or tensors sharing memory; RuntimeError: plan() was not called, or the last plan() raised.
        """
        st = self._state
        if st is None:
            raise RuntimeError("BatchAttention.run: call plan() first (no plan, or the last plan() raised)")
        # The per-layer path: keep it to a few attribute reads and one dict lookup (host
        # overhead, bench/python_overhead.py).
        if isinstance(query, _Tensor):
            if _compiling():
                return _op_run(self._id, query, cache, out, return_lse, st)
            stream = fw.stream_of(query) if query.is_cuda else 0
            conv = _to_dlpack
        else:
            fw.check_array(query, "query")
            stream = fw.stream_of(query)
            conv = _same
        key = (query.dtype, cache, return_lse)
        p = st.fast.get(key)
        if p is None:
            p = st.plan_for(fw.dtype_name(query.dtype, "query"), cache._c, return_lse)
            st.fast[key] = p
        if out is None:
            out = fw.empty(query, query.shape, fw.dtype_name(query.dtype, "query"))
        try:
            q_arg = conv(query)
            out_arg = conv(out) if out.__class__ is query.__class__ else fw.arg(out, "out")
        except BufferError as e:  # a tensor DLPack cannot export (meta, or another device)
            raise _export_error(e, query=query, out=out) from e
        if return_lse:
            lse = fw.empty(query, (st.num_tokens, st.num_heads), "fp32")
            _run_planned(p, q_arg, cache._c, out_arg, conv(lse), stream)
            return out, lse
        _run_planned(p, q_arg, cache._c, out_arg, None, stream)
        return out

    def explain(self, cache: KVCache, q_dtype=None, return_lse: bool = False) -> dict:
        """The selection of the plan for a query of `q_dtype` (default: the cache dtype) on
        `cache`, as pagedattn.explain returns it."""
        st = self._state
        if st is None:
            raise RuntimeError("BatchAttention.explain: call plan() first")
        q = fw.dtype_name(q_dtype if q_dtype is not None else cache.dtype)
        return _C.explain(st.plan_for(q, cache._c, bool(return_lse)), cache._c)

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the workspace the wrapper holds (the largest plan's need)."""
        return 0 if self._state is None else self._state.workspace_bytes


def _export_error(err, **named) -> ValueError:
    """A ValueError naming the first of `named` that DLPack cannot export (`err`: the
    BufferError one of them raised), e.g. a tensor on the meta device."""
    for name, x in named.items():
        try:
            fw.arg(x, name)
        except BufferError as e:
            dev = getattr(x, "device", "?")
            return ValueError(f"{name}: a tensor on device {dev} cannot be passed to pagedattn "
                              f"({e}); expected a CPU or CUDA tensor")
    return ValueError(f"query/out: cannot be passed to pagedattn ({err})")


def _op_run(plan_id, query, cache, out, return_lse, st):
    """BatchAttention.run under torch.compile: the torch.ops.pagedattn.run_attention op."""
    _no_scale_tensors_under_compile(cache)
    if out is None:
        out = query.new_empty(query.shape)
    lse = query.new_empty((st.num_tokens, st.num_heads), dtype=_torch.float32) if return_lse \
        else None
    _torch.ops.pagedattn.run_attention(query, cache.k_cache, cache.v_cache, out, lse, plan_id,
                                       cache.layout, cache.k_scale, cache.v_scale)
    return (out, lse) if return_lse else out


def paged_attention(query, cache: KVCache, block_table, seq_lens, query_start_loc, *,
                    scale: float | None = None, softcap: float = 0.0, sliding_window: int = 0,
                    alibi_slopes=None, sinks=None, return_lse: bool = False,
                    batch_invariant: bool = False):
    """One-shot attention: plan, allocate the workspace, run (BatchAttention.plan + run).

    Arguments as BatchAttention.plan and .run; block_table, seq_lens and query_start_loc are
    int32 tensors on the query's device (CUDA ones are copied to the host to plan: a
    synchronisation, so prefer BatchAttention in a serving loop or a CUDA graph).

    Returns:
        out ``[T, H, D]`` in the query dtype, or (out, lse ``[T, H]`` fp32) when return_lse.
    """
    if fw.is_torch(query) and _compiling():
        _no_scale_tensors_under_compile(cache)
        if batch_invariant:
            raise NotImplementedError("paged_attention(batch_invariant=True) under torch.compile: "
                                      "plan a BatchAttention outside the compiled region")
        out, lse = _torch.ops.pagedattn.paged_attention(
            query, cache.k_cache, cache.v_cache, block_table, seq_lens, query_start_loc,
            cache.layout, cache.k_scale, cache.v_scale,
            -1.0 if scale is None else float(scale), float(softcap), int(sliding_window),
            alibi_slopes, sinks, bool(return_lse))
        return (out, lse) if return_lse else out
    w = _planned_for(query, cache, block_table, seq_lens, query_start_loc, scale=scale,
                     softcap=softcap, sliding_window=sliding_window, alibi_slopes=alibi_slopes,
                     sinks=sinks, batch_invariant=batch_invariant)
    return w.run(query, cache, return_lse=return_lse)


def merge_states(out_a, lse_a, out_b, lse_b):
    """Merge two partial attention states over disjoint key sets (split-KV, cascade prefixes):
    with ``lse = log(e^lse_a + e^lse_b)``, ``out = e^(lse_a - lse) out_a + e^(lse_b - lse)
    out_b`` (the log-sum-exp identity of the online softmax: Milakov & Gimelshein 2018;
    FlashAttention-2 §3.1). A state with lse -inf contributes nothing; both -inf give out 0,
    lse -inf.

    Args:
        out_a, out_b: ``[T, H, D]`` fp32/fp16/bf16, one dtype, last dimension contiguous.
        lse_a, lse_b: ``[T, H]`` fp32, finite or -inf.

    Returns:
        (out ``[T, H, D]`` of the inputs' dtype, lse ``[T, H]`` fp32), new arrays in the
        framework of out_a.

    Raises:
        ValueError: shape, dtype or device mismatch.
    """
    if fw.is_torch(out_a) and _compiling():
        return _torch.ops.pagedattn.merge_states(out_a, lse_a, out_b, lse_b)
    fw.check_array(out_a, "out_a")
    fw.check_array(lse_a, "lse_a")
    out = fw.empty(out_a, tuple(out_a.shape), fw.dtype_name(out_a.dtype, "out_a"))
    lse = fw.empty(out_a, tuple(lse_a.shape), "fp32")
    _C.merge_states(fw.arg(out_a, "out_a"), fw.arg(lse_a, "lse_a"), fw.arg(out_b, "out_b"),
                    fw.arg(lse_b, "lse_b"), fw.arg(out, "out"), fw.arg(lse, "lse"),
                    fw.stream_of(out_a))
    return out, lse


def reference_attention(query, cache: KVCache, block_table, seq_lens, query_start_loc, *,
                        scale: float | None = None, softcap: float = 0.0,
                        sliding_window: int = 0, alibi_slopes=None, sinks=None,
                        return_lse: bool = False):
    """The naive oracle (DESIGN.md §4) for users' own tests: every allowed key gathered
    through the block table, accumulated in double, a two-pass softmax. CPU tensors only;
    arguments and validation as paged_attention.

    Returns:
        out ``[T, H, D]`` fp32 (the double result rounded once), or (out, lse ``[T, H]`` fp32).
    """
    fw.check_array(query, "query")
    shape = tuple(query.shape)
    out = fw.empty(query, shape, "fp32")
    lse = fw.empty(query, shape[:2], "fp32") if len(shape) >= 2 else None
    head = cache.head_size
    _C.reference_attention(
        fw.arg(query, "query"), fw.arg(cache.k_cache, "k_cache"), fw.arg(cache.v_cache, "v_cache"),
        cache.layout, cache.k_scale, cache.v_scale, fw.arg(block_table, "block_table"),
        fw.arg(seq_lens, "seq_lens"), fw.arg(query_start_loc, "query_start_loc"),
        fw.arg(out, "out"), None if lse is None or not return_lse else fw.arg(lse, "lse"),
        float(_C.default_scale(head) if scale is None else scale), float(softcap),
        int(sliding_window), fw.opt_arg(alibi_slopes, "alibi_slopes"), fw.opt_arg(sinks, "sinks"),
        fw.opt_arg(cache.k_scales, "k_scales"), fw.opt_arg(cache.v_scales, "v_scales"))
    return (out, lse) if return_lse else out


def explain(query, cache: KVCache, block_table, seq_lens, query_start_loc, *,
            scale: float | None = None, softcap: float = 0.0, sliding_window: int = 0,
            alibi_slopes=None, sinks=None, return_lse: bool = False, num_splits: int = 0,
            tile_tokens: int = 0, batch_invariant: bool = False) -> dict:
    """What the selection function decides for this call (the `pagedattn explain` command).
    Arguments as paged_attention; only the query's shape and dtype are used.

    Returns a dict whose keys are those of ``pagedattn explain --json`` for the same facts,
    under the same names (``assumed_device`` aside: the package never assumes a device):

    - ``device``: the device the call runs on (``"cpu"``, ``"cuda:0"``);
    - ``problem``: ``num_heads``, ``num_kv_heads``, ``gqa_ratio``, ``head_size``, ``dtype``
      (the query's), ``cache_dtype``, ``layout``, ``block_size``, ``num_blocks``,
      ``page_pad`` (elements after each K and V block; None when K and V differ),
      ``softcap``, ``sliding_window``, ``alibi``, ``sinks``, and the batch summary
      ``num_seqs``, ``num_tokens``, ``num_decode_seqs``, ``num_prefill_seqs``,
      ``num_empty_seqs``, ``max_seq_len``, ``max_query_len``, ``total_kv_tokens``;
    - ``attention``: ``kernel`` (the plan's), ``cache_access``, ``tile_tokens``,
      ``num_splits``, ``shared_memory_bytes``, ``threads_per_block``, ``workspace_bytes``,
      ``batch_invariant``, ``row_kernels`` (``{"decode": ..., "prefill": ...}``: the kernel
      that runs each kind of row of this batch, None when it has none), ``runs`` (the same in
      one line), ``decode_rows_fast_path``, ``prefill_rows_mma``, ``prefill_rows_wgmma``,
      ``prefill_rows_wgmma_ws`` (how a CUDA plan on the tiled kernel hands the rows of a
      batch with prefill chunks to other kernels; False in every other plan, an all-decode
      batch on the decode fast path included) and ``reason``;
    - ``cache_access``: ``access`` (``"native"`` or ``"strided"``) and ``reason``;
    - ``writer`` (write_kv's choice for the cache): ``kernel``, ``cache_access``, ``reason``.

    Beyond them, kept from earlier versions: ``attention``'s facts at the top level
    (``kernel``, ``access`` for ``cache_access``, ``tile_tokens``, ``num_splits``,
    ``shared_memory_bytes``, ``threads_per_block``, ``decode_rows_fast_path``,
    ``prefill_rows_mma``, ``prefill_rows_wgmma``, ``batch_invariant``, ``reason``,
    ``workspace_bytes``), ``batch`` (the batch summary alone), ``problem["q_dtype"]`` (as
    ``dtype``) and ``problem["lse"]`` (whether an LSE output was planned), and
    ``writer["access"]`` (as ``cache_access``).
    """
    w = _planned_for(query, cache, block_table, seq_lens, query_start_loc, scale=scale,
                     softcap=softcap, sliding_window=sliding_window, alibi_slopes=alibi_slopes,
                     sinks=sinks, num_splits=num_splits, tile_tokens=tile_tokens,
                     batch_invariant=batch_invariant)
    return w.explain(cache, q_dtype=query.dtype, return_lse=return_lse)
