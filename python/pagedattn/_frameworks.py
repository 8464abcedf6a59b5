"""Framework glue: hand arrays to the extension, allocate outputs in the caller's framework,
name dtypes the library's way, find the caller's CUDA stream.

Any object with ``__dlpack__`` is accepted. torch tensors go through ``torch._C._to_dlpack``
(a DLPack capsule without ``Tensor.__dlpack__``'s Python-level checks, several microseconds
per tensor: see bench/python_overhead.py); numpy arrays through the buffer protocol; other
objects through their ``__dlpack__``.
"""

from __future__ import annotations

import numpy as np

try:  # torch is optional: the package imports and runs on numpy without it
    import torch as _torch
except ImportError:  # pragma: no cover - exercised only where torch is absent
    _torch = None

torch = _torch
_Tensor = _torch.Tensor if _torch is not None else ()
_to_dlpack = _torch._C._to_dlpack if _torch is not None else None

# Library dtype names (include/pagedattn/tensor.h to_string(DType)) of framework dtypes.
_NAMES: dict = {
    np.dtype(np.float32): "fp32",
    np.dtype(np.float16): "fp16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
}
_NP_OF = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "int64": np.int64}
_TORCH_OF: dict = {}
if _torch is not None:
    _TORCH_OF = {
        "fp32": _torch.float32,
        "fp16": _torch.float16,
        "bf16": _torch.bfloat16,
        "fp8_e4m3": _torch.float8_e4m3fn,
        "fp8_e5m2": _torch.float8_e5m2,
        "int32": _torch.int32,
        "int64": _torch.int64,
    }
    _NAMES.update({v: k for k, v in _TORCH_OF.items()})
for _k, _v in list(_NP_OF.items()):
    _NAMES[_v] = _k  # the numpy scalar types themselves (np.float16)
for _k in ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int32", "int64"):
    _NAMES[_k] = _k


def is_torch(x) -> bool:
    return isinstance(x, _Tensor)


def check_array(x, name: str):
    """TypeError naming the argument unless `x` is an array the extension can import."""
    if isinstance(x, (np.ndarray, _Tensor)) or hasattr(x, "__dlpack__"):
        return
    raise TypeError(f"{name}: expected a tensor or array (an object with __dlpack__), got "
                    f"{type(x).__name__}")


def arg(x, name: str):
    """What the extension receives for array `x` (a capsule for torch tensors)."""
    if isinstance(x, _Tensor):
        return _to_dlpack(x)
    if isinstance(x, np.ndarray):
        return x
    check_array(x, name)
    return x


def opt_arg(x, name: str):
    return None if x is None else arg(x, name)


def dtype_name(dtype, name: str = "dtype") -> str:
    """The library's name of a framework dtype or of a name ("fp16", "float16").
    NotImplementedError (the library's "unsupported") for dtypes it has no use for."""
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, str):
        if _torch is not None and hasattr(_torch, dtype):
            return dtype_name(getattr(_torch, dtype))
        try:
            return dtype_name(np.dtype(dtype))
        except TypeError:
            pass
    try:
        return _NAMES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise NotImplementedError(f"{name}: dtype {dtype} has no pagedattn equivalent (fp32, "
                                  f"fp16, bf16, fp8_e4m3, fp8_e5m2, int32, int64)") from None


def device_of(x) -> str:
    """"cpu" or "cuda:N" for an array."""
    if isinstance(x, _Tensor):
        d = x.device
        return "cpu" if d.type == "cpu" else f"{d.type}:{d.index or 0}"
    if isinstance(x, np.ndarray):
        return "cpu"
    dev = x.__dlpack_device__()
    return "cpu" if int(dev[0]) in (1, 3) else f"cuda:{int(dev[1])}"  # kDLCPU, kDLCUDAHost


def empty(like, shape, dtype: str):
    """An uninitialised array of library dtype `dtype` in the framework and on the device of
    `like` (torch in, torch out; numpy in, numpy out; cupy and other array modules with
    `empty` through that module)."""
    if isinstance(like, _Tensor):
        return _torch.empty(shape, dtype=_TORCH_OF[dtype], device=like.device)
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=_NP_OF[dtype])
    import importlib

    mod = importlib.import_module(type(like).__module__.split(".")[0])
    if not hasattr(mod, "empty"):
        raise TypeError(f"cannot allocate an output for a {type(like).__name__}: pass out=")
    return mod.empty(shape, dtype=getattr(mod, {"fp32": "float32", "fp16": "float16",
                                                 "bf16": "bfloat16"}.get(dtype, dtype)))


def empty_on(device: str, shape, dtype: str, prefer_torch: bool):
    """An array on `device` ("cpu", "cuda:N"): torch when asked for or for CUDA memory,
    numpy otherwise."""
    if prefer_torch or device != "cpu":
        if _torch is None:
            raise RuntimeError(f"allocating on {device} needs torch (pip install torch)")
        return _torch.empty(shape, dtype=_TORCH_OF[dtype], device=device)
    return np.empty(shape, dtype=_NP_OF[dtype])


def to_host(x):
    """`x` itself when on the CPU, else a host copy (torch: .cpu(); others via __dlpack__)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, _Tensor):
        return x if x.device.type == "cpu" else x.cpu()
    if device_of(x) == "cpu":
        return x
    get = getattr(x, "get", None)  # cupy
    if get is None:
        raise TypeError(f"{type(x).__name__} on a GPU: pass host copies of the metadata")
    return get()


def to_device(x, device: str, like_torch: bool):
    """A copy of host array `x` on `device` (the CPU: `x` itself)."""
    if device == "cpu":
        return x
    if _torch is None:
        raise RuntimeError(f"copies to {device} need torch (pip install torch)")
    t = x if isinstance(x, _Tensor) else _torch.from_dlpack(x)
    return t.to(device)


def stream_of(x) -> int:
    """The caller's current CUDA stream for `x`'s device as an integer (0 for CPU arrays:
    ignored there)."""
    if isinstance(x, _Tensor):
        if x.device.type == "cpu":
            return 0
        return _torch.cuda.current_stream(x.device).cuda_stream
    if isinstance(x, np.ndarray):
        return 0
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0
