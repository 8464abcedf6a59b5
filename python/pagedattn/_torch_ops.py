"""torch.ops.pagedattn.*: the API as torch custom operators (torch.library.custom_op), with
fake (meta) implementations, so that models calling pagedattn compile with
torch.compile(fullgraph=True). The pagedattn functions switch to these ops while torch.compile
traces them; eager calls go straight to the extension (no dispatcher overhead).

Ops (mutated arguments declared, DESIGN.md §3 semantics):
  write_kv(key, value, slot_mapping, k_cache!, v_cache!, layout, k_scale, v_scale) -> ()
  run_attention(query, k_cache, v_cache, out!, lse!?, plan_id, layout, k_scale, v_scale) -> ()
      plan_id: BatchAttention's id; the plan (metadata, parameters, workspace) is the one its
      last plan() made.
  paged_attention(query, k_cache, v_cache, block_table, seq_lens, query_start_loc, layout,
      k_scale, v_scale, scale, softcap, sliding_window, alibi_slopes?, sinks?, return_lse)
      -> (out, lse)   (scale < 0: 1/sqrt(head_size); lse has shape [0] unless return_lse)
  merge_states(out_a, lse_a, out_b, lse_b) -> (out, lse)
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _C
from . import _api
from . import _frameworks as fw

_a = fw.arg


def _stream(t: Tensor) -> int:
    return 0 if t.device.type == "cpu" else torch.cuda.current_stream(t.device).cuda_stream


@torch.library.custom_op("pagedattn::write_kv", mutates_args=("k_cache", "v_cache"))
def write_kv(key: Tensor, value: Tensor, slot_mapping: Tensor, k_cache: Tensor,
             v_cache: Tensor, layout: str, k_scale: float, v_scale: float) -> None:
    _C.write_kv_tensors(_a(key, "key"), _a(value, "value"), _a(slot_mapping, "slot_mapping"),
                        _a(k_cache, "k_cache"), _a(v_cache, "v_cache"), layout, k_scale, v_scale,
                        None, _stream(key))


@write_kv.register_fake
def _(key, value, slot_mapping, k_cache, v_cache, layout, k_scale, v_scale) -> None:
    return None


@torch.library.custom_op("pagedattn::run_attention", mutates_args=("out", "lse"))
def run_attention(query: Tensor, k_cache: Tensor, v_cache: Tensor, out: Tensor,
                  lse: Optional[Tensor], plan_id: int, layout: str, k_scale: float,
                  v_scale: float) -> None:
    st = _api._STATES.get(plan_id)
    if st is None:
        raise RuntimeError(f"pagedattn::run_attention: no plan with id {plan_id} (the "
                           f"BatchAttention was deleted or never planned)")
    cache_c = _C.make_cache(_a(k_cache, "k_cache"), _a(v_cache, "v_cache"), layout, k_scale,
                            v_scale)
    p = st.plan_for(fw.dtype_name(query.dtype), cache_c, lse is not None)
    bt, sl, qsl = st.dev
    _C.run_tensors(p, _a(query, "query"), _a(k_cache, "k_cache"), _a(v_cache, "v_cache"), layout,
                   k_scale, v_scale, _a(bt, "block_table"), _a(sl, "seq_lens"),
                   _a(qsl, "query_start_loc"), _a(out, "out"), fw.opt_arg(lse, "lse"),
                   fw.opt_arg(st.workspace, "workspace"), fw.opt_arg(st.alibi, "alibi_slopes"),
                   fw.opt_arg(st.sinks, "sinks"), _stream(query))


@run_attention.register_fake
def _(query, k_cache, v_cache, out, lse, plan_id, layout, k_scale, v_scale) -> None:
    return None


@torch.library.custom_op("pagedattn::paged_attention", mutates_args=())
def paged_attention(query: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                    seq_lens: Tensor, query_start_loc: Tensor, layout: str, k_scale: float,
                    v_scale: float, scale: float, softcap: float, sliding_window: int,
                    alibi_slopes: Optional[Tensor], sinks: Optional[Tensor],
                    return_lse: bool) -> tuple[Tensor, Tensor]:
    cache = _api.KVCache(k_cache, v_cache, layout, k_scale, v_scale)
    r = _api.paged_attention(query, cache, block_table, seq_lens, query_start_loc,
                             scale=None if scale < 0 else scale, softcap=softcap,
                             sliding_window=sliding_window, alibi_slopes=alibi_slopes,
                             sinks=sinks, return_lse=return_lse)
    if return_lse:
        return r
    return r, query.new_empty((0,), dtype=torch.float32)


@paged_attention.register_fake
def _(query, k_cache, v_cache, block_table, seq_lens, query_start_loc, layout, k_scale, v_scale,
      scale, softcap, sliding_window, alibi_slopes, sinks, return_lse):
    out = query.new_empty(query.shape)
    lse = query.new_empty((query.shape[0], query.shape[1]) if return_lse else (0,),
                          dtype=torch.float32)
    return out, lse


@torch.library.custom_op("pagedattn::merge_states", mutates_args=())
def merge_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor,
                 lse_b: Tensor) -> tuple[Tensor, Tensor]:
    return _api.merge_states(out_a, lse_a, out_b, lse_b)


@merge_states.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return out_a.new_empty(out_a.shape), lse_a.new_empty(lse_a.shape, dtype=torch.float32)
