"""pagedattn: paged-KV-cache attention (CPU and CUDA/H200) for Python.

Quick start (numpy or torch tensors; any object with __dlpack__)::

    import pagedattn
    cache = pagedattn.KVCache(k_cache, v_cache, layout="nhd")
    pagedattn.write_kv(key, value, slot_mapping, cache)
    w = pagedattn.BatchAttention(device="cuda")
    w.plan(block_table, seq_lens, query_start_loc, num_heads=32, num_kv_heads=8,
           head_size=128)
    out = w.run(query, cache)

The functions are thin wrappers over the C++ library (include/pagedattn/*.h); see their
docstrings for shapes and dtypes. With torch installed, torch.ops.pagedattn.* holds the same
operations as torch custom ops (torch.compile-safe). ``pagedattn.distributed`` (imported on
its own: it needs torch) shards a decode step's KV across the ranks of a torch.distributed
group (decode context parallelism, docs/context_parallel.md).
"""

from . import _C
from ._api import (BatchAttention, KVCache, explain, merge_states, paged_attention,
                   reference_attention, write_kv)

__version__ = _C.version()
#: True if the extension was built with the CUDA backend (a GPU may still be absent).
built_with_cuda = _C.built_with_cuda()
default_scale = _C.default_scale

if _api._torch is not None:
    from . import _torch_ops  # noqa: F401  (registers torch.ops.pagedattn.*)

__all__ = ["KVCache", "write_kv", "BatchAttention", "paged_attention", "merge_states",
           "reference_attention", "explain", "built_with_cuda", "default_scale"]
