"""Checks of the peers bench's bookkeeping that need neither torch nor a GPU nor the peers
(run_peers.py --self-test runs them after the workload checks; ctest runs --self-test):
ninja's log parsing and the per-module compile times, the packing of built FlashInfer modules
and their staging into the carry folder, resuming a stopped build from its packed compiles, FlashInfer's fa3 refusals, the table's ratios,
target lines and notes, and the arguments and rows of a run continued after a broken CUDA
context."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import types

import peers_pack
from peers_fi_jit import (fa3_refusal, module_times, pack, pack_partial, read_ninja_log,
                          restore_partial)
from peers_workloads import Workload


def _check_ninja_log(d: str, fails: list):
    path = os.path.join(d, ".ninja_log")
    with open(path, "w") as f:
        f.write("# ninja log v6\n"
                "0\t15000\t1\t/j/modA/a.o\tdeadbeef\n"
                "100\t2100\t1\t/j/modA/b.o\tdeadbeef\n"
                "not a line\n"
                "0\t500\t1\t/j/modB/c.o\tdeadbeef\n"
                "2000\t32000\t1\t/j/modA/a.o\tfeedf00d\n")  # a rebuild: the later line counts
    log = read_ninja_log(path)
    if log != {"/j/modA/a.o": 30.0, "/j/modA/b.o": 2.0, "/j/modB/c.o": 0.5}:
        fails.append(f"read_ninja_log: {log}")
    t = module_times("/j/modA", log)
    if t != {"steps_done": 2, "cpu_s": 32.0, "longest_s": 30.0}:
        fails.append(f"module_times: {t}")
    if module_times("/j/mod", log)["steps_done"] != 0:  # a prefix of a name is not its folder
        fails.append("module_times counts another module's steps")
    if read_ninja_log(os.path.join(d, "missing")) != {}:
        fails.append("read_ninja_log of a missing file")


def _check_pack_and_stage(d: str, fails: list):
    built = []
    for name in ("modA", "modB"):
        so = os.path.join(d, name + ".so")
        with open(so, "wb") as f:
            f.write(os.urandom(4000))  # incompressible: each one fills a small bin
        built.append((name, so))
    paths = pack(built, os.path.join(d, "fi"), limit_bytes=5000)
    if [os.path.basename(p) for p in paths] != ["fi_0.tar.xz", "fi_1.tar.xz"]:
        fails.append(f"pack: {paths}")
        return
    members = set()
    for p in paths:
        with tarfile.open(p) as t:
            members |= set(t.getnames())
    want = {f"flashinfer/data/aot/{n}/{n}.so" for n in ("modA", "modB")}
    if members != want:
        fails.append(f"pack: members {sorted(members)}")
    carry = os.path.join(d, "carry")
    os.makedirs(carry)
    ns = argparse.Namespace(carry=carry, limit_mb=48, files=[paths[0]])
    if peers_pack.add_aot(ns) != 0:
        fails.append("add_aot: first archive")
    ns.files = [paths[0], paths[1]]  # the first is carried already: skipped
    if peers_pack.add_aot(ns) != 0:
        fails.append("add_aot: second archive")
    staged = sorted(os.listdir(carry))
    if staged != ["flashinfer_aot_0.tar.xz", "flashinfer_aot_1.tar.xz"]:
        fails.append(f"add_aot: staged {staged}")
    ns.limit_mb = 0.001  # over the limit: exit status 1
    ns.files = [paths[1]]
    if peers_pack.add_aot(ns) != 1:
        fails.append("add_aot: a carry over the limit passed")


def _check_resume(d: str, fails: list):
    """A build stopped half-way, packed, and restored on a 'fresh machine' (the same paths):
    ninja must then run only the compiles that had not finished, and the link."""
    if not shutil.which("ninja"):
        return
    base = os.path.join(d, "ws")
    jit, gen, hdr = os.path.join(base, "cached_ops"), os.path.join(base, "generated", "m"), \
        os.path.join(d, "h.h")

    def fresh():
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.join(jit, "m"))
        os.makedirs(gen)
        with open(hdr, "w") as f:
            f.write("h")
        os.utime(hdr, (0, 0))  # like the headers unpacked from the carried FlashInfer tarball
        for i in range(4):
            with open(os.path.join(gen, f"f{i}.cu"), "w") as f:
                f.write(f"src {i}")
        objs = " ".join(f"{jit}/m/f{i}.o" for i in range(4))
        with open(os.path.join(jit, "m", "build.ninja"), "w") as f:
            f.write("rule cc\n  command = sleep $d; cat $in > $out; "
                    f"echo \"$out: $in {hdr}\" > $out.d\n  depfile = $out.d\n  deps = gcc\n" +
                    "".join(f"build {jit}/m/f{i}.o: cc {gen}/f{i}.cu\n  d = {0 if i < 2 else 60}\n"
                            for i in range(4)) + f"build {jit}/m/m.so: cc {objs}\n  d = 0\n")
        with open(os.path.join(jit, "top.ninja"), "w") as f:
            f.write(f"subninja {jit}/m/build.ninja\n")
    fresh()
    p = subprocess.Popen(["ninja", "-k", "0", "-j", "4", "-C", jit, "-f", "top.ninja"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    t_end = time.time() + 20
    while time.time() < t_end and len(read_ninja_log(os.path.join(jit, ".ninja_log"))) < 2:
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGTERM)
    p.wait()
    log = read_ninja_log(os.path.join(jit, ".ninja_log"))
    spec = types.SimpleNamespace(build_dir=os.path.join(jit, "m"),
                                 ninja_path=os.path.join(jit, "m", "build.ninja"), name="m")
    part = os.path.join(d, "p-partial.tar.xz")
    if sorted(os.path.basename(k) for k in log) != ["f0.o", "f1.o"] or \
            not pack_partial([spec], jit, log, part):
        fails.append(f"resume: the stopped build recorded {sorted(log)}")
        return
    shutil.rmtree(base)
    restore_partial([part], jit)
    os.makedirs(os.path.join(jit, "m"), exist_ok=True)
    with open(os.path.join(jit, "top.ninja"), "w") as f:
        f.write(f"subninja {jit}/m/build.ninja\n")
    q = subprocess.run(["ninja", "-n", "-C", jit, "-f", "top.ninja"], capture_output=True,
                       text=True)
    todo = [ln for ln in q.stdout.splitlines() if ln.startswith("[")]
    if len(todo) != 3 or any("f0.cu" in ln or "f1.cu" in ln for ln in todo):
        fails.append(f"resume: ninja would run {len(todo)} steps: {todo}")


def _check_fa3_rules(fails: list):
    w = Workload("x", "config", "", [64], [1])
    if fa3_refusal(w) is not None:
        fails.append("fa3_refusal refuses bf16 head 128")
    if "fp8" not in (fa3_refusal(Workload("x", "config", "", [64], [1],
                                          kv_dtype="fp8_e4m3")) or ""):
        fails.append("fa3_refusal: an fp8 cache with a bf16 query")
    if "80" not in (fa3_refusal(Workload("x", "config", "", [64], [1], head_size=80)) or ""):
        fails.append("fa3_refusal: head 80")


def _check_table(fails: list):
    import run_peers as rp

    def ok(us):
        return {"status": "ok", "median_us": us, "pct_of_ceiling": 50.0, "tflops": 100.0}
    rows = [
        {"name": "D1", "group": "standard", "impls": {
            "pagedattn": ok(100.0), "flashinfer-fa2": ok(104.0),
            "flashinfer-fa3": {"status": "n/a", "reason": "fa3 has head sizes 64"}}},
        {"name": "P1", "group": "prefill", "impls": {
            "pagedattn": ok(50.0), "flashinfer-fa2": ok(50.0), "flashinfer-fa3": ok(80.0)}},
        {"name": "D2", "group": "standard", "impls": {
            "pagedattn": {"status": "wrong", "reason": "x"}, "flashinfer-fa2": ok(10.0),
            "flashinfer-fa3": ok(40.0)}},
    ]
    for r in rows:
        rp.finish_row(r)
    if abs(rows[0].get("ratio", 0) - 1.04) > 1e-9 or rows[0].get("best_peer") != "flashinfer-fa2":
        fails.append(f"finish_row: {rows[0].get('ratio')} {rows[0].get('best_peer')}")
    if "ratio" in rows[2] or rows[2].get("best_peer") != "flashinfer-fa2":
        fails.append("finish_row: a ratio without a timed pagedattn")
    doc = {"device": "test", "read_ceiling_gbps": 1000.0, "iters": 1, "l2_flush": "clean",
           "versions": {}, "peers": ["pagedattn", "flashinfer-fa2", "flashinfer-fa3"],
           "results": rows, "command": "cmd"}
    lines = rp.target_lines(doc)
    if len(lines) != 2 or "misses" not in lines[0] or "1.05" not in lines[0] or \
            "met" not in lines[1]:
        fails.append(f"target_lines: {lines}")
    md = rp.markdown(doc)
    for want in ("| D1 | 100.0 (50.0%) | 104.0 (50.0%) | n/a |", "| P1 | 50.0 (100 TF/s)",
                 "- D1 / flashinfer-fa3: n/a: fa3 has head sizes 64", "- D2 / pagedattn: wrong",
                 rp.FA3_DECODE_NOTE, "Command: `cmd`"):
        if want not in md:
            fails.append(f"markdown lacks {want[:60]!r}")


def _check_restart(fails: list):
    """A run that continues in a new process after a broken CUDA context."""
    import run_peers as rp
    got = rp.resume_argv(["--cli", "b/p", "--resume", "old.json", "--json", "o.json",
                          "--resume=x.json"], "o.json")
    if got != ["--cli", "b/p", "--json", "o.json", "--resume", "o.json"]:
        fails.append(f"resume_argv: {got}")
    if not rp.pending(None) or not rp.pending({"name": "W", "impls": {"pagedattn": {}}}):
        fails.append("pending: a row not reached or stopped half-way is not pending")
    if rp.pending({"name": "W", "done": True}) or rp.pending({"name": "W", "error": "data"}):
        fails.append("pending: a finished row is pending")
    doc = {"device": "test", "read_ceiling_gbps": 1000.0, "iters": 1, "l2_flush": "clean",
           "versions": {}, "peers": ["pagedattn"], "results": [], "command": "cmd",
           "restarts": 1}
    if "broke the CUDA context 1 time(s)" not in rp.markdown(doc):
        fails.append("markdown: no word of the restart")


def offline_checks() -> list:
    """The failures (empty: all passed)."""
    fails = []
    with tempfile.TemporaryDirectory() as d:
        _check_ninja_log(d, fails)
        _check_pack_and_stage(d, fails)
    with tempfile.TemporaryDirectory() as d:
        _check_resume(d, fails)
    _check_fa3_rules(fails)
    _check_table(fails)
    _check_restart(fails)
    return fails
