#!/usr/bin/env python3
"""Stage, size and install the peer libraries of bench/peers (issue 22), none of whose code is
committed: fetch_peers.sh downloads the wheels into .peers/dl (git-ignored) and calls `stage`,
which writes what the GPU machine needs into .peers/carry; there, `install` unpacks it into a
site folder. Subcommands:

  stage    --dl DIR --carry DIR [--aot FILE]... [--no-jit-sources]
           From the flashinfer-python wheel: its Python package and, unless --no-jit-sources,
           the sources its JIT builds of the attention modules read (data/include, the top-level
           files of data/csrc, CUTLASS's and CCCL's headers, spdlog), as one .tar.xz; the
           apache-tvm-ffi wheel (GPU machine's Python) as is; from the vllm wheel, only
           vllm/v1/attention/ops/triton_unified_attention.py and triton_attention_helpers.py,
           beside the stand-in package bench/peers/vllm_shim; each --aot tarball (FlashInfer
           modules built earlier by `run_peers.py --prebuild-flashinfer`) copied as is.
  add-aot  --carry DIR FILE...: copy FlashInfer module archives (run_peers.py
           --prebuild-flashinfer's PREFIX_<k>.tar.xz, e.g. brought back from a GPU call) into
           DIR as flashinfer_aot_<n>.tar.xz (next free n), without fetching anything; an archive
           whose modules DIR already holds is skipped; PREFIX-partial.tar.xz (the compiles of
           modules that did not finish) becomes DIR/flashinfer_partial.tar.xz, which the next
           prebuild resumes from. Then `size`.
  size     --carry DIR [--limit-mb N]: bytes that travel; exit 1 above the limit.
  install  --carry DIR --site DIR: pip-install the carried wheels into DIR (no index, no
           dependencies), unpack the FlashInfer package and its prebuilt modules there, and
           print the PYTHONPATH to use (DIR and the vllm stand-in).
  host     --dl DIR --carry DIR --site DIR: the same for this machine's Python (its own
           apache-tvm-ffi wheel, fetched by fetch_peers.sh --host), for CPU-side tests.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# vLLM's Triton attention: the kernel module and the one module of helpers it imports; every
# other vllm import it makes is answered by bench/peers/vllm_shim.
VLLM_FILES = ["vllm/v1/attention/ops/triton_unified_attention.py",
              "vllm/v1/attention/ops/triton_attention_helpers.py"]

# What a FlashInfer JIT build of the attention modules reads besides the Python package
# (flashinfer/jit/env.py's include directories): everything else under flashinfer/data
# (the sources of MoE, GEMM, sampling, ... kernels in subfolders of data/csrc) is left out.
_JIT_KEEP = ("flashinfer/data/include/", "flashinfer/data/spdlog/include/",
             "flashinfer/data/cutlass/include/", "flashinfer/data/cutlass/tools/util/include/",
             "flashinfer/data/cccl/cub/", "flashinfer/data/cccl/libcudacxx/include/",
             "flashinfer/data/cccl/thrust/")


def _keep_flashinfer(name: str, jit_sources: bool) -> bool:
    if "/__pycache__/" in name or name.endswith("/"):
        return False
    if name.endswith(".dist-info/RECORD"):
        return False
    if not name.startswith("flashinfer/data/"):
        return name.startswith(("flashinfer/", "flashinfer_python-"))
    if name.endswith(".py"):
        return True
    if not jit_sources:
        return False
    if name.startswith("flashinfer/data/csrc/"):
        return "/" not in name[len("flashinfer/data/csrc/"):]  # top-level files only
    return name.startswith(_JIT_KEEP)


def _one(pattern: str, what: str) -> str:
    found = sorted(glob.glob(pattern))
    if len(found) != 1:
        sys.exit(f"peers_pack: expected one {what} ({pattern}), found {len(found)}: {found}")
    return found[0]


def stage(args):
    os.makedirs(args.carry, exist_ok=True)
    fi_whl = _one(os.path.join(args.dl, "flashinfer_python-*.whl"), "flashinfer-python wheel")
    out = os.path.join(args.carry, "flashinfer.tar.xz")
    stamp_path = os.path.join(args.carry, "flashinfer.stamp")
    stamp = f"{os.path.basename(fi_whl)} jit_sources={not args.no_jit_sources}\n"
    # The xz archive takes minutes on a busy machine: kept when made from the same wheel.
    keep = os.path.exists(out) and os.path.exists(stamp_path) and open(stamp_path).read() == stamp
    # Otherwise a clean carry folder: stale wheels of another version would stop pip there.
    for old in glob.glob(os.path.join(args.carry, "*")):
        if keep and os.path.basename(old) in ("flashinfer.tar.xz", "flashinfer.stamp"):
            continue
        shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)
    if keep:
        print(f"kept {out} ({os.path.getsize(out) / 1e6:.1f} MB, from {stamp.strip()})")
    else:
        n = 0
        with zipfile.ZipFile(fi_whl) as z, tarfile.open(out, "w:xz", preset=6) as t:
            for info in z.infolist():
                if not _keep_flashinfer(info.filename, not args.no_jit_sources):
                    continue
                ti = tarfile.TarInfo(info.filename)
                ti.size = info.file_size
                ti.mode = 0o644
                with z.open(info) as f:
                    t.addfile(ti, f)
                n += 1
        with open(stamp_path, "w") as f:
            f.write(stamp)
        print(f"staged {os.path.basename(fi_whl)}: {n} files -> {out} "
              f"({os.path.getsize(out) / 1e6:.1f} MB)")
    os.makedirs(os.path.join(args.carry, "wheels"))
    for whl in glob.glob(os.path.join(args.dl, "gpu-wheels", "*.whl")):
        shutil.copy(whl, os.path.join(args.carry, "wheels"))
        print(f"staged {os.path.basename(whl)} ({os.path.getsize(whl) / 1e6:.1f} MB)")
    vllm_whl = _one(os.path.join(args.dl, "vllm-*.whl"), "vllm wheel")
    dest = os.path.join(args.carry, "vllm_triton")
    shutil.copytree(os.path.join(HERE, "vllm_shim"), dest,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with zipfile.ZipFile(vllm_whl) as z:
        names = set(z.namelist())
        for f in VLLM_FILES:
            if f not in names:
                sys.exit(f"peers_pack: {os.path.basename(vllm_whl)} has no {f}: the Triton "
                         f"attention moved in this version; pick another (VLLM_VERSION)")
            with z.open(f) as src, open(os.path.join(dest, f), "wb") as dst:
                shutil.copyfileobj(src, dst)
    with open(os.path.join(dest, "SOURCE"), "w") as f:
        f.write(f"{os.path.basename(vllm_whl)}: {' '.join(VLLM_FILES)}\n")
    print(f"staged {os.path.basename(vllm_whl)}: {len(VLLM_FILES)} files -> {dest}")
    for i, aot in enumerate(args.aot or []):
        name = f"flashinfer_aot_{i}.tar.xz"
        shutil.copy(aot, os.path.join(args.carry, name))
        print(f"staged {aot} -> {name} ({os.path.getsize(aot) / 1e6:.1f} MB)")
    return size(argparse.Namespace(carry=args.carry, limit_mb=args.limit_mb))


def _aot_members(path: str) -> set:
    with tarfile.open(path) as t:
        return {m.name for m in t.getmembers() if m.name.endswith(".so")}


def add_aot(args):
    have = set()
    existing = sorted(glob.glob(os.path.join(args.carry, "flashinfer_aot_*.tar.xz")))
    for f in existing:
        have |= _aot_members(f)
    n = 0
    for src in args.files:
        if "partial" in os.path.basename(src):  # run_peers.py's PREFIX-partial.tar.xz
            dest = os.path.join(args.carry, "flashinfer_partial.tar.xz")
            shutil.copy(src, dest)
            print(f"staged {src} -> {dest} (compiles of unfinished modules: the next "
                  f"prebuild resumes them)")
            continue
        members = _aot_members(src)
        if not members:
            sys.exit(f"peers_pack: {src} holds no FlashInfer module (.so)")
        if members <= have:
            print(f"skipped {src}: its {len(members)} modules are carried already")
            continue
        while os.path.exists(os.path.join(args.carry, f"flashinfer_aot_{n}.tar.xz")):
            n += 1
        dest = os.path.join(args.carry, f"flashinfer_aot_{n}.tar.xz")
        shutil.copy(src, dest + ".tmp")  # renamed when complete: a copy taken meanwhile
        os.replace(dest + ".tmp", dest)  # never sees half an archive
        have |= members
        print(f"staged {src} -> {dest} ({len(members)} modules, "
              f"{os.path.getsize(dest) / 1e6:.1f} MB)")
    return size(argparse.Namespace(carry=args.carry, limit_mb=args.limit_mb))


def _tree_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def size(args):
    total = _tree_bytes(args.carry)
    print(f"{args.carry}: {total / 2**20:.1f} MiB to carry (limit {args.limit_mb} MiB with "
          f"the repository tree, ~12 MiB, beside it)")
    if total > args.limit_mb * 2**20:
        print("peers_pack: too large for one device call; carry the FlashInfer prebuilt "
              "modules (flashinfer_aot_*.tar.xz) in a second call, or stage with "
              "--no-jit-sources once every module is prebuilt", file=sys.stderr)
        return 1
    return 0


def _unpack(carry: str, site: str):
    os.makedirs(site, exist_ok=True)
    for tarball in [os.path.join(carry, "flashinfer.tar.xz")] + sorted(
            glob.glob(os.path.join(carry, "flashinfer_aot_*.tar.xz"))):
        if not os.path.exists(tarball):
            sys.exit(f"peers_pack: {tarball} missing: run bench/peers/fetch_peers.sh")
        with tarfile.open(tarball) as t:
            try:
                t.extractall(site, filter="data")
            except TypeError:  # a Python without extraction filters
                t.extractall(site)
    aot = os.path.join(site, "flashinfer", "data", "aot")
    mods = sorted(os.listdir(aot)) if os.path.isdir(aot) else []
    print(f"flashinfer unpacked into {site}; {len(mods)} prebuilt modules")


def install(args):
    wheels = sorted(glob.glob(os.path.join(args.carry, "wheels", "*.whl")))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--no-cache-dir", "--upgrade", "--target", args.site,
                        *wheels], check=True)
    _unpack(args.carry, args.site)
    print("PYTHONPATH=" + os.pathsep.join([os.path.abspath(args.site),
                                           os.path.abspath(os.path.join(args.carry,
                                                                        "vllm_triton"))]))
    return 0


def host(args):
    wheels = sorted(glob.glob(os.path.join(args.dl, "host-wheels", "*.whl")))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--upgrade", "--target", args.site, *wheels], check=True)
    _unpack(args.carry, args.site)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage")
    s.add_argument("--dl", required=True)
    s.add_argument("--carry", required=True)
    s.add_argument("--aot", action="append")
    s.add_argument("--no-jit-sources", action="store_true")
    s.add_argument("--limit-mb", type=float, default=48)
    a = sub.add_parser("add-aot")
    a.add_argument("--carry", required=True)
    a.add_argument("--limit-mb", type=float, default=48)
    a.add_argument("files", nargs="+")
    z = sub.add_parser("size")
    z.add_argument("--carry", required=True)
    z.add_argument("--limit-mb", type=float, default=48)
    i = sub.add_parser("install")
    i.add_argument("--carry", required=True)
    i.add_argument("--site", required=True)
    h = sub.add_parser("host")
    h.add_argument("--dl", required=True)
    h.add_argument("--carry", required=True)
    h.add_argument("--site", required=True)
    args = ap.parse_args()
    return {"stage": stage, "size": size, "install": install, "host": host,
            "add-aot": add_aot}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
