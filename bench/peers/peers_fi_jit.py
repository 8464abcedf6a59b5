"""FlashInfer's attention modules for the peers bench (bench/peers/run_peers.py): which modules a
run needs, building them all in one ninja run with a deadline, the per-file compile times from
ninja's log, packing the built libraries for the next call, and a small check of each module
against a dense PyTorch reference.

FlashInfer compiles one module per (backend, query dtype, KV dtype, head size) on first use
(flashinfer.jit); the tensor-core decode wrapper and the paged prefill wrapper both run the
batch-prefill module. A module is 10 CUDA files (paged and ragged kernels for 4 mask modes, the
host code, the binding) and one link. Building them one module at a time (FlashInfer's own
first-use path) leaves cores idle at each module's tail, so `prebuild` writes each module's
ninja file through FlashInfer's JitSpec (the same files and flags FlashInfer's own build uses)
and runs them under one top-level ninja file with `subninja` (as flashinfer.jit.build_jit_specs
does), with `-k 0` so that one module that fails to compile does not stop the others, and with
a deadline after which the remaining compiles are stopped and what was built is packed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

from peers_workloads import Workload, torch_dtype

#: FlashInfer's fa3 (SM90) prefill kernels: these head sizes only (flashinfer/utils.py
#: is_fa3_prefill_head_dim_supported), and an fp8 cache only with an fp8 query.
FA3_HEAD_SIZES = (64, 128, 256)


def fa3_refusal(w: Workload):
    """Why FlashInfer's fa3 backend cannot run `w` (None when it can)."""
    if w.kv_dtype != w.dtype:
        return "fa3 reads an fp8 cache only with an fp8 query"
    if w.head_size not in FA3_HEAD_SIZES:
        return f"fa3 has head sizes 64, 128, 256 (not {w.head_size})"
    return None


def module_args(w: Workload, backend: str) -> tuple:
    """The (backend, *args) of flashinfer.prefill.get_batch_prefill_module that the wrappers in
    peers_impls.FlashInfer ask for on `w`: query/KV/output dtypes, int32 indices, head size
    (QK = VO), no positional encoding, no sliding window, no soft cap, fp32 QK."""
    import torch
    return (backend, torch_dtype(w.dtype), torch_dtype(w.kv_dtype), torch_dtype(w.dtype),
            torch.int32, w.head_size, w.head_size, 0, False, False, False)


def module_label(args: tuple) -> str:
    """'fa2 bf16/fp8_e4m3 h128' for the module of `args`."""
    names = {v: k for k, v in _dtype_names().items()}
    return f"{args[0]} {names.get(args[1], args[1])}/{names.get(args[2], args[2])} h{args[5]}"


def _dtype_names() -> dict:
    torch_dtype("bf16")  # fills the table
    from peers_workloads import _TORCH_DTYPES
    return dict(_TORCH_DTYPES)


def spec(args: tuple):
    """FlashInfer's JitSpec of the module `args` (the one get_batch_prefill_module loads: for
    fa2 its equal-stride primary module, for fa3 the public module)."""
    from flashinfer.jit.attention import modules as m
    backend, *rest = args
    gen = m._gen_batch_prefill_primary_module if backend == "fa2" else \
        m.gen_batch_prefill_module
    return gen(backend, *rest)


def module_ready(args: tuple) -> tuple:
    """(prebuilt or already compiled, module name)."""
    s = spec(args)
    return s.is_aot or s.jit_library_path.exists(), s.name


def wanted_modules(workloads: list, backends: list) -> list:
    """The distinct module args that `backends` ('fa2', 'fa3') need on `workloads`, in order;
    fa3 is left out where FlashInfer's fa3 cannot run the workload (the run says why)."""
    out = []
    for w in workloads:
        for be in backends:
            if be == "fa3" and fa3_refusal(w):
                continue
            a = module_args(w, be)
            if a not in out:
                out.append(a)
    return out


# ----------------------------------------------------------------------------- ninja's log
def read_ninja_log(path: str) -> dict:
    """{output path: seconds} of ninja's .ninja_log (tab-separated: start ms, end ms, mtime,
    output, hash; a later line for the same output replaces an earlier one)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            try:
                out[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000.0
            except ValueError:
                continue
    return out


def read_ninja_log_mtimes(path: str) -> dict:
    """{output path: the output's time as ninja recorded it} (.ninja_log's third field; ns in
    log v7)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if line.startswith("#") or len(parts) < 4:
                continue
            try:
                out[parts[3]] = int(parts[2])
            except ValueError:
                continue
    return out


def module_times(build_dir: str, log: dict) -> dict:
    """The compile steps of one module's build folder in `log`: count, summed and longest
    seconds (the link included)."""
    prefix = build_dir.rstrip("/") + "/"
    secs = [s for p, s in log.items() if p.startswith(prefix)]
    return {"steps_done": len(secs), "cpu_s": round(sum(secs), 1),
            "longest_s": round(max(secs), 1) if secs else 0.0}


def pack(built: list, out_prefix: str, limit_bytes: float = 15e6) -> list:
    """Pack (name, .so path) pairs as flashinfer/data/aot/<name>/<name>.so (FlashInfer's AOT
    location, so that the next call loads them instead of compiling) into
    <out_prefix>_<k>.tar.xz archives of at most `limit_bytes` each (greedy by size: the device
    returns files of up to 16 MiB). Returns the archive paths."""
    import lzma
    sized = []
    for name, path in built:
        with open(path, "rb") as fh:
            sized.append((len(lzma.compress(fh.read(), preset=3)), name, path))
    bins = []
    for size_b, name, path in sorted(sized, reverse=True):
        for b in bins:
            if b[0] + size_b <= limit_bytes:
                b[0] += size_b
                b[1].append((name, path))
                break
        else:
            bins.append([size_b, [(name, path)]])
    paths = []
    for k, (_, members) in enumerate(bins):
        out = f"{out_prefix}_{k}.tar.xz"
        with tarfile.open(out, "w:xz", preset=3) as t:
            for name, path in members:
                t.add(path, arcname=f"flashinfer/data/aot/{name}/{name}.so")
        print(f"prebuild: {len(members)} modules -> {out} ({os.path.getsize(out) / 1e6:.1f} MB)",
              flush=True)
        paths.append(out)
    return paths


def _stop(proc: subprocess.Popen):
    """Stop ninja and its compilers (their own process group): TERM lets ninja record what
    finished and remove half-written outputs; KILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def restore_partial(paths: list, jit_dir: str) -> int:
    """Unpack partial builds (pack_partial's archives) next to FlashInfer's JIT folder, so that
    ninja finds the compiles already done (their objects, ninja's log and deps records, the
    generated sources with their old times) and runs only the rest. Returns the objects
    restored. Best effort: anything ninja finds out of date it compiles again."""
    base = os.path.dirname(jit_dir.rstrip("/"))
    n = 0
    for p in paths:
        with tarfile.open(p) as t:
            n += sum(m.name.endswith(".o") for m in t.getmembers())
            try:
                t.extractall(base, filter="data")
            except TypeError:  # a Python without extraction filters
                t.extractall(base)
        print(f"prebuild: resumed {p} ({n} objects so far)", flush=True)
    # tar keeps times to about a microsecond; ninja compares the objects' times with the
    # nanoseconds it recorded (an object newer than its record is compiled again): give each
    # restored output its recorded time.
    for out, mtime_ns in read_ninja_log_mtimes(os.path.join(jit_dir, ".ninja_log")).items():
        if mtime_ns > 0 and os.path.exists(out):
            os.utime(out, ns=(mtime_ns, mtime_ns))
    return n


def pack_partial(unfinished: list, jit_dir: str, log: dict, out: str) -> bool:
    """For the modules (JitSpecs) that did not finish: their compiled objects (those ninja's
    log records as done), build files and generated sources, and ninja's log and deps records,
    relative to the JIT folder's parent, into `out` (.tar.xz) for restore_partial() in a later
    call. False when there is nothing to carry."""
    base = os.path.dirname(jit_dir.rstrip("/"))
    files = []
    for s in unfinished:
        bdir = str(s.build_dir)
        done = [p for p in log if p.startswith(bdir + "/") and os.path.exists(p)]
        if not done:
            continue
        files += done + [p + ".d" for p in done if os.path.exists(p + ".d")]
        files.append(str(s.ninja_path))
        gen = os.path.join(base, "generated", s.name)
        if os.path.isdir(gen):
            files += [os.path.join(gen, f) for f in sorted(os.listdir(gen))]
    if not files:
        return False
    files += [os.path.join(jit_dir, f) for f in (".ninja_log", ".ninja_deps")
              if os.path.exists(os.path.join(jit_dir, f))]
    with tarfile.open(out, "w:xz", preset=3) as t:
        for f in files:
            t.add(f, arcname=os.path.relpath(f, base))
    print(f"prebuild: {sum(f.endswith('.o') for f in files)} compiled objects of unfinished "
          f"modules -> {out} ({os.path.getsize(out) / 1e6:.1f} MB; carry it as "
          f".peers/carry/flashinfer_partial.tar.xz to resume)", flush=True)
    return True


def prebuild(workloads: list, backends: list, out_prefix: str, jobs: int, deadline_s: float,
             smoke: bool = True, resume: list = ()) -> int:
    """Build every FlashInfer module that `backends` need on `workloads` and that is neither
    prebuilt nor already compiled, `jobs` compiles at once in one ninja run, after restoring
    the partial builds `resume` (restore_partial); stop at `deadline_s` seconds; pack what was
    built this time with pack() (nothing when nothing was built) and, for modules that did not
    finish, their finished compiles as <out_prefix>_partial.tar.xz (pack_partial); write
    <out_prefix>_times.json (per module: built, compile steps done, summed and longest compile
    seconds; the cores, jobs, load average and wall time); with `smoke` and a GPU, check each
    needed module with smoke_check(). Exit status 0 iff every needed module is available (and
    passed the check)."""
    from flashinfer.jit import env as jit_env
    t_start = time.time()
    if resume:
        restore_partial(list(resume), str(jit_env.FLASHINFER_JIT_DIR))
    wanted = wanted_modules(workloads, backends)
    specs = [(a, spec(a)) for a in wanted]
    todo = [(a, s) for a, s in specs if not (s.is_aot or s.jit_library_path.exists())]
    cores = os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    print(f"prebuild: {len(wanted)} FlashInfer modules needed, {len(wanted) - len(todo)} "
          f"prebuilt or cached, {len(todo)} to build ({10 * len(todo)} CUDA files + "
          f"{len(todo)} links), {jobs} compiles at once on {cores} cores (load {load0:.1f})",
          flush=True)
    for a, _ in todo:
        print(f"  to build: {module_label(a)}", flush=True)
    jit_dir = str(jit_env.FLASHINFER_JIT_DIR)
    os.makedirs(jit_dir, exist_ok=True)
    ninja_out = f"{out_prefix}_ninja.log"
    rc, timed_out = 0, False
    if todo:
        for _, s in todo:
            s.write_ninja()
        top = os.path.join(jit_dir, "peers_prebuild.ninja")
        with open(top, "w") as f:
            f.write("ninja_required_version = 1.3\n" +
                    "".join(f"subninja {s.ninja_path}\n" for _, s in todo))
        cmd = ["ninja", "-k", "0", "-j", str(jobs), "-C", jit_dir, "-f", top]
        with open(ninja_out, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=max(1.0, deadline_s - (time.time() - t_start)))
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(proc)
                rc = 124
    wall = time.time() - t_start
    log = read_ninja_log(os.path.join(jit_dir, ".ninja_log"))
    report = {"cores": cores, "jobs": jobs, "load_before": round(load0, 2),
              "load_after": round(os.getloadavg()[0], 2), "wall_s": round(wall, 1),
              "deadline_s": deadline_s, "timed_out": timed_out, "ninja_rc": rc, "modules": []}
    built = []
    todo_names = {s.name for _, s in todo}
    for a, s in specs:
        was_ready = s.name not in todo_names
        ok = s.is_aot or s.jit_library_path.exists()
        m = {"module": module_label(a), "name": s.name, "prebuilt": was_ready, "ready": ok}
        if not was_ready:
            m.update(module_times(str(s.build_dir), log))
            if ok:
                built.append((s.name, str(s.jit_library_path)))
        report["modules"].append(m)
        state = ("prebuilt" if was_ready else
                 f"built: {m['steps_done']} steps, {m['cpu_s']:.0f} compile-s, longest "
                 f"{m['longest_s']:.0f} s" if ok else
                 f"NOT built ({m['steps_done']} of 11 steps done)")
        print(f"  {module_label(a):24s} {state}", flush=True)
    total_cpu = sum(m.get("cpu_s", 0.0) for m in report["modules"])
    print(f"prebuild: {len(built)} built in {wall:.0f} s wall ({total_cpu:.0f} compile-s in all"
          f"{', DEADLINE' if timed_out else ''}; ninja exit {rc}); "
          f"{sum(m['ready'] for m in report['modules'])} of {len(specs)} modules ready",
          flush=True)
    if rc not in (0, 124) and os.path.exists(ninja_out):
        with open(ninja_out) as f:  # the first compile errors, for the log
            lines = [ln.rstrip() for ln in f if "error" in ln or ln.startswith("FAILED")]
        for ln in lines[:12]:
            print("  ninja: " + ln[:300])
    report["archives"] = pack(built, out_prefix) if built else []
    unfinished = [s for _, s in specs if not (s.is_aot or s.jit_library_path.exists())]
    # "-partial": not a module archive (install and add-aot take PREFIX_<k>.tar.xz as those).
    if unfinished and pack_partial(unfinished, jit_dir, log, f"{out_prefix}-partial.tar.xz"):
        report["archives"].append(f"{out_prefix}-partial.tar.xz")
    # Written before the check too: a caller's time limit that stops the check keeps it.
    with open(f"{out_prefix}_times.json", "w") as f:
        json.dump(report, f, indent=2)
    if smoke:
        # The modules built now first: a caller's time limit cuts the check's tail.
        ready = [(a, s) for a, s in specs if s.is_aot or s.jit_library_path.exists()]
        ready.sort(key=lambda x: x[1].name not in todo_names)
        report["smoke"] = smoke_check([a for a, _ in ready])
        with open(f"{out_prefix}_times.json", "w") as f:
            json.dump(report, f, indent=2)
    bad = [m for m in report["modules"] if not m["ready"]]
    bad_smoke = [r for r in report.get("smoke", []) if r.get("status") == "wrong"]
    return 1 if bad or bad_smoke else 0


# ----------------------------------------------------------------------------- smoke check
def dense_reference(q, k, v, pages, indptr, lens: list, ql: int, scale: float):
    """float32 attention of `ql` query rows per sequence (the last ql positions, bottom-right
    causal) over paged K/V [pages, block, KV heads, head] (NHD); sequence i owns
    pages[indptr[i]:indptr[i+1]] and its first lens[i] tokens. q: [S * ql, H, D]."""
    import torch
    H, kvh, hd = q.shape[1], k.shape[2], k.shape[3]
    k, v = k.float(), v.float()  # (fp8 tensors have no gather)
    ref = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for i, s in enumerate(lens):
        idx = pages[int(indptr[i]):int(indptr[i + 1])].long()
        ks = k[idx].reshape(-1, kvh, hd)[:s].float().repeat_interleave(H // kvh, 1)
        vs = v[idx].reshape(-1, kvh, hd)[:s].float().repeat_interleave(H // kvh, 1)
        qs = q[i * ql:(i + 1) * ql].float()
        logits = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        pos = torch.arange(s, device=q.device)
        qpos = torch.arange(s - ql, s, device=q.device)
        logits.masked_fill_(pos[None, None, :] > qpos[None, :, None], float("-inf"))
        ref[i * ql:(i + 1) * ql] = torch.einsum("hqk,khd->qhd", logits.softmax(-1), vs)
    return ref


def smoke_check(args_list: list) -> list:
    """Each module of `args_list` through FlashInfer's wrappers on a small random paged batch
    (3 sequences of 1..77 tokens, block 16, 32/8 heads, shuffled pages): the tensor-core decode
    (1 query row per sequence) and the causal paged prefill (5 rows ending each sequence),
    compared with a float32 dense reference. A small check that the module loads and computes
    attention, not the bench's oracle check (run_peers.py does that on the real data before
    timing). Returns one dict per (module, path): status ok / wrong / error, max |diff|."""
    try:
        import torch
        import flashinfer
    except Exception as e:  # noqa: BLE001
        print(f"smoke: skipped ({type(e).__name__}: {e})")
        return []
    if not torch.cuda.is_available():
        print("smoke: skipped (no GPU)")
        return []
    dev = "cuda"
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    out = []
    for a in args_list:
        backend, dq, dkv, _, _, hd = a[:6]
        g = torch.Generator(device=dev).manual_seed(7)
        H, KVH, bs = 32, 8, 16
        lens = [77, 16, 33]
        pages = [(s + bs - 1) // bs for s in lens]
        npages = sum(pages) + 3
        perm = torch.randperm(npages, generator=g, device=dev)[:sum(pages)].int()
        k = torch.rand(npages, bs, KVH, hd, generator=g, device=dev) * 2 - 1
        v = torch.rand(npages, bs, KVH, hd, generator=g, device=dev) * 2 - 1
        k, v = k.to(dkv), v.to(dkv)
        indptr = torch.tensor([0] + torch.tensor(pages).cumsum(0).tolist(),
                              dtype=torch.int32, device=dev)
        last = torch.tensor([(s - 1) % bs + 1 for s in lens], dtype=torch.int32, device=dev)
        scale = hd ** -0.5
        for path, ql in (("decode", 1), ("prefill", 5)):
            r = {"module": module_label(a), "path": path}
            try:
                q = (torch.rand(len(lens) * ql, H, hd, generator=g, device=dev) * 2 - 1).to(dq)
                if path == "decode":
                    wr = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                        ws, "NHD", use_tensor_cores=True, backend=backend)
                    wr.plan(indptr, perm, last, H, KVH, hd, bs, pos_encoding_mode="NONE",
                            q_data_type=dq, kv_data_type=dkv, sm_scale=scale)
                else:
                    wr = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD",
                                                                        backend=backend)
                    qo = torch.arange(0, len(lens) + 1, dtype=torch.int32, device=dev) * ql
                    wr.plan(qo, indptr, perm, last, H, KVH, hd, bs, causal=True,
                            pos_encoding_mode="NONE", q_data_type=dq, kv_data_type=dkv,
                            sm_scale=scale)
                got = wr.run(q, (k, v)).float()
                torch.cuda.synchronize()
                ref = dense_reference(q, k, v, perm, indptr, lens, ql, scale)
                diff = (got - ref).abs().max().item()
                tol = 0.02 + 0.02 * ref.abs().max().item()
                r.update(status="ok" if diff <= tol else "wrong", max_abs_diff=diff)
            except Exception as e:  # noqa: BLE001
                r.update(status="error", reason=(type(e).__name__ + ": " +
                                                 (str(e).strip().splitlines() or [""])[0])[:200])
            print(f"smoke: {r['module']:24s} {path:8s} {r['status']}"
                  + (f" max|diff| {r['max_abs_diff']:.2e}" if "max_abs_diff" in r else
                     f" {r.get('reason', '')}"), flush=True)
            out.append(r)
    return out


if __name__ == "__main__":
    sys.exit("peers_fi_jit.py is a module of bench/peers/run_peers.py "
             "(run_peers.py --prebuild-flashinfer PREFIX)")
