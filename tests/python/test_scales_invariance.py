"""fp8 scales as tensors (KVCache.k_scales / v_scales) and batch-invariant plans
(BatchAttention.plan(batch_invariant=True)) through the Python API."""

import numpy as np
import pytest

import pagedattn

torch = pytest.importorskip("torch")

H, KVH, D, BS = 4, 2, 64, 16


def _problem(device, seq_lens=(40, 9, 70), q_lens=(1, 3, 1), seed=0):
    rng = np.random.default_rng(seed)
    blocks = [(n + BS - 1) // BS for n in seq_lens]
    pool = sum(blocks) + 1
    bt = np.zeros((len(seq_lens), max(blocks)), np.int32)
    nxt = 0
    for s, b in enumerate(blocks):
        bt[s, :b] = np.arange(nxt, nxt + b)[::-1]
        nxt += b
    slots = np.concatenate([bt[s, np.arange(n) // BS].astype(np.int64) * BS + np.arange(n) % BS
                            for s, n in enumerate(seq_lens)])
    p = dict(
        bt=torch.from_numpy(bt), sl=torch.tensor(seq_lens, dtype=torch.int32),
        qsl=torch.tensor(np.concatenate([[0], np.cumsum(q_lens)]), dtype=torch.int32),
        slots=torch.from_numpy(slots).to(device),
        key=torch.from_numpy(rng.uniform(-1, 1, (len(slots), KVH, D)).astype(np.float32)).to(device),
        value=torch.from_numpy(rng.uniform(-1, 1, (len(slots), KVH, D)).astype(np.float32)).to(device),
        query=torch.from_numpy(rng.uniform(-1, 1, (sum(q_lens), H, D)).astype(np.float32)).to(device),
        pool=pool)
    return p


def _fp8_cache(p, device, k_scales, v_scales):
    kc = torch.zeros((p["pool"], BS, KVH, D), dtype=torch.float8_e4m3fn, device=device)
    vc = torch.zeros_like(kc)
    cache = pagedattn.KVCache(kc, vc, k_scale=5.0, v_scale=7.0,  # ignored: tensors given
                              k_scales=k_scales, v_scales=v_scales)
    return cache


def _by_hand(p, cache, scale):
    """Attention from the stored fp8 codes dequantised per KV head, in float64 numpy."""
    kc = cache.k_cache.cpu().to(torch.float64).numpy()
    vc = cache.v_cache.cpu().to(torch.float64).numpy()
    ks = cache.k_scales.cpu().to(torch.float64).numpy()
    vs = cache.v_scales.cpu().to(torch.float64).numpy()
    ks = np.broadcast_to(ks, (KVH,))
    vs = np.broadcast_to(vs, (KVH,))
    q = p["query"].cpu().to(torch.float64).numpy()
    bt, sl, qsl = p["bt"].numpy(), p["sl"].numpy(), p["qsl"].numpy()
    out = np.zeros_like(q)
    for s in range(len(sl)):
        L, q0, q1 = sl[s], qsl[s], qsl[s + 1]
        j = np.arange(L)
        blk, off = bt[s, j // BS], j % BS
        for t in range(q0, q1):
            pos = L - (q1 - q0) + (t - q0)
            for h in range(H):
                g = h // (H // KVH)
                k = kc[blk, off, g] * ks[g]
                v = vc[blk, off, g] * vs[g]
                z = scale * (k[: pos + 1] @ q[t, h])
                w = np.exp(z - z.max())
                out[t, h] = (w / w.sum()) @ v[: pos + 1]
    return out


@pytest.mark.parametrize("per_head", [False, True])
def test_scale_tensors_in_writer_and_reader(device, per_head):
    p = _problem(device)
    n = KVH if per_head else 1
    ks = torch.tensor([0.01, 0.03][:n], dtype=torch.float32, device=device)
    vs = torch.tensor([0.02, 0.005][:n], dtype=torch.float32, device=device)
    cache = _fp8_cache(p, device, ks, vs)
    assert cache.k_scales is ks and cache.v_scales is vs
    pagedattn.write_kv(p["key"], p["value"], p["slots"], cache)
    # The writer divided head g by its own scale: the codes of a row are key / scale[g].
    got = cache.k_cache.cpu().to(torch.float32)
    slot = int(p["slots"][5])
    for g in range(KVH):
        want = (p["key"][5, g].cpu() / ks.cpu()[g if per_head else 0]).to(torch.float8_e4m3fn)
        assert torch.equal(got[slot // BS, slot % BS, g], want.to(torch.float32))
    scale = pagedattn.default_scale(D)
    out = pagedattn.paged_attention(p["query"], cache, p["bt"].to(device), p["sl"].to(device),
                                    p["qsl"].to(device))
    np.testing.assert_allclose(out.cpu().numpy(), _by_hand(p, cache, scale), atol=2e-5, rtol=2e-5)
    if device == "cpu":
        ref = pagedattn.reference_attention(p["query"], cache, p["bt"], p["sl"], p["qsl"])
        np.testing.assert_allclose(np.asarray(ref), _by_hand(p, cache, scale), atol=1e-6)
    # Read when the kernels run: new values in place change the next call's result.
    before = out.clone()
    ks.mul_(2.0)
    vs.mul_(0.5)
    out2 = pagedattn.paged_attention(p["query"], cache, p["bt"].to(device), p["sl"].to(device),
                                     p["qsl"].to(device))
    assert not torch.equal(out2, before)
    np.testing.assert_allclose(out2.cpu().numpy(), _by_hand(p, cache, scale), atol=2e-5, rtol=2e-5)


def test_scale_tensor_errors(device):
    p = _problem(device)
    ok = torch.ones(KVH, dtype=torch.float32, device=device)
    with pytest.raises(ValueError, match="v_scales"):
        _fp8_cache(p, device, ok, None)
    with pytest.raises(ValueError, match="k_scales"):
        _fp8_cache(p, device, torch.ones(3, dtype=torch.float32, device=device), ok)
    with pytest.raises(ValueError, match="k_scales.dtype"):
        _fp8_cache(p, device, ok.to(torch.float16), ok)
    with pytest.raises(ValueError, match="k_scales"):
        _fp8_cache(p, device, torch.ones(2 * KVH, dtype=torch.float32, device=device)[::2], ok)
    kc = torch.zeros((p["pool"], BS, KVH, D), dtype=torch.float32, device=device)
    with pytest.raises(ValueError, match="fp8"):
        pagedattn.KVCache(kc, kc.clone(), k_scales=ok, v_scales=ok)


def test_batch_invariant_plan_and_explain(device):
    # Sequence 1 alone and between longer and shorter ones: the same bits.
    seqs, qls = (3000, 500, 9000, 40), (1, 1, 1, 1)
    p = _problem(device, seqs, qls, seed=3)
    kc = torch.full((p["pool"], BS, KVH, D), float("nan"), dtype=torch.float32, device=device)
    cache = pagedattn.KVCache(kc, kc.clone())
    pagedattn.write_kv(p["key"], p["value"], p["slots"], cache)
    w = pagedattn.BatchAttention(device)
    w.plan(p["bt"], p["sl"], p["qsl"], num_heads=H, num_kv_heads=KVH, head_size=D,
           batch_invariant=True)
    out, lse = w.run(p["query"], cache, return_lse=True)
    info = w.explain(cache, q_dtype="fp32")
    assert info["batch_invariant"] is True
    one = pagedattn.BatchAttention(device)
    one.plan(p["bt"][1:2].contiguous(), p["sl"][1:2].contiguous(),
             torch.tensor([0, 1], dtype=torch.int32), num_heads=H, num_kv_heads=KVH,
             head_size=D, batch_invariant=True)
    out1, lse1 = one.run(p["query"][1:2].contiguous(), cache, return_lse=True)
    assert torch.equal(out1, out[1:2]) and torch.equal(lse1, lse[1:2])
    d = pagedattn.explain(p["query"], cache, p["bt"], p["sl"], p["qsl"], batch_invariant=True)
    assert d["batch_invariant"] is True
    assert pagedattn.explain(p["query"], cache, p["bt"], p["sl"], p["qsl"])["batch_invariant"] is False


def test_batch_invariant_must_be_a_bool(device):
    p = _problem(device, (300,), (1,), seed=5)
    w = pagedattn.BatchAttention(device)
    with pytest.raises(TypeError, match="batch_invariant"):
        w.plan(p["bt"], p["sl"], p["qsl"], num_heads=H, num_kv_heads=KVH, head_size=D,
               batch_invariant="false")
    kc = torch.zeros((p["pool"], BS, KVH, D), dtype=torch.float32, device=device)
    cache = pagedattn.KVCache(kc, kc.clone())
    # The kernel is chosen when the plan first meets its cache: the pair is refused there.
    with pytest.raises(ValueError, match="num_splits = 2 with batch_invariant"):
        w.plan(p["bt"], p["sl"], p["qsl"], num_heads=H, num_kv_heads=KVH, head_size=D,
               batch_invariant=True, num_splits=2)
        w.run(p["query"], cache)
