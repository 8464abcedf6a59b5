"""current_platform for a CUDA machine: the queries the attention module makes."""
import torch


class _CudaPlatform:
    def is_cuda(self):
        return True

    def is_rocm(self):
        return False

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def get_device_capability(self):
        return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)

    def is_device_capability(self, cap):
        return tuple(self.get_device_capability()) == tuple(cap)

    def is_device_capability_family(self, family):
        # family 100 = compute capability 10.x, as vLLM spells it.
        major, minor = self.get_device_capability()
        return (major * 10 + minor) // 10 == family // 10

    def has_device_capability(self, cap):
        if isinstance(cap, int):
            major, minor = divmod(cap, 10)
            cap = (major, minor)
        return tuple(self.get_device_capability()) >= tuple(cap)

    def num_compute_units(self):
        return torch.cuda.get_device_properties(0).multi_processor_count


current_platform = _CudaPlatform()
