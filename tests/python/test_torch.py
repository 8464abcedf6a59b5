"""torch integration: torch.ops.pagedattn.* pass torch.library.opcheck, a model step calling
pagedattn compiles with torch.compile(fullgraph=True) and matches eager, CUDA work goes on
torch's current stream, and a run captured in a CUDA graph (plan outside, run inside) replays
equal to eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pagedattn  # noqa: E402
from small_problem import Problem  # noqa: E402


def _problem(device, dtype="fp32"):
    return Problem("torch", device, dtype=dtype)


def test_opcheck_write_kv(device):
    p = _problem(device)
    k = torch.full_like(p.cache.k_cache, float("nan"))
    v = torch.full_like(p.cache.v_cache, float("nan"))
    args = (p.t(p.key), p.t(p.value), p.t(p.slot_mapping), k, v, "nhd", 1.0, 1.0)
    torch.library.opcheck(torch.ops.pagedattn.write_kv.default, args)
    torch.ops.pagedattn.write_kv(*args)  # opcheck works on copies
    assert not torch.isnan(k.flatten(0, 1)[torch.from_numpy(p.slot_mapping).to(device)]).any()


def test_opcheck_run_attention(device):
    p = _problem(device)
    w = p.plan(cache=p.cache, return_lse=True)
    q = p.t(p.query)
    out = torch.empty_like(q)
    lse = torch.empty(p.num_tokens, p.H, device=device)
    args = (q, p.cache.k_cache, p.cache.v_cache, out, lse, w._id, "nhd", 1.0, 1.0)
    torch.library.opcheck(torch.ops.pagedattn.run_attention.default, args)
    torch.ops.pagedattn.run_attention(*args)  # opcheck works on copies
    ref, ref_lse = p.reference()
    np.testing.assert_allclose(out.cpu().numpy(), ref, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(lse.cpu().numpy(), ref_lse, atol=1e-5, rtol=1e-5)


def test_opcheck_paged_attention_and_merge(device):
    p = _problem(device)
    q = p.t(p.query)
    args = (q, p.cache.k_cache, p.cache.v_cache, p.t(p.block_table), p.t(p.seq_lens),
            p.t(p.query_start_loc), "nhd", 1.0, 1.0, -1.0, 0.0, 0, None, None, True)
    torch.library.opcheck(torch.ops.pagedattn.paged_attention.default, args)
    out, lse = torch.ops.pagedattn.paged_attention(*args)
    ref, ref_lse = p.reference()
    np.testing.assert_allclose(out.cpu().numpy(), ref, atol=1e-5, rtol=1e-5)
    g = torch.Generator().manual_seed(0)
    oa, ob = (torch.rand(4, 3, 16, generator=g).to(device) for _ in range(2))
    la, lb = (torch.randn(4, 3, generator=g).to(device) for _ in range(2))
    torch.library.opcheck(torch.ops.pagedattn.merge_states.default, (oa, la, ob, lb))


def _step(q, key, value, slots, cache, w):
    """One layer of a model step: write this step's K/V, attend, merge with a second state."""
    pagedattn.write_kv(key, value, slots, cache)
    out, lse = w.run(q, cache, return_lse=True)
    merged, mlse = pagedattn.merge_states(out, lse, out * 0.5, lse - 1.0)
    return merged * 2.0, mlse


def test_compile_fullgraph_matches_eager(device):
    p = _problem(device)
    w = p.plan(cache=p.cache, return_lse=True)
    args = (p.t(p.query), p.t(p.key), p.t(p.value), p.t(p.slot_mapping))
    eager = _step(*args, p.cache, w)
    torch._dynamo.reset()
    # CPU: aot_eager (Dynamo, AOTAutograd and functionalisation through the fake impls, what
    # fullgraph needs) instead of inductor, whose C++ code generation takes a minute on 2 cores.
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(_step, fullgraph=True, backend=backend)
    p2 = _problem(device)
    w2 = p2.plan(cache=p2.cache, return_lse=True)
    got = compiled(*args, p2.cache, w2)
    torch.testing.assert_close(got[0], eager[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got[1], eager[1], atol=1e-6, rtol=1e-6)
    # The compiled write_kv wrote the second cache.
    assert torch.equal(p2.cache.k_cache.nan_to_num(-9), p.cache.k_cache.nan_to_num(-9))
    # A new plan (next step) reuses the compiled graph: the op takes the wrapper's id.
    w2.plan(p.t(p.block_table), p.t(p.seq_lens), p.t(p.query_start_loc), num_heads=p.H,
            num_kv_heads=p.KVH, head_size=p.D, cache=p2.cache, return_lse=True)
    got2 = compiled(*args, p2.cache, w2)
    torch.testing.assert_close(got2[0], eager[0], atol=1e-6, rtol=1e-6)


def test_compile_paged_attention(device):
    p = _problem(device)

    def f(q, bt, sl, qsl):
        return pagedattn.paged_attention(q, p.cache, bt, sl, qsl, sliding_window=7) + 1.0

    args = (p.t(p.query), p.t(p.block_table), p.t(p.seq_lens), p.t(p.query_start_loc))
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")(*args)
    ref, _ = p.reference(sliding_window=7)
    np.testing.assert_allclose(got.cpu().numpy(), ref + 1.0, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_current_stream_is_used():
    """Work queued on a side stream before run() must be seen by run(): it is on that stream."""
    p = _problem("cuda")
    w = p.plan(cache=p.cache)
    q = torch.zeros(p.num_tokens, p.H, p.D, device="cuda")
    q_real = p.t(p.query)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~tens of ms: a kernel on another stream would overtake
        q.copy_(q_real)
        out = w.run(q, p.cache)
    s.synchronize()
    ref, _ = p.reference()
    np.testing.assert_allclose(out.cpu().numpy(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cuda_graph_replay_equals_eager(dtype):
    p = _problem("cuda", dtype)
    w = p.plan(cache=p.cache, return_lse=True)  # plan outside the capture
    q_static = p.t(p.query).clone()
    out_static = torch.empty_like(q_static)
    key, value, slots = p.t(p.key), p.t(p.value), p.t(p.slot_mapping)
    # Warm up on a side stream (torch's recipe for capture), then capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w.run(q_static, p.cache, out=out_static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pagedattn.write_kv(key, value, slots, p.cache)
        _, lse_static = w.run(q_static, p.cache, out=out_static, return_lse=True)
    for seed in (1, 2):
        q_new = torch.from_numpy(np.random.default_rng(seed).uniform(
            -1, 1, q_static.shape).astype(np.float32)).to(q_static)
        q_static.copy_(q_new)
        g.replay()
        torch.cuda.synchronize()
        eager_out, eager_lse = w.run(q_new, p.cache, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out_static, eager_out)
        assert torch.equal(lse_static, eager_lse)
