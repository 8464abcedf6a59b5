"""pytest set-up of the Python suite.

    python -m pytest tests/python                 # CPU tensors (numpy and torch)
    python -m pytest tests/python --device cuda   # the same suite on CUDA tensors (+ graphs)

Tests marked `cuda` need a GPU and skip without one; the matrix tests take their cases from
the shared C++ list (pagedattn._C.testing.matrix_cases).
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", choices=("cpu", "cuda"),
                     help="device of the tensors the suite runs on (default cpu)")
    parser.addoption("--full-matrix", action="store_true",
                     help="every case of the matrix instead of the quick subset")


def _cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skips without one)")


def pytest_collection_modifyitems(config, items):
    need_gpu = config.getoption("--device") == "cuda"
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords or need_gpu:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device(request):
    """The device of the suite: "cpu" or "cuda"."""
    return request.config.getoption("--device")
