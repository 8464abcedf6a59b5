"""Every case of the shared matrix (the list of src/testing/cases.cpp, exposed by
pagedattn._C.testing) through the Python API: write_kv against the writer oracle bit for bit,
BatchAttention.plan/run and paged_attention against the attention oracle within the tolerance
table, with numpy (CPU fp32/fp16 cases) and torch inputs."""

import math

import pytest

torch = pytest.importorskip("torch")

import pagedattn  # noqa: E402
from pagedattn import _C  # noqa: E402
from pagedattn import _frameworks as fw  # noqa: E402

import case_inputs  # noqa: E402

testing = getattr(_C, "testing", None)
if testing is None:
    pytest.skip("pagedattn was built without the test-case list (src/testing); build it "
                "through scripts/setup.sh", allow_module_level=True)


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        dev = metafunc.config.getoption("--device")
        full = metafunc.config.getoption("--full-matrix")
        cases = testing.matrix_cases(dev, quick=not full)
        metafunc.parametrize("case", cases, ids=[c.name for c in cases])


def raw_bytes(t):
    """Every byte of a tensor's storage (page padding and unused blocks included), on the CPU."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.as_strided((n,), (1,), 0).cpu().view(torch.uint8)


def assert_close(got, ref, tol, what):
    """|got - ref| <= atol + rtol |ref| elementwise; NaN exactly where the oracle has NaN."""
    atol, rtol = tol
    got = got.double().cpu()
    ref = ref.double().cpu()
    nan_ref = torch.isnan(ref)
    nan_got = torch.isnan(got)
    bad_nan = nan_ref != nan_got
    assert not bad_nan.any(), (f"{what}: NaN mismatch at {bad_nan.nonzero()[0].tolist()} "
                               f"(got {got[bad_nan][0].item()}, reference {ref[bad_nan][0].item()})")
    ok = nan_ref | ((got - ref).abs() <= atol + rtol * ref.abs())
    ok |= (got == ref)  # equal infinities
    if not ok.all():
        i = (~ok).nonzero()[0].tolist()
        pytest.fail(f"{what}: {(~ok).sum().item()} of {ok.numel()} elements outside the budget "
                    f"(atol {atol}, rtol {rtol}); first {i}: got {got[tuple(i)].item()}, "
                    f"reference {ref[tuple(i)].item()}")


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_case(case, framework, device):
    if framework == "numpy" and (device != "cpu" or not case_inputs.numpy_ok(case)):
        pytest.skip("numpy inputs: CPU fp32/fp16 caches only (numpy has no bf16/fp8)")
    if framework == "numpy" and case.block_size > 64:
        # The same configuration runs with torch; numpy repeats the cheaper ones (suite time).
        pytest.skip("numpy inputs: block sizes up to 64 (the large-block cases run on torch)")
    inp = case_inputs.build(case, device)
    conv = case_inputs.as_numpy if framework == "numpy" else (lambda t: t)
    cache = pagedattn.KVCache(conv(inp.k_cache), conv(inp.v_cache), case.layout, inp.k_scale,
                              inp.v_scale)

    # ---- write_kv against the writer oracle, over the whole allocation
    pagedattn.write_kv(conv(inp.key), conv(inp.value), conv(inp.slot_mapping), cache)
    k_ref = case_inputs.clone_storage(inp.k_init)
    v_ref = case_inputs.clone_storage(inp.v_init)
    _C.reference_write_kv(fw.arg(inp.key.cpu(), "key"), fw.arg(inp.value.cpu(), "value"),
                          fw.arg(inp.slot_mapping.cpu(), "slot_mapping"), fw.arg(k_ref, "k"),
                          fw.arg(v_ref, "v"), case.layout, inp.k_scale, inp.v_scale)
    assert torch.equal(raw_bytes(inp.k_cache), raw_bytes(k_ref)), "write_kv: key cache differs"
    assert torch.equal(raw_bytes(inp.v_cache), raw_bytes(v_ref)), "write_kv: value cache differs"

    # ---- the oracle first (an in-place run overwrites the query)
    ref_cache = pagedattn.KVCache(k_ref, v_ref, case.layout, inp.k_scale, inp.v_scale)
    cpu = (lambda t: None if t is None else t.cpu())
    ref_out, ref_lse = pagedattn.reference_attention(
        inp.query.cpu(), ref_cache, cpu(inp.block_table), cpu(inp.seq_lens),
        cpu(inp.query_start_loc), scale=case.scale, softcap=case.softcap,
        sliding_window=case.sliding_window, alibi_slopes=cpu(inp.alibi_slopes),
        sinks=cpu(inp.sinks), return_lse=True)
    query_copy = inp.query.clone() if case.in_place else inp.query

    # ---- plan once, run
    w = pagedattn.BatchAttention(device)
    w.plan(conv(inp.block_table), conv(inp.plan_seq_lens), conv(inp.query_start_loc),
           num_heads=case.num_heads, num_kv_heads=case.num_kv_heads, head_size=case.head_size,
           scale=case.scale, softcap=case.softcap, sliding_window=case.sliding_window,
           alibi_slopes=conv(inp.alibi_slopes), sinks=conv(inp.sinks),
           num_splits=case.num_splits, tile_tokens=case.tile_tokens)
    # planned_seq_lens: the sequences grew after planning (a replayed CUDA graph); the run reads
    # the lengths in place.
    inp.plan_seq_lens.copy_(inp.seq_lens)
    out_arg = None if inp.out is None else conv(inp.out)
    r = w.run(conv(inp.query), cache, out=out_arg, return_lse=case.lse)
    out, lse = r if case.lse else (r, None)
    expected_type = torch.Tensor if framework == "torch" else type(conv(torch.zeros(1)))
    assert isinstance(out, expected_type), f"out is a {type(out).__name__}"
    if out_arg is not None:
        assert out is out_arg
    tol = testing.tolerance_for(case.dtype, case.kv_dtype)
    to_t = (lambda a: a if isinstance(a, torch.Tensor) else torch.from_numpy(a))
    assert_close(to_t(out), ref_out, tol, "out")
    if case.lse:
        assert lse.shape == (inp.num_tokens, case.num_heads)
        assert_close(to_t(lse), ref_lse, tol, "lse")

    # ---- the one-shot call on the same inputs
    if not case.in_place and not list(case.planned_seq_lens):
        r1 = pagedattn.paged_attention(
            conv(query_copy), cache, conv(inp.block_table), conv(inp.seq_lens),
            conv(inp.query_start_loc), scale=case.scale, softcap=case.softcap,
            sliding_window=case.sliding_window, alibi_slopes=conv(inp.alibi_slopes),
            sinks=conv(inp.sinks), return_lse=True)
        assert_close(to_t(r1[0]), ref_out, tol, "paged_attention out")
        assert_close(to_t(r1[1]), ref_lse, tol, "paged_attention lse")


def test_matrix_is_the_shared_list(device):
    """The cases come from C++ (the names `pagedattn verify --cases` takes), not a copy."""
    quick = testing.matrix_cases(device, quick=True)
    full = testing.matrix_cases(device)
    names = {c.name for c in full}
    assert len(names) == len(full) > len(quick) > 10
    assert all(math.isfinite(c.scale) and c.scale > 0 for c in full)


def test_run_case_binding(device):
    """The C++ harness itself on the smallest quick cases, through the binding: the same
    configurations pass there (writer bit-exact, attention within budget)."""
    cases = sorted(testing.matrix_cases(device, quick=True),
                   key=lambda c: sum(c.seq_lens) * c.num_heads * c.head_size)[:3]
    for c in cases:
        r = testing.run_case(c)
        assert r["pass"] and r["writer_exact"], f"{c.name}: {r['detail']}"
        assert r["elements_checked"] > 0 and r["worst_ratio"] <= 1.0
