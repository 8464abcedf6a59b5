"""pagedattn.distributed (decode context parallelism over torch.distributed): the shard
helpers and the merge in one process, and the whole step with 2 and 4 Gloo processes on the
CPU against the single-process result (tests/python/_cp_worker.py)."""

import json
import math
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402

from pagedattn import distributed as cp  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="needs torch with Gloo")
@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_decode_matches_single_process(world, tmp_path):
    import torch.multiprocessing as mp
    import _cp_worker
    mp.spawn(_cp_worker.run, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    report = json.loads((tmp_path / f"cp_w{world}.json").read_text())
    assert len(report) == len(_cp_worker.cases())
    # The lengths include sequences shorter than the world: some shards must have been empty.
    assert any(r["empty_shards"] > 0 for r in report)


@pytest.mark.parametrize("scheme", cp.SCHEMES)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("bs", [1, 16])
def test_shards_partition_every_sequence(scheme, world, bs):
    lens = [0, 1, 3, 16, 17, 63, 64, 65, 1000]
    total = torch.zeros(len(lens), dtype=torch.int32)
    for rank in range(world):
        total += cp.shard_seq_lens(lens, bs, world, rank, scheme)
    assert total.tolist() == lens
    for n in lens:
        pos = torch.cat([cp.global_key_positions(n, bs, world, r, scheme) for r in range(world)])
        assert sorted(pos.tolist()) == list(range(n))
        if scheme == "interleaved":
            p1 = cp.global_key_positions(n, bs, world, world - 1, scheme)
            assert ((p1 // bs) % world == world - 1).all()


def test_shard_block_table_example():
    bt = torch.tensor([[10, 11, 12, 13, 14], [20, 21, -1, -1, -1]], dtype=torch.int32)
    lens = torch.tensor([70, 17], dtype=torch.int32)
    r1 = cp.shard_block_table(bt, lens, 16, 2, 1, "interleaved")
    assert r1.block_table.tolist() == [[11, 13], [21, 0]]
    assert r1.seq_lens.tolist() == [32, 1]
    assert r1.physical_blocks is None
    c1 = cp.shard_block_table(bt, lens, 16, 2, 1, "contiguous", renumber=True)
    assert c1.physical_blocks.tolist() == [12, 13, 14, 21]
    assert c1.block_table.tolist() == [[0, 1, 2], [3, 0, 0]]
    assert c1.seq_lens.tolist() == [38, 1]
    with pytest.raises(ValueError, match="rank = 2"):
        cp.shard_block_table(bt, lens, 16, 2, 2)
    with pytest.raises(ValueError, match="scheme 'striped'"):
        cp.shard_block_table(bt, lens, 16, 2, 0, "striped")
    with pytest.raises(ValueError, match=r"seq_lens\[1\] = 97"):
        cp.shard_block_table(bt, torch.tensor([70, 97], dtype=torch.int32), 16, 2, 0)


def test_merge_of_neutral_states_and_sinks():
    torch.manual_seed(0)
    W, T, H, D = 3, 4, 2, 8
    outs = torch.randn(W, T, H, D)
    lses = torch.randn(W, T, H)
    # Rank 1 has nothing for token 0 (its placeholder out is NaN, which must weigh nothing);
    # token 3 has no keys anywhere.
    lses[1, 0] = float("-inf")
    outs[1, 0] = float("nan")
    lses[:, 3] = float("-inf")
    out, lse = cp.merge_partial_states(outs, lses)
    w = torch.softmax(lses[:, :3], dim=0)
    want = (w[..., None] * outs[:, :3].nan_to_num(0.0)).sum(0)
    assert torch.allclose(out[:3], want, atol=1e-6)
    assert torch.allclose(lse[:3], torch.logsumexp(lses[:, :3], dim=0), atol=1e-6)
    assert (out[3] == 0).all() and torch.isneginf(lse[3]).all()
    sinks = torch.tensor([0.5, float("-inf")])
    out_s, lse_s = cp.merge_partial_states(outs, lses, sinks)
    full = torch.cat([lses[:, :3], sinks.expand(1, 3, H)], dim=0)
    assert torch.allclose(lse_s[:3], torch.logsumexp(full, dim=0), atol=1e-6)
    assert torch.allclose(out_s[:3], want * torch.exp(lse[:3] - lse_s[:3])[..., None], atol=1e-6)
    # A sink alone: output 0, lse = the sink (head 0); no sink (-inf): the neutral state.
    assert (out_s[3] == 0).all() and lse_s[3, 0].item() == 0.5 and math.isinf(lse_s[3, 1].item())


def test_position_dependent_features_are_refused():
    step = cp.ContextParallelDecode()
    bt = torch.zeros((1, 1), dtype=torch.int32)
    sl = torch.ones(1, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="sliding_window"):
        step.plan(bt, sl, num_heads=4, num_kv_heads=1, head_size=64, sliding_window=8)
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        step.plan(bt, sl, num_heads=4, num_kv_heads=1, head_size=64,
                  alibi_slopes=torch.ones(4))
    with pytest.raises(RuntimeError, match="plan"):
        step.run(torch.zeros((1, 4, 64)), None)


def test_bad_arguments_name_themselves():
    import torch
    bt = torch.zeros((1, 4), dtype=torch.int32)
    sl = torch.tensor([40], dtype=torch.int32)
    with pytest.raises(TypeError, match="block_size"):
        cp.shard_block_table(bt, sl, 16.5, 2, 0, "interleaved")
    with pytest.raises(TypeError, match="world_size"):
        cp.shard_seq_lens([40], 16, 2.5, 0)
    outs = torch.zeros(2, 1, 2, 8)
    with pytest.raises(ValueError, match="lses"):
        cp.merge_partial_states(outs, torch.zeros(2, 1))
    with pytest.raises(ValueError, match="lses"):
        cp.merge_pairwise(outs, torch.zeros(3, 1, 2))
    with pytest.raises(ValueError, match="sinks"):
        cp.merge_partial_states(outs, torch.zeros(2, 1, 2), sinks=torch.zeros(3))


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="needs torch with Gloo")
def test_a_shard_of_another_split_is_refused_naming_the_argument():
    import pagedattn
    bt = torch.arange(8, dtype=torch.int32).reshape(1, 8)
    lens = torch.tensor([100], dtype=torch.int32)
    kw = dict(num_heads=4, num_kv_heads=1, head_size=64)
    two = cp.shard_block_table(bt, lens, 16, 2, 0)
    assert (two.world_size, two.rank) == (2, 0)
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="no process group"):
            cp.ContextParallelDecode().plan(two, **kw)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                         rank=0, world_size=1)
    try:
        step = cp.ContextParallelDecode()
        # Shards for 2 ranks on a group of 1: half of the keys would be missing, silently.
        with pytest.raises(ValueError, match=r"world_size = 2: .* the process group has 1"):
            step.plan(two, **kw)
        with pytest.raises(ValueError, match=r"world_size = 2"):
            step.plan(two.block_table, two.seq_lens, world_size=2, **kw)
        with pytest.raises(ValueError, match=r"world_size = 3: the LocalShard was made with "
                                             r"world_size 2"):
            step.plan(two, world_size=3, **kw)
        with pytest.raises(ValueError, match="local_seq_lens"):
            step.plan(two, two.seq_lens, **kw)
        with pytest.raises(ValueError, match="local_seq_lens"):
            step.plan(two.block_table, **kw)
        # The right split runs, through the shard or its tensors, and equals one process.
        torch.manual_seed(0)
        k, v = torch.randn(8, 16, 1, 64), torch.randn(8, 16, 1, 64)
        q = torch.randn(1, 4, 64)
        cache = pagedattn.KVCache(k, v)
        one = cp.shard_block_table(bt, lens, 16, 1, 0)
        got = cp.context_parallel_decode(q, cache, one)
        got_t = cp.context_parallel_decode(q, cache, one.block_table, one.seq_lens,
                                           world_size=1, rank=0)
        want = pagedattn.paged_attention(q, cache, bt, lens, torch.arange(2, dtype=torch.int32))
        assert torch.equal(got, got_t)
        assert (got - want).abs().max().item() <= 1e-5
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("scheme", cp.SCHEMES)
def test_local_states_of_simulated_ranks_merge_to_one_process(scheme):
    """ContextParallelDecode.local_state needs no process group: N shards run one after
    another in one process (bench/context_parallel.py --simulate) merge to the whole result,
    an empty shard included (sequence 1 has one block)."""
    import pagedattn
    torch.manual_seed(1)
    bs, world = 16, 3
    lens = torch.tensor([100, 9, 48], dtype=torch.int32)
    bt = torch.tensor([[5, 0, 7, 2, 9, 11, 3], [4, -1, -1, -1, -1, -1, -1],
                       [1, 6, 8, -1, -1, -1, -1]], dtype=torch.int32)
    k, v = torch.randn(12, bs, 2, 64), torch.randn(12, bs, 2, 64)
    q = torch.randn(3, 8, 64)
    want = pagedattn.paged_attention(q, pagedattn.KVCache(k, v), bt, lens,
                                     torch.arange(4, dtype=torch.int32))
    outs, lses = [], []
    for r in range(world):
        shard = cp.shard_block_table(bt, lens, bs, world, r, scheme, renumber=True)
        pb = shard.physical_blocks.long()
        pb = pb if pb.numel() else torch.zeros(1, dtype=torch.long)
        cache = pagedattn.KVCache(k[pb].contiguous(), v[pb].contiguous())
        step = cp.ContextParallelDecode(device="cpu")
        step.plan(shard.block_table, shard.seq_lens, num_heads=8, num_kv_heads=2, head_size=64,
                  cache=cache, q_dtype=q.dtype)
        o, l_ = step.local_state(q, cache)
        outs.append(o)
        lses.append(l_)
    assert any(torch.isneginf(l_).all(dim=1).any() for l_ in lses)  # an empty shard somewhere
    got, _ = cp.merge_partial_states(torch.stack(outs), torch.stack(lses))
    assert (got - want).abs().max().item() <= 1e-5
