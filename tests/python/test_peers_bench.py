"""The peers bench's CPU-side paths (bench/peers, issue 22) without a GPU and without the peers:
the smoke test (the data, metadata and oracle check at small scale, pagedattn's CPU backend and
SDPA's math backend, and a perturbed output that must fail the check), the whole run's
bookkeeping on the CPU (table, JSON, targets, a peer that cannot run listed with its reason) and
the dense reference of FlashInfer's module check."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
RUN = os.path.join(PEERS, "run_peers.py")
CLI = os.environ.get("PAGEDATTN_CLI",
                     os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "pagedattn"))

torch = pytest.importorskip("torch")
needs_cli = pytest.mark.skipif(not os.path.exists(CLI), reason=f"no pagedattn CLI at {CLI}")


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, RUN, "--cli", CLI, *args], capture_output=True,
                          text=True, timeout=timeout)


@needs_cli
def test_cpu_smoke_passes_and_catches_a_wrong_output():
    p = _run("--cpu-smoke", "--workloads", "W4,T-conv-mixed,W1-fp8,W1-h512,P-chunks")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cpu smoke: 0 failures" in p.stdout
    # Every workload ran through both libraries, or says why not (SDPA: no fp8, ragged).
    for name in ("W4 ", "T-conv-mixed", "W1-h512", "P-chunks"):
        assert f"{name}" in p.stdout
    assert "n/a: no fp8_e4m3 K/V in SDPA" in p.stdout


@needs_cli
def test_cpu_run_writes_the_table_with_targets_and_reasons(tmp_path):
    js, md = tmp_path / "peers.json", tmp_path / "peers.md"
    p = _run("--device", "cpu", "--workloads", "W7", "--peers",
             "pagedattn,sdpa-math,flashinfer-fa2", "--iters", "2", "--warmup", "0",
             "--json", str(js), "--md", str(md))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(js.read_text())
    assert doc["complete"] is True
    (row,) = doc["results"]
    assert row["impls"]["pagedattn"]["status"] == "ok"
    assert row["impls"]["sdpa-math"]["status"] == "ok"
    # FlashInfer is CUDA only (or not installed): listed as n/a with its reason, not timed.
    fi = row["impls"]["flashinfer-fa2"]
    assert fi["status"] == "n/a" and fi["reason"]
    assert "median_us" not in fi
    assert row["best_peer"] == "sdpa-math" and row["ratio"] > 0
    text = md.read_text()
    assert "Targets (ratio ≥ 1.05 on decode" in text
    assert "- W7 / flashinfer-fa2: n/a:" in text
    # The table again from the JSON alone (the plot's fallback path on another machine).
    md2 = tmp_path / "again.md"
    p = subprocess.run([sys.executable, RUN, "--from-json", str(js), "--md", str(md2)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert md2.read_text() == text


def test_flashinfer_check_reference_matches_sdpa():
    sys.path.insert(0, PEERS)
    from peers_fi_jit import dense_reference
    F = torch.nn.functional
    g = torch.Generator().manual_seed(3)
    H, KVH, hd, bs, ql = 8, 2, 16, 4, 3
    lens = [9, 4, 13]
    pages = [(s + bs - 1) // bs for s in lens]
    n = sum(pages) + 2
    perm = torch.randperm(n, generator=g)[:sum(pages)].int()
    k = torch.randn(n, bs, KVH, hd, generator=g)
    v = torch.randn(n, bs, KVH, hd, generator=g)
    indptr = torch.tensor([0] + torch.tensor(pages).cumsum(0).tolist())
    q = torch.randn(len(lens) * ql, H, hd, generator=g)
    ref = dense_reference(q, k, v, perm, indptr, lens, ql, 0.3)
    for i, s in enumerate(lens):
        idx = perm[int(indptr[i]):int(indptr[i + 1])].long()
        ks = k[idx].reshape(-1, KVH, hd)[:s].permute(1, 0, 2)
        vs = v[idx].reshape(-1, KVH, hd)[:s].permute(1, 0, 2)
        qs = q[i * ql:(i + 1) * ql].permute(1, 0, 2)
        mask = torch.ones(ql, s, dtype=torch.bool).tril(s - ql)  # bottom-right causal
        want = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=0.3,
                                              enable_gqa=True).permute(1, 0, 2)
        torch.testing.assert_close(ref[i * ql:(i + 1) * ql], want, rtol=1e-5, atol=1e-5)
    # An fp8 cache goes through the same path (fp8 tensors have no gather of their own).
    f8 = dense_reference(q, k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn), perm,
                         indptr, lens, ql, 0.3)
    assert torch.isfinite(f8).all() and not torch.equal(f8, ref)
