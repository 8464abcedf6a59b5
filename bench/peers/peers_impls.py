"""The libraries the peers bench runs (bench/peers/run_peers.py), each behind prepare(batch)
-> fn() with its reason when it cannot run a workload (FlashInfer's module build:
peers_fi_jit.py)."""
from __future__ import annotations

import sys

from peers_fi_jit import fa3_refusal, module_args, module_ready
from peers_workloads import Batch, torch_dtype

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
    """FlashInfer as a serving engine calls it, one wrapper per batch kind, planned once outside
    the timing (an engine plans once per step and reuses the plan across layers):

    - decode batches: BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True) — the
      tensor-core decode, which runs the batch-prefill kernels with the GQA group packed into
      the query tile and FlashInfer's KV split (fixed_split_size / disable_split_kv left at
      their defaults: the planner splits long sequences);
    - mixed and prefill batches: BatchPrefillWithPagedKVCacheWrapper, causal (bottom-right).

    NHD pages, the bench's block size, no positional encoding, the workload's softmax scale,
    fp8 caches with their per-tensor scales (k_scale / v_scale). The backend is forced (fa2
    or fa3) so that both appear. FlashInfer's own backend="auto" takes fa2 for bf16/fp16
    tensor-core decode on every GPU (decode.py, plan()) and fa3 for prefill on Hopper where
    fa3 supports the dtypes and head size (utils.py determine_attention_backend); fa3 on a
    decode batch is therefore a configuration FlashInfer does not pick itself: its SM90
    scheduler (PrefillSM90Plan in include/flashinfer/attention/scheduler.cuh) gives every
    query head its own work item (the GQA group is not packed into the 128-row query tile,
    so each KV head is read once per query head, 4x at 32/8 heads) and has no KV split, which
    is why its decode times are ~4x fa2's."""
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
        if self.backend == "fa3" and fa3_refusal(w):  # FlashInfer's own rules (utils.py)
            raise Unsupported(fa3_refusal(w))
        ready, module = module_ready(module_args(w, self.backend))
        if not ready and not self.allow_jit:
            raise Unsupported(f"module {module[:60]}... not built (run_peers.py "
                              f"--prebuild-flashinfer, or --allow-jit)")
        indptr, indices, last = b.flashinfer_meta()
        kv_t = torch_dtype(w.kv_dtype)
        ws = _fi_workspace(b.device)
        try:
            if w.is_decode:
                self.kind = "tensor-core decode"
                wr = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    ws, "NHD", use_tensor_cores=True, backend=self.backend)
                wr.plan(indptr, indices, last, w.num_heads, w.num_kv_heads, w.head_size,
                        w.block_size, pos_encoding_mode="NONE", q_data_type=b.query.dtype,
                        kv_data_type=kv_t, sm_scale=b.scale)
            else:
                self.kind = "paged prefill, causal"
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
        if w.kv_dtype.startswith("fp8"):
            ks, vs = b.k_scale, b.v_scale
            return lambda: wr.run(b.query, kv, k_scale=ks, v_scale=vs, out=out)
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
                try:
                    fn()
                except Exception:  # noqa: BLE001  the mask object without the GQA flag
                    rep = w.num_heads // w.num_kv_heads
                    ke, ve = (x.repeat_interleave(rep, dim=1).contiguous() for x in (k, v))
                    self.kind = "dense, causal_lower_right, K/V heads expanded"

                    def fn():
                        with sdpa_kernel([member]):
                            return F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask,
                                                                  scale=scale)
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


# vLLM last: its first call of each kernel variant compiles (seconds), and a time limit that
# stops a run then costs the fewest results.
DEFAULT_PEERS = "pagedattn,flashinfer-fa2,flashinfer-fa3,sdpa-cudnn,sdpa-flash,vllm-triton"
