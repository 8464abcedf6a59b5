"""The Python API itself: outputs in the caller's framework, merge_states against its formula,
explain, the error classes of each bad-input class (nothing written), the GIL released during
a call, and the package importing without torch."""

import ctypes
import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pagedattn
from small_problem import Problem


def frameworks(device):
    if device == "cuda":
        return ["torch"]
    return ["numpy", "torch"]


def _np(x):
    return x.detach().cpu().float().numpy() if hasattr(x, "detach") else np.asarray(x, np.float32)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_run_returns_the_callers_framework(framework, device):
    if framework == "torch":
        torch = pytest.importorskip("torch")
    elif device == "cuda":
        pytest.skip("numpy arrays live on the CPU")
    p = Problem(framework, device)
    w = p.plan()
    q = p.t(p.query)
    out, lse = w.run(q, p.cache, return_lse=True)
    kind = torch.Tensor if framework == "torch" else np.ndarray
    assert isinstance(out, kind) and isinstance(lse, kind)
    assert tuple(out.shape) == (p.num_tokens, p.H, p.D) and tuple(lse.shape) == (p.num_tokens, p.H)
    if framework == "torch":
        assert out.device == q.device and lse.dtype == torch.float32
    ref, ref_lse = p.reference()
    np.testing.assert_allclose(_np(out), ref, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(_np(lse), ref_lse, atol=1e-5, rtol=1e-5)
    # Plan once, run per layer: a second layer's cache with the same geometry, into `out`.
    p2 = Problem(framework, device, seed=5)
    buf = p.t(np.zeros((p.num_tokens, p.H, p.D), np.float32))
    got = w.run(q, p2.cache, out=buf)
    assert got is buf
    cache2 = pagedattn.KVCache(_host(p2.cache.k_cache), _host(p2.cache.v_cache))
    ref2 = pagedattn.reference_attention(_host(q), cache2, p.block_table, p.seq_lens,
                                         p.query_start_loc)
    np.testing.assert_allclose(_np(buf), np.asarray(ref2), atol=1e-5, rtol=1e-5)


def _host(x):
    return x.cpu() if hasattr(x, "cpu") else x


def test_plan_with_cache_and_explain(device):
    fw = "torch" if device == "cuda" else "numpy"
    if fw == "torch":
        pytest.importorskip("torch")
    p = Problem(fw, device)
    w = p.plan(cache=p.cache, num_splits=1)
    assert w.workspace_bytes >= 0
    d = w.explain(p.cache)
    assert d["kernel"] in ("cpu_tiled_online_softmax",) or device == "cuda"
    assert d["batch"]["num_seqs"] == 3 and d["batch"]["num_tokens"] == p.num_tokens
    assert d["batch"]["num_decode_seqs"] == 1 and d["batch"]["num_prefill_seqs"] == 2
    assert d["problem"]["head_size"] == p.D and d["problem"]["layout"] == "nhd"
    assert d["num_splits"] >= 1 and isinstance(d["reason"], str) and d["reason"]
    assert d["writer"]["access"] in ("native", "strided")
    d2 = pagedattn.explain(p.t(p.query), p.cache, p.t(p.block_table), p.t(p.seq_lens),
                           p.t(p.query_start_loc), sliding_window=8)
    assert d2["problem"]["sliding_window"] == 8


# The keys of `pagedattn explain --json` (tools/cmd_explain.cpp) for a plan on a real device;
# explain() has each of them under the same name, with more of its own beside them.
CLI_EXPLAIN_KEYS = {
    "device": None,
    "problem": {"num_heads", "num_kv_heads", "gqa_ratio", "head_size", "dtype", "cache_dtype",
                "layout", "block_size", "num_blocks", "page_pad", "softcap", "sliding_window",
                "alibi", "sinks", "num_seqs", "num_tokens", "num_decode_seqs",
                "num_prefill_seqs", "num_empty_seqs", "max_seq_len", "max_query_len",
                "total_kv_tokens"},
    "attention": {"kernel": None, "cache_access": None, "tile_tokens": None, "num_splits": None,
                  "shared_memory_bytes": None, "threads_per_block": None,
                  "workspace_bytes": None, "decode_rows_fast_path": None,
                  "prefill_rows_mma": None, "batch_invariant": None, "prefill_rows_wgmma": None,
                  "row_kernels": {"decode", "prefill"}, "runs": None,
                  "prefill_rows_wgmma_ws": None, "reason": None},
    "cache_access": {"access", "reason"},
    "writer": {"kernel", "cache_access", "reason"},
}


def _missing(have, want, at=""):
    """Paths of the keys of `want` (a dict of sub-keys, a set of leaf keys, or None for a
    leaf) that `have` lacks."""
    if want is None:
        return []
    if isinstance(want, set):
        want = dict.fromkeys(want)
    if not isinstance(have, dict):
        return [at or "<top>"]
    out = []
    for k, sub in want.items():
        if k not in have:
            out.append(at + k)
        else:
            out += _missing(have[k], sub, at + k + ".")
    return out


def _as_tree(want):
    if want is None:
        return None
    if isinstance(want, set):
        return dict.fromkeys(want)
    return {k: _as_tree(v) for k, v in want.items()}


def _key_tree(d):
    return {k: _key_tree(v) if isinstance(v, dict) else None for k, v in d.items()}


def _cli():
    """The `pagedattn` program of the build tree (PAGEDATTN_CLI, or build/pagedattn), if any."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PAGEDATTN_CLI") or os.path.join(root, "build", "pagedattn")
    return path if os.access(path, os.X_OK) else None


def test_explain_keys_are_the_clis_and_more(device):
    fw = "torch" if device == "cuda" else "numpy"
    if fw == "torch":
        pytest.importorskip("torch")
    p = Problem(fw, device)
    d = pagedattn.explain(p.t(p.query), p.cache, p.t(p.block_table), p.t(p.seq_lens),
                          p.t(p.query_start_loc))
    assert _missing(d, CLI_EXPLAIN_KEYS) == []
    # A fact under two names has one value.
    a = d["attention"]
    for old, new in (("kernel", "kernel"), ("access", "cache_access"), ("num_splits", "num_splits"),
                     ("tile_tokens", "tile_tokens"), ("reason", "reason"),
                     ("workspace_bytes", "workspace_bytes"),
                     ("decode_rows_fast_path", "decode_rows_fast_path")):
        assert d[old] == a[new], old
    assert d["problem"]["dtype"] == d["problem"]["q_dtype"] == "fp32"
    assert d["writer"]["cache_access"] == d["writer"]["access"]
    assert {k: d["problem"][k] for k in d["batch"]} == d["batch"]
    assert d["problem"]["gqa_ratio"] == p.H // p.KVH and d["problem"]["page_pad"] == 0
    assert a["row_kernels"]["decode"] == a["row_kernels"]["prefill"] == a["kernel"]
    assert a["runs"] == a["kernel"]
    # The same configuration through the CLI where the build has one: exactly the keys above
    # (a key the CLI gains must be added here and to explain()), and the same decision.
    cli = _cli()
    if cli is None or device != "cpu":
        return
    r = subprocess.run([cli, "explain", "--device", "cpu", "--num-heads", str(p.H),
                        "--num-kv-heads", str(p.KVH), "--head-size", str(p.D),
                        "--block-size", str(p.BS), "--dtype", "fp32", "--seq-lens", "20,5,33",
                        "--query-lens", "2,1,4", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert _key_tree(j) == _as_tree(CLI_EXPLAIN_KEYS)
    assert _missing(d, _key_tree(j)) == []
    for k in ("kernel", "cache_access", "tile_tokens", "num_splits", "row_kernels", "runs",
              "decode_rows_fast_path", "prefill_rows_mma"):
        assert d["attention"][k] == j["attention"][k], k
    for k in CLI_EXPLAIN_KEYS["problem"] - {"num_blocks"}:
        assert d["problem"][k] == j["problem"][k], k


def test_merge_states_formula(device):
    fw = "torch" if device == "cuda" else "numpy"
    rng = np.random.default_rng(3)
    T, H, D = 5, 3, 16
    oa, ob = rng.uniform(-1, 1, (2, T, H, D)).astype(np.float32)
    la, lb = rng.uniform(-3, 3, (2, T, H)).astype(np.float32)
    la[0, 0] = -np.inf            # a state without keys contributes nothing
    la[1, 1] = lb[1, 1] = -np.inf  # neither has keys: out 0, lse -inf
    conv = (lambda a: a)
    if fw == "torch":
        torch = pytest.importorskip("torch")
        conv = (lambda a: torch.from_numpy(a).to(device))
    out, lse = pagedattn.merge_states(conv(oa), conv(la), conv(ob), conv(lb))
    assert type(out) is type(conv(oa))
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.maximum(la, lb).astype(np.float64)
        m_safe = np.where(np.isinf(m), 0, m)
        s = np.exp(la - m_safe) + np.exp(lb - m_safe)
        ref_lse = np.where(s > 0, m_safe + np.log(s), -np.inf)
        wa = np.where(np.isinf(ref_lse), 0, np.exp(la - ref_lse))[..., None]
        wb = np.where(np.isinf(ref_lse), 0, np.exp(lb - ref_lse))[..., None]
    ref = wa * oa + wb * ob
    np.testing.assert_allclose(_np(out), ref, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(_np(lse), ref_lse, atol=1e-6, rtol=1e-5)
    assert np.all(_np(out)[1, 1] == 0) and _np(lse)[1, 1] == -np.inf
    with pytest.raises(ValueError, match="lse_b"):  # one token short
        pagedattn.merge_states(conv(oa), conv(la), conv(ob), conv(np.ascontiguousarray(lb[:-1])))
    with pytest.raises(ValueError, match="out_b"):  # another head size
        pagedattn.merge_states(conv(oa), conv(la), conv(np.ascontiguousarray(ob[..., :8])),
                               conv(lb))


# ------------------------------------------------------------------------ bad inputs
def _cache_bytes(p):
    return _np(p.cache.k_cache).tobytes() + _np(p.cache.v_cache).tobytes()


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_write_kv_errors_write_nothing(framework, device):
    if framework == "torch":
        pytest.importorskip("torch")
    elif device == "cuda":
        pytest.skip("numpy arrays live on the CPU")
    p = Problem(framework, device)
    before = _cache_bytes(p)
    key, value = p.t(p.key[:4]), p.t(p.value[:4])
    bad_slot = p.slot_mapping[:4].copy()
    bad_slot[3] = p.cache.num_blocks * p.cache.block_size  # one past the end
    host = {"host_slot_mapping": bad_slot} if device == "cuda" else {}
    with pytest.raises(ValueError, match=r"slot_mapping\[3\]"):
        pagedattn.write_kv(key, value, p.t(bad_slot), p.cache, **host)
    dup = p.slot_mapping[:4].copy()
    dup[2] = dup[0]
    host = {"host_slot_mapping": dup} if device == "cuda" else {}
    with pytest.raises(ValueError, match="slot"):
        pagedattn.write_kv(key, value, p.t(dup), p.cache, **host)
    with pytest.raises(ValueError, match="value"):  # value heads differ from the cache
        pagedattn.write_kv(key, p.t(p.value[:4, :1]), p.t(p.slot_mapping[:4]), p.cache)
    assert _cache_bytes(p) == before


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_attention_errors(framework, device):
    if framework == "torch":
        pytest.importorskip("torch")
    elif device == "cuda":
        pytest.skip("numpy arrays live on the CPU")
    p = Problem(framework, device)
    q = p.t(p.query)
    # Metadata values: a query longer than its sequence.
    bad_lens = p.seq_lens.copy()
    bad_lens[2] = 3
    with pytest.raises(ValueError, match=r"seq_lens\[2\]"):
        pagedattn.BatchAttention(device).plan(
            p.t(p.block_table), p.t(bad_lens), p.t(p.query_start_loc), num_heads=p.H,
            num_kv_heads=p.KVH, head_size=p.D, cache=p.cache)
    # Without a cache, plan() has no block count to check against: run() plans and raises.
    w0 = pagedattn.BatchAttention(device)
    w0.plan(p.t(p.block_table), p.t(bad_lens), p.t(p.query_start_loc), num_heads=p.H,
            num_kv_heads=p.KVH, head_size=p.D)
    with pytest.raises(ValueError, match=r"seq_lens\[2\]"):
        w0.run(q, p.cache)
    bad_bt = p.block_table.copy()
    bad_bt[0, 0] = 10_000
    with pytest.raises(ValueError, match="block_table"):
        pagedattn.paged_attention(q, p.cache, p.t(bad_bt), p.t(p.seq_lens),
                                  p.t(p.query_start_loc))
    # Parameters.
    for kw, word in (({"softcap": -1.0}, "softcap"), ({"sliding_window": -2}, "sliding_window"),
                     ({"scale": 0.0}, "scale")):
        with pytest.raises(ValueError, match=word):
            pagedattn.paged_attention(q, p.cache, p.t(p.block_table), p.t(p.seq_lens),
                                      p.t(p.query_start_loc), **kw)
    # A run whose batch shape differs from the plan; nothing written into `out`.
    w = p.plan()
    out = p.t(np.full((p.num_tokens + 1, p.H, p.D), 7.0, np.float32))
    with pytest.raises(ValueError, match="num_tokens"):
        w.run(p.t(np.zeros((p.num_tokens + 1, p.H, p.D), np.float32)), p.cache, out=out)
    assert np.all(_np(out) == 7.0)
    # An output that partly overlaps the query.
    big = p.t(np.zeros((p.num_tokens + 1, p.H, p.D), np.float32))
    with pytest.raises(ValueError, match="shares memory"):
        w.run(big[:-1], p.cache, out=big[1:])
    # num_kv_heads that the cache does not have.
    w2 = pagedattn.BatchAttention(device)
    w2.plan(p.t(p.block_table), p.t(p.seq_lens), p.t(p.query_start_loc), num_heads=p.H,
            num_kv_heads=1, head_size=p.D)
    with pytest.raises(ValueError, match="num_kv_heads"):
        w2.run(q, p.cache)
    with pytest.raises(RuntimeError, match="plan"):
        pagedattn.BatchAttention(device).run(q, p.cache)
    # A dtype the library has no use for (float64) is "unsupported".
    with pytest.raises(NotImplementedError, match="query"):
        w.run(np.zeros((p.num_tokens, p.H, p.D)), p.cache)
    with pytest.raises(TypeError, match="query"):
        w.run([[1.0]], p.cache)


def test_cache_errors(device):
    if device == "cuda":
        torch = pytest.importorskip("torch")
        mk = (lambda *s, dtype=torch.float32: torch.zeros(s, dtype=dtype, device=device))
    else:
        mk = (lambda *s, dtype=np.float32: np.zeros(s, dtype))
    with pytest.raises(ValueError, match=r"v_cache.shape\[3\]"):
        pagedattn.KVCache(mk(4, 16, 2, 64), mk(4, 16, 2, 32))
    with pytest.raises(ValueError, match="layout"):
        pagedattn.KVCache(mk(4, 16, 2, 64), mk(4, 16, 2, 64), layout="nchw")
    with pytest.raises(NotImplementedError, match="head_size"):
        pagedattn.KVCache(mk(4, 16, 2, 520), mk(4, 16, 2, 520))
    with pytest.raises(TypeError, match="k_cache"):
        pagedattn.KVCache("not a tensor", mk(4, 16, 2, 64))


class _FakeCuda:
    """A numpy array that claims (through its DLPack capsule) to live on CUDA device 0."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *args, **kwargs):
        cap = self.a.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        ptr = get(cap, b"dltensor")
        ctypes.c_int32.from_address(ptr + 8).value = 2  # DLTensor.device.device_type = kDLCUDA
        return cap


def test_device_unavailable_is_runtime_error():
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the fake CUDA tensor would be read as device memory")
    except ImportError:
        pass
    p = Problem("numpy", "cpu")
    kc, vc = _FakeCuda(np.zeros_like(p.k_cache)), _FakeCuda(np.zeros_like(p.v_cache))
    cache = pagedattn.KVCache(kc, vc)
    assert cache.device == "cuda:0"
    with pytest.raises(RuntimeError, match="(?i)cuda"):
        pagedattn.write_kv(_FakeCuda(p.key), _FakeCuda(p.value), _FakeCuda(p.slot_mapping), cache)


def test_cuda_device_needs_the_cuda_backend():
    """A build without the CUDA backend refuses a CUDA device up front, saying so (not that
    torch is missing); a CUDA build accepts it at construction (the GPU is needed at plan)."""
    if pagedattn.built_with_cuda:
        assert isinstance(pagedattn.BatchAttention("cuda:0"), pagedattn.BatchAttention)
    else:
        with pytest.raises(RuntimeError, match="built without the CUDA backend"):
            pagedattn.BatchAttention("cuda")


def test_gil_released_during_run():
    """Another Python thread keeps running while attention runs in C++."""
    p = Problem("numpy", "cpu", H=8, KVH=1, D=128, seq_lens=(3000, 3000), q_lens=(64, 64))
    w = p.plan(num_threads=1)
    q = p.t(p.query)
    w.run(q, p.cache)  # warm
    state = {"running": False, "done": False}

    def work():
        state["running"] = True
        w.run(q, p.cache)
        state["done"] = True

    th = threading.Thread(target=work)
    count = 0
    th.start()
    while not state["running"]:
        pass
    while not state["done"]:
        count += 1
    th.join()
    assert count > 1000, f"the main thread ran {count} iterations during the call"


def test_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, pagedattn\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "print(pagedattn.__version__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == pagedattn.__version__


def test_version_and_scale():
    assert pagedattn.__version__.count(".") == 2
    assert math.isclose(pagedattn.default_scale(128), 1 / math.sqrt(128), rel_tol=1e-7)


def test_a_failed_plan_leaves_no_plan_to_run():
    # A serving loop that catches plan()'s error must not get the previous step's attention.
    p = Problem()
    w = p.plan(cache=p.cache)
    w.run(p.query, p.cache)
    bad_bt = p.block_table.copy()
    bad_bt[0, 0] = 10_000
    with pytest.raises(ValueError, match="block_table"):
        w.plan(bad_bt, p.seq_lens, p.query_start_loc, num_heads=p.H, num_kv_heads=p.KVH,
               head_size=p.D, cache=p.cache)
    with pytest.raises(RuntimeError, match="plan"):
        w.run(p.query, p.cache)
    # Planning again with good metadata works as before.
    p.plan(w, cache=p.cache)
    out = w.run(p.query, p.cache)
    ref, _ = p.reference()
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_cache_attributes_are_read_only():
    # Eager calls, the torch ops and the oracle must read one checked description.
    p = Problem()
    for name, value in (("k_scale", 2.0), ("v_scale", 2.0), ("layout", "hnd"),
                        ("k_cache", p.v_cache), ("v_cache", p.k_cache)):
        with pytest.raises(AttributeError):
            setattr(p.cache, name, value)
    assert p.cache.k_scale == 1.0 and p.cache.layout == "nhd"


def test_query_of_the_wrong_rank_is_named():
    p = Problem()
    for q in (p.query.reshape(p.num_tokens, -1), p.query[None]):
        for call in (pagedattn.paged_attention, pagedattn.explain):
            with pytest.raises(ValueError, match=r"query\.ndim = [24]: expected 3"):
                call(q, p.cache, p.block_table, p.seq_lens, p.query_start_loc)


def test_host_parameter_values_are_checked_at_run(device):
    # Per-head tensors on the host are checked like their scalar twins, at every run (their
    # values may change after the plan); the error names the element and nothing is written.
    if device == "cuda":
        pytest.skip("device-resident values are read only by the kernels (documented)")
    torch = pytest.importorskip("torch")
    p = Problem("torch", device)
    q = p.t(p.query)
    sinks = torch.zeros(p.H, dtype=torch.float32)
    w = pagedattn.BatchAttention(device)
    w.plan(p.t(p.block_table), p.t(p.seq_lens), p.t(p.query_start_loc), num_heads=p.H,
           num_kv_heads=p.KVH, head_size=p.D, cache=p.cache, sinks=sinks)
    out = torch.full_like(q, 7.0)
    for bad, text in ((float("nan"), r"sinks\[1\] = nan"), (float("inf"), r"sinks\[1\] = inf")):
        sinks[1] = bad
        with pytest.raises(ValueError, match=text + ": expected a finite value or -inf"):
            w.run(q, p.cache, out=out)
        assert bool((out == 7.0).all())
    sinks[1] = float("-inf")  # no sink for that head
    assert bool(torch.isfinite(w.run(q, p.cache)).all())
    with pytest.raises(ValueError, match=r"alibi_slopes\[0\] = nan: expected a finite value"):
        pagedattn.paged_attention(q, p.cache, p.t(p.block_table), p.t(p.seq_lens),
                                  p.t(p.query_start_loc),
                                  alibi_slopes=torch.tensor([float("nan")] + [0.0] * (p.H - 1)))
    # fp8 scale tensors: the reader and the writer (which divides by them).
    kc = torch.zeros((8, p.BS, p.KVH, p.D), dtype=torch.float8_e4m3fn)
    vc = torch.zeros_like(kc)
    ks, vs = torch.ones(p.KVH), torch.ones(p.KVH)
    c8 = pagedattn.KVCache(kc, vc, k_scales=ks, v_scales=vs)
    ks[1] = 0.0
    with pytest.raises(ValueError, match=r"k_scales\[1\] = 0.000000: expected a finite value > 0"):
        pagedattn.write_kv(torch.ones(1, p.KVH, p.D), torch.ones(1, p.KVH, p.D),
                           torch.tensor([3]), c8)
    assert not bool(kc.view(torch.uint8).any())
    ks[1] = 1.0
    vs[0] = float("nan")
    bt = torch.tensor([[0]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"v_scales\[0\] = nan"):
        pagedattn.paged_attention(q[:1], c8, bt, torch.tensor([1], dtype=torch.int32),
                                  torch.tensor([0, 1], dtype=torch.int32))


def test_tensor_dlpack_cannot_export_is_a_value_error_naming_it():
    torch = pytest.importorskip("torch")
    p = Problem("torch")
    w = p.plan()
    q = torch.empty(p.num_tokens, p.H, p.D, device="meta")
    with pytest.raises(ValueError, match="query: a tensor on device meta cannot be passed"):
        w.run(q, p.cache)
    with pytest.raises(ValueError, match="out: a tensor on device meta cannot be passed"):
        w.run(p.t(p.query), p.cache, out=torch.empty(p.num_tokens, p.H, p.D, device="meta"))
