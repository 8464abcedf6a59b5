"""Decode context parallelism over a ``torch.distributed`` process group (issue 25;
docs/context_parallel.md).

Every sequence's KV blocks are sharded across the ranks of a group; each rank attends its own
blocks with LSE (pagedattn.paged_attention), the ranks all-gather their partial
``(out, lse)`` and every rank merges the W states by log-sum-exp in rank order, so all ranks
return the same tensors::

    import torch.distributed as dist
    from pagedattn import distributed as cp

    shard = cp.shard_block_table(block_table, seq_lens, block_size, world, rank,
                                 scheme="interleaved", renumber=True)
    k_local, v_local = k_cache[shard.physical_blocks], v_cache[shard.physical_blocks]
    cache = pagedattn.KVCache(k_local.to(dev), v_local.to(dev), layout="nhd")
    out = cp.context_parallel_decode(query, cache, shard, group=None)

(Passing the LocalShard lets the step check that the group has the world size and rank the
shard was made for; a shard of another split would otherwise merge the wrong keys silently.)

Works with any backend whose all_gather takes the query dtype: NCCL on GPUs, Gloo on CPUs
(the tests). On shared multi-GPU hosts keep NVLink multicast off: ``NCCL_NVLS_ENABLE=0`` and
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` in the environment before the process group is made.

The sharding schemes: ``"interleaved"`` (logical block j on rank j % W, as vLLM's decode
context parallelism) and ``"contiguous"`` (rank r holds blocks
``[r * n // W, (r + 1) * n // W)`` of a sequence's n blocks). Positions of an interleaved shard
are not contiguous (global_key_positions), so ALiBi and sliding windows, which depend on
absolute key positions, are refused (NotImplementedError naming the feature); sinks join the
merge once. Decode only: one query token per sequence.
"""

from __future__ import annotations

from typing import NamedTuple

import operator

import torch
import torch.distributed as dist

from . import _api

SCHEMES = ("interleaved", "contiguous")


class LocalShard(NamedTuple):
    """One rank's share of a batch (CPU int32 tensors).

    block_table: ``[S, max(1, most local blocks)]``; entries past a row's blocks are 0 (an
        empty shard's entry 0 is read and its result discarded, so block 0 must exist in
        the rank's cache).
    seq_lens: ``[S]`` tokens of each sequence on this rank (0 = empty shard).
    physical_blocks: with ``renumber``, the global physical block of each local block id
        (sorted ascending; index the global cache with it to build the rank's cache, which
        needs at least one block); otherwise None.
    world_size, rank: the group the shard was made for (shard_block_table's arguments).
        Pass the LocalShard itself to ContextParallelDecode.plan / context_parallel_decode
        and they check both against the process group: a shard of an N-rank split run on a
        group of M ranks (or on another rank) would merge the wrong keys without an error.
    """
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    physical_blocks: torch.Tensor | None
    world_size: int | None = None
    rank: int | None = None


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r}: expected 'interleaved' or 'contiguous'")


def _as_int(name: str, v) -> int:
    """v as a Python int; a float, bool or other non-integer is a TypeError naming `name`."""
    if isinstance(v, bool):
        raise TypeError(f"{name} = {v!r}: expected an integer, not a bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{name} = {v!r}: expected an integer") from None


def _check_rank(world_size: int, rank: int, block_size: int) -> None:
    world_size = _as_int("world_size", world_size)
    rank = _as_int("rank", rank)
    block_size = _as_int("block_size", block_size)
    if world_size < 1:
        raise ValueError(f"world_size = {world_size}: expected >= 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank = {rank}: expected 0 <= rank < world_size {world_size}")
    if block_size < 1:
        raise ValueError(f"block_size = {block_size}: expected >= 1")


def _local_blocks(num_blocks: int, world_size: int, rank: int, scheme: str) -> torch.Tensor:
    if scheme == "interleaved":
        if rank >= num_blocks:
            return torch.zeros(0, dtype=torch.int64)
        return torch.arange(rank, num_blocks, world_size, dtype=torch.int64)
    return torch.arange(num_blocks * rank // world_size, num_blocks * (rank + 1) // world_size,
                        dtype=torch.int64)


def shard_seq_lens(seq_lens, block_size: int, world_size: int, rank: int,
                   scheme: str = "interleaved") -> torch.Tensor:
    """Tokens of each sequence that `rank` holds: ``[S]`` int32 (CPU) from ``seq_lens``
    (``[S]`` ints, any device; copied to the host)."""
    _check_scheme(scheme)
    _check_rank(world_size, rank, block_size)
    lens = torch.as_tensor(seq_lens).to("cpu", torch.int64)
    out = torch.zeros_like(lens)
    for s, n in enumerate(lens.tolist()):
        if n < 0:
            raise ValueError(f"seq_lens[{s}] = {n}: expected >= 0")
        blocks = _local_blocks(-(-n // block_size), world_size, rank, scheme)
        out[s] = (n - blocks * block_size).clamp(max=block_size).sum()
    return out.to(torch.int32)


def global_key_positions(seq_len: int, block_size: int, world_size: int, rank: int,
                         scheme: str = "interleaved") -> torch.Tensor:
    """Absolute positions (``[local_len]`` int64, ascending) of the keys of `rank`'s shard of
    one `seq_len`-token sequence, in local order."""
    _check_scheme(scheme)
    _check_rank(world_size, rank, block_size)
    blocks = _local_blocks(-(-seq_len // block_size), world_size, rank, scheme)
    pos = (blocks[:, None] * block_size + torch.arange(block_size)).reshape(-1)
    return pos[pos < seq_len]


def shard_block_table(block_table, seq_lens, block_size: int, world_size: int, rank: int,
                      scheme: str = "interleaved", renumber: bool = False) -> LocalShard:
    """Rank `rank`'s share of a batch from its global metadata: block_table ``[S, max_blocks]``
    int32 (logical block j of sequence s -> physical block) and seq_lens ``[S]``, any device
    (copied to the host). Without `renumber` the local table names the global physical blocks
    (ranks sharing one cache); with it, local ids 0, 1, ... index ``physical_blocks``.

    Raises:
        ValueError: a bad scheme, world_size, rank or block_size; a negative length or one the
        table does not cover; a negative block id.
    """
    _check_scheme(scheme)
    _check_rank(world_size, rank, block_size)
    table = torch.as_tensor(block_table).to("cpu", torch.int64)
    lens = torch.as_tensor(seq_lens).to("cpu", torch.int64)
    if table.ndim != 2 or lens.ndim != 1 or lens.shape[0] != table.shape[0]:
        raise ValueError(f"block_table {list(table.shape)} and seq_lens {list(lens.shape)}: "
                         f"expected [S, max_blocks] and [S]")
    rows, local_lens = [], []
    for s, n in enumerate(lens.tolist()):
        nb = -(-n // block_size) if n >= 0 else -1
        if n < 0 or nb > table.shape[1]:
            raise ValueError(f"seq_lens[{s}] = {n}: expected 0 <= length <= "
                             f"{table.shape[1] * block_size} (block_table has "
                             f"{table.shape[1]} columns of {block_size} tokens)")
        blocks = _local_blocks(nb, world_size, rank, scheme)
        ids = table[s, blocks]
        if (ids < 0).any():
            bad = int(blocks[(ids < 0).nonzero()[0, 0]])
            raise ValueError(f"block_table[{s}][{bad}] = {int(table[s, bad])}: expected a block "
                             f"id >= 0")
        rows.append(ids)
        local_lens.append(int((n - blocks * block_size).clamp(max=block_size).sum()))
    width = max([1] + [len(r) for r in rows])
    local = torch.zeros((len(rows), width), dtype=torch.int64)
    for s, ids in enumerate(rows):
        local[s, :len(ids)] = ids
    physical = None
    if renumber:
        used = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
        physical = torch.unique(used)  # sorted
        for s, ids in enumerate(rows):
            local[s, :len(ids)] = torch.searchsorted(physical, ids)
        physical = physical.to(torch.int32)
    return LocalShard(local.to(torch.int32), torch.tensor(local_lens, dtype=torch.int32),
                      physical, int(world_size), int(rank))


def _check_states(outs, lses, sinks) -> None:
    if outs.dim() != 4:
        raise ValueError(f"outs: expected [W, T, H, D], got shape {tuple(outs.shape)}")
    if tuple(lses.shape) != tuple(outs.shape[:3]):
        raise ValueError(f"lses: expected shape {tuple(outs.shape[:3])} ([W, T, H] of outs), "
                         f"got {tuple(lses.shape)}")
    if sinks is not None and tuple(sinks.shape) != (outs.shape[2],):
        raise ValueError(f"sinks: expected shape ({outs.shape[2]},) ([H]), got "
                         f"{tuple(sinks.shape)}")


def merge_partial_states(outs: torch.Tensor, lses: torch.Tensor, sinks=None):
    """Merge W partial attention states over disjoint key sets by log-sum-exp, in rank order.

    Args:
        outs: ``[W, T, H, D]`` fp32/fp16/bf16; lses: ``[W, T, H]`` fp32, finite or -inf
            (-inf = a state without keys, whose out is ignored).
        sinks: optional ``[H]`` fp32 logits that join the denominator once (as an extra
            state with lse = sink and out = 0).

    Returns:
        (out ``[T, H, D]`` in outs' dtype, lse ``[T, H]`` fp32); rows where every state is
        -inf (and no sink) give out 0 and lse -inf. Computed in fp32.

    Raises:
        ValueError: outs not 4-D, or lses not ``outs.shape[:3]``, or sinks not ``[H]``.
    """
    _check_states(outs, lses, sinks)
    lses = lses.float()
    m = lses.amax(dim=0)
    if sinks is not None:
        sinks = sinks.to(lses.device, torch.float32)
        m = torch.maximum(m, sinks[None, :].expand_as(m))
    none = torch.isneginf(m)
    m_safe = torch.where(none, torch.zeros_like(m), m)
    w = torch.exp(lses - m_safe[None])  # exactly 0 for -inf states
    den = w.sum(dim=0)
    if sinks is not None:
        den = den + torch.exp(sinks[None, :] - m_safe)
    # A -inf state's out may be anything (an empty shard's placeholder): weigh it by 0 exactly.
    o = torch.where(w[..., None] > 0, outs.float(), torch.zeros((), dtype=torch.float32,
                                                               device=outs.device))
    acc = (w[..., None] * o).sum(dim=0)
    out = torch.where(none[..., None], torch.zeros_like(acc), acc / den[..., None])
    lse = torch.where(none, m, m_safe + torch.log(den))
    return out.to(outs.dtype), lse


def merge_pairwise(outs: torch.Tensor, lses: torch.Tensor, sinks=None):
    """As merge_partial_states, by pagedattn.merge_states: rank 0's state, then ranks
    1..W-1 folded in order (then the sinks), each merge rounded to outs' dtype. Raises as
    merge_partial_states."""
    _check_states(outs, lses, sinks)
    out, lse = outs[0], lses[0].contiguous()
    for r in range(1, outs.shape[0]):
        out, lse = _api.merge_states(out, lse, outs[r], lses[r].contiguous())
    if sinks is not None:
        sink_lse = sinks.to(lse.device, torch.float32)[None, :].expand_as(lse).contiguous()
        out, lse = _api.merge_states(out, lse, torch.zeros_like(out), sink_lse)
    return out, lse


def _pack(out: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """out ``[T, H, D]`` and lse ``[T, H]`` fp32 as one ``[T, H, D + k]`` tensor of out's
    dtype (the lse bits reinterpreted, k = 4 / element size), so one all-gather moves both."""
    lse_bits = lse.contiguous().view(out.dtype).reshape(out.shape[0], out.shape[1], -1)
    return torch.cat([out, lse_bits], dim=-1)


def _unpack(packed: torch.Tensor, head_size: int):
    outs = packed[..., :head_size]
    lses = packed[..., head_size:].contiguous().view(torch.float32).squeeze(-1)
    return outs, lses


def _all_gather(x: torch.Tensor, group) -> torch.Tensor:
    world = dist.get_world_size(group)
    if world == 1:
        return x[None]
    # One flat buffer where NCCL moves it ("nccl" or a "cpu:gloo,cuda:nccl" pair); a list
    # otherwise (Gloo has no all_gather_into_tensor for every dtype).
    if x.is_cuda and "nccl" in str(dist.get_backend(group)):
        buf = torch.empty((world,) + tuple(x.shape), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(buf, x.contiguous(), group=group)
        return buf
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.stack(parts)


def _check_position_free(sliding_window, alibi_slopes):
    if sliding_window:
        raise NotImplementedError(
            f"context parallel decode does not support sliding_window ({sliding_window}): a "
            f"window depends on absolute key positions, which a shard's are not")
    if alibi_slopes is not None:
        raise NotImplementedError(
            "context parallel decode does not support alibi_slopes: ALiBi depends on absolute "
            "key positions, which a shard's are not")


def _shard_arguments(local_block_table, local_seq_lens, world_size, rank, group):
    """(block_table, seq_lens) from a LocalShard or the two tensors, after checking the
    world size and rank the shard was made for (the LocalShard's, or the `world_size` /
    `rank` arguments) against `group`: a mismatch is a ValueError naming the argument."""
    if isinstance(local_block_table, LocalShard):
        shard = local_block_table
        if local_seq_lens is not None:
            raise ValueError("local_seq_lens: leave it out when the first argument is a "
                             "LocalShard (its seq_lens are used)")
        for name, given, made in (("world_size", world_size, shard.world_size),
                                  ("rank", rank, shard.rank)):
            if given is not None and made is not None and _as_int(name, given) != made:
                raise ValueError(f"{name} = {given}: the LocalShard was made with {name} "
                                 f"{made}")
        world_size = shard.world_size if world_size is None else world_size
        rank = shard.rank if rank is None else rank
        local_block_table, local_seq_lens = shard.block_table, shard.seq_lens
    elif local_seq_lens is None:
        raise ValueError("local_seq_lens: required with a block table tensor (or pass the "
                         "LocalShard as the first argument)")
    if world_size is not None or rank is not None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("the shard's world_size / rank are checked against the process "
                               "group, but torch.distributed has no process group (call "
                               "init_process_group first)")
        group_world = dist.get_world_size(group)
        if world_size is not None and _as_int("world_size", world_size) != group_world:
            raise ValueError(
                f"world_size = {world_size}: the shard was made for {world_size} ranks but "
                f"the process group has {group_world}; make it with shard_block_table(..., "
                f"world_size={group_world}, rank=...) (a shard of another split would merge "
                f"the wrong keys)")
        group_rank = dist.get_rank(group)
        if rank is not None and _as_int("rank", rank) != group_rank:
            raise ValueError(f"rank = {rank}: the shard was made for rank {rank} but this "
                             f"process is rank {group_rank} of the group")
    return local_block_table, local_seq_lens


class ContextParallelDecode:
    """A decode step whose KV is sharded across the ranks of `group`, planned once and run
    per layer (as pagedattn.BatchAttention, which it holds for the local attention).

    Args:
        group: the torch.distributed process group (None = the default group).
        device: the device of this rank's query and cache (``"cpu"``, ``"cuda:N"``); None =
            the device of the block table given to plan().
        merge: ``"fp32"`` (default): merge_partial_states, all W states at once in fp32 with
            one rounding to the query dtype; ``"pairwise"``: pagedattn.merge_states (one
            kernel per merge) folding ranks 1..W-1 into rank 0's state in order, each step
            rounded to the query dtype (fewer kernels; W - 1 roundings).

    Every rank of the group must plan and run the same S, H, D and query dtype (the
    all-gather's size), with the same query values.
    """

    def __init__(self, group=None, device=None, merge: str = "fp32"):
        if merge not in ("fp32", "pairwise"):
            raise ValueError(f"merge {merge!r}: expected 'fp32' or 'pairwise'")
        self.group = group
        self.device = device
        self.merge = merge
        self._planned = False
        self._local = None
        self._idx = None
        self._n = 0
        self._S = 0
        self._sinks = None

    def plan(self, local_block_table, local_seq_lens=None, *, num_heads: int,
             num_kv_heads: int, head_size: int, scale: float | None = None,
             softcap: float = 0.0, sinks=None, sliding_window: int = 0, alibi_slopes=None,
             cache: _api.KVCache | None = None, q_dtype=None, world_size: int | None = None,
             rank: int | None = None, **options) -> None:
        """Plan this rank's step.

        Args:
            local_block_table: this rank's LocalShard (preferred: its world size and rank
                are checked against the group), or its ``[S, max_local_blocks]`` int32
                block_table, host or device; local_seq_lens: with a tensor, ``[S]`` int32
                (LocalShard.seq_lens; 0 = this rank holds nothing of that sequence), host or
                device (a device copy costs a synchronisation here, as in
                BatchAttention.plan); None with a LocalShard.
            world_size, rank: with tensors, what shard_block_table was called with, checked
                against the group as a LocalShard's (None = not checked: a shard of another
                split cannot be told from these tensors).
            num_heads, num_kv_heads, head_size, scale, softcap, cache, q_dtype, options: as
                BatchAttention.plan (return_lse is implied).
            sinks: optional ``[H]`` fp32 sink logits, joined once in the merge.
            sliding_window, alibi_slopes: must be off (NotImplementedError naming the feature:
                both depend on absolute key positions, which a shard's are not).

        Raises:
            ValueError: the shard's world size or rank (the LocalShard's, or world_size /
                rank) differs from the group's, naming which; mis-shaped metadata.
            RuntimeError: a world size or rank to check but no process group.
        """
        _check_position_free(sliding_window, alibi_slopes)
        self._planned = False
        local_block_table, local_seq_lens = _shard_arguments(
            local_block_table, local_seq_lens, world_size, rank, self.group)
        bt = torch.as_tensor(local_block_table)
        lens_dev = torch.as_tensor(local_seq_lens)
        if lens_dev.ndim != 1 or bt.ndim != 2 or bt.shape[0] != lens_dev.shape[0]:
            raise ValueError(f"local_block_table {list(bt.shape)} and local_seq_lens "
                             f"{list(lens_dev.shape)}: expected [S, max_local_blocks] and [S]")
        device = self.device if self.device is not None else bt.device
        lens = lens_dev.to("cpu", torch.int64)
        if (lens < 0).any():
            s = int((lens < 0).nonzero()[0, 0])
            raise ValueError(f"local_seq_lens[{s}] = {int(lens[s])}: expected >= 0")
        S = int(lens.shape[0])
        idx = (lens > 0).nonzero().squeeze(1)
        n = int(idx.numel())
        self._local = None
        if n:
            # Empty shards are left out of the local batch (no kernel supports a row without
            # keys); their state is the neutral one (out 0, lse -inf).
            sub = slice(None) if n == S else idx
            bt_h = bt.to("cpu")[sub].contiguous()
            sl_h = lens.to(torch.int32)[sub].contiguous()
            qsl = torch.arange(n + 1, dtype=torch.int32)
            w = _api.BatchAttention(device)
            w.plan(bt_h, sl_h, qsl, num_heads=num_heads, num_kv_heads=num_kv_heads,
                   head_size=head_size, scale=scale, softcap=softcap, cache=cache,
                   q_dtype=q_dtype, return_lse=cache is not None, **options)
            self._local = w
        self._idx = None if n == S else idx.to(device)
        self._n, self._S, self._H, self._D = n, S, int(num_heads), int(head_size)
        self._sinks = None if sinks is None else torch.as_tensor(sinks).to(device, torch.float32)
        self._planned = True

    def local_state(self, query, cache: _api.KVCache):
        """This rank's partial state alone, no exchange (what run() all-gathers; also lets one
        device stand in for several ranks in measurements).

        Args:
            query: ``[S, H, D]`` as run(); cache: this rank's pagedattn.KVCache.

        Returns:
            (out ``[S, H, D]`` query dtype, lse ``[S, H]`` fp32): attention over this rank's
            keys only, without the sinks; an empty shard's row is out 0, lse -inf.
        """
        if not self._planned:
            raise RuntimeError("ContextParallelDecode.local_state: call plan() first")
        if self._idx is None:
            return self._local.run(query, cache, return_lse=True)
        out = torch.zeros_like(query)
        lse = torch.full((self._S, self._H), float("-inf"), dtype=torch.float32,
                         device=query.device)
        if self._local is not None:
            o, l_ = self._local.run(query.index_select(0, self._idx), cache, return_lse=True)
            out.index_copy_(0, self._idx, o)
            lse.index_copy_(0, self._idx, l_)
        return out, lse

    def run(self, query, cache: _api.KVCache, return_lse: bool = False, timings=None):
        """The step for one layer.

        Args:
            query: ``[S, H, D]`` torch tensor (fp32/fp16/bf16) on this rank's device, one token
                per sequence, the same values on every rank.
            cache: this rank's pagedattn.KVCache (its shard's blocks).
            return_lse: also return the merged ``[S, H]`` fp32 LSE.
            timings: optional dict; adds the seconds of the local attention ("local"), the
                all-gather ("gather") and the merge ("merge"), each measured after a device
                synchronisation (for benchmarks; the synchronisations cost time).

        Returns:
            out ``[S, H, D]`` in the query dtype, or (out, lse); identical on every rank.
        """
        if not self._planned:
            raise RuntimeError("ContextParallelDecode.run: call plan() first")
        if query.ndim != 3 or tuple(query.shape) != (self._S, self._H, self._D):
            raise ValueError(f"query {list(query.shape)}: expected the planned "
                             f"[{self._S}, {self._H}, {self._D}] (one token per sequence)")
        clock = _Clock(query, timings)
        out, lse = self.local_state(query, cache)
        clock.mark("local")
        gathered = _all_gather(_pack(out, lse), self.group)
        clock.mark("gather")
        outs, lses = _unpack(gathered, self._D)
        if self.merge == "fp32":
            merged, merged_lse = merge_partial_states(outs, lses, self._sinks)
        else:
            merged, merged_lse = merge_pairwise(outs, lses, self._sinks)
        clock.mark("merge")
        return (merged, merged_lse) if return_lse else merged


def context_parallel_decode(query, local_cache: _api.KVCache, local_block_table,
                            local_seq_lens=None, group=None, *, scale: float | None = None,
                            softcap: float = 0.0, sinks=None, sliding_window: int = 0,
                            alibi_slopes=None, return_lse: bool = False, merge: str = "fp32",
                            world_size: int | None = None, rank: int | None = None):
    """One-shot decode attention whose KV is sharded across the ranks of `group`
    (ContextParallelDecode.plan + run; prefer the class in a loop: plan() copies the lengths to
    the host). Every rank must call it with the same query.

    Args:
        query: ``[S, H, D]`` torch tensor, one token per sequence, on this rank's device.
        local_cache: this rank's pagedattn.KVCache.
        local_block_table, local_seq_lens: this rank's LocalShard (then local_seq_lens is
            left out, and the shard's world size and rank are checked against the group), or
            its metadata tensors (int32; host or the query's device); a length 0 = an empty
            shard.
        group: the process group (None = default).
        world_size, rank: with tensors, shard_block_table's arguments, checked as a
            LocalShard's (ValueError naming the one that differs from the group).
        scale, softcap, sinks: as pagedattn.paged_attention (a sink joins the merge once).
        sliding_window, alibi_slopes: must be off (NotImplementedError naming the feature).
        merge: ``"fp32"`` or ``"pairwise"`` (see ContextParallelDecode).

    Returns:
        out ``[S, H, D]`` in the query dtype, or (out, lse ``[S, H]`` fp32) with return_lse;
        the same on every rank.
    """
    if query.ndim != 3:
        raise ValueError(f"query.ndim = {query.ndim}: expected 3 ([num_seqs, num_heads, "
                         f"head_size])")
    cp = ContextParallelDecode(group, device=query.device, merge=merge)
    cp.plan(local_block_table, local_seq_lens, num_heads=query.shape[1],
            num_kv_heads=local_cache.num_kv_heads, head_size=query.shape[2], scale=scale,
            softcap=softcap, sinks=sinks, sliding_window=sliding_window,
            alibi_slopes=alibi_slopes, world_size=world_size, rank=rank)
    return cp.run(query, local_cache, return_lse=return_lse)


class _Clock:
    """Wall time between marks, each after a synchronisation of the query's device."""

    def __init__(self, query, timings):
        self.timings = timings
        self.cuda = query.is_cuda
        if timings is not None:
            import time
            self._now = time.perf_counter
            self._sync()
            self.t = self._now()

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def mark(self, name):
        if self.timings is None:
            return
        self._sync()
        t = self._now()
        self.timings[name] = self.timings.get(name, 0.0) + (t - self.t)
        self.t = t


__all__ = ["SCHEMES", "LocalShard", "shard_seq_lens", "global_key_positions",
           "shard_block_table", "merge_partial_states", "merge_pairwise", "ContextParallelDecode",
           "context_parallel_decode"]
