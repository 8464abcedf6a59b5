// CUDA runtime plumbing of the backend: device query, memory, copies, synchronisation, the
// public merge of two attention states, and the test-support entry points of cuda_config.h.
// Every CUDA error becomes Status kInternal with the CUDA error string; "no GPU" becomes
// kDeviceUnavailable.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "src/cuda/backend/cuda_backend.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

namespace {

Status unavailable(const std::string& why) {
  return Status(StatusCode::kDeviceUnavailable, why);
}

struct CachedDevice {
  bool valid = false;
  DeviceInfo info;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::vector<CachedDevice>& device_cache() {
  static std::vector<CachedDevice> v;
  return v;
}

}  // namespace

Result<DeviceInfo> query_device(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear a non-sticky error
    // Without a GPU the runtime reports an "insufficient" driver: say that either may be the
    // cause, since the plain runtime text points at a driver upgrade.
    const std::string why = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                                ? "no NVIDIA driver or GPU found, or the driver is older than "
                                  "this CUDA runtime needs"
                                : cudaGetErrorString(err);
    return unavailable(std::string("no usable CUDA device: ") + why + " (" +
                       cudaGetErrorName(err) + ")");
  }
  if (count == 0) return unavailable("no CUDA device present");
  if (index < 0 || index >= count)
    return unavailable("cuda:" + std::to_string(index) + " requested but " +
                       std::to_string(count) + " CUDA device(s) present");
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto& cache = device_cache();
  if (cache.size() < static_cast<std::size_t>(count)) cache.resize(count);
  if (cache[index].valid) return cache[index].info;
  cudaDeviceProp prop{};
  PA_CUDA_RETURN(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  int optin = 0;
  PA_CUDA_RETURN(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, index),
                 "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  DeviceInfo info;
  info.device = Device::cuda(index);
  info.name = prop.name;
  info.num_units = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.max_shared_memory_per_block = optin;
  info.l2_bytes = prop.l2CacheSize;
  cache[index].info = info;
  cache[index].valid = true;
  return info;
}

cudaError_t device_smem_optin(int device, int* bytes) {
  // Queried at run time (never hard-coded); cheap enough to ask each launch.
  return cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

namespace {

/// The device whose memory `ptr` is (-1 for host or unknown memory: the current device
/// serves).
int owner_device(const void* ptr) {
  cudaPointerAttributes attr{};
  if (ptr == nullptr || cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device
                                                                                 : -1;
}

Status no_device(const char* what) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return unavailable(std::string(what) + ": no CUDA device present");
  }
  return Status::Ok();
}

}  // namespace

Result<void*> device_malloc(std::size_t bytes, int device) {
  PAGEDATTN_RETURN_IF_ERROR(no_device("device_malloc"));
  if (bytes == 0) return static_cast<void*>(nullptr);
  DeviceGuard guard(device);
  PA_CUDA_RETURN(guard.status(), "device_malloc: cudaSetDevice");
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // out-of-memory is not sticky; clear it for later calls
    return cuda_error(err, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
  }
  return p;
}

void device_free(void* ptr) {
  if (!ptr) return;
  DeviceGuard guard(owner_device(ptr));
  (void)cudaFree(ptr);
}

Status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(owner_device(device_dst));
  PA_CUDA_RETURN(guard.status(), "copy_to_device: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy host to device");
  return Status::Ok();
}

Status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(owner_device(device_src));
  PA_CUDA_RETURN(guard.status(), "copy_to_host: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost),
                 "cudaMemcpy device to host");
  return Status::Ok();
}

Status device_synchronize(int device) {
  PAGEDATTN_RETURN_IF_ERROR(no_device("device_synchronize"));
  DeviceGuard guard(device);
  PA_CUDA_RETURN(guard.status(), "device_synchronize: cudaSetDevice");
  PA_CUDA_RETURN(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return Status::Ok();
}

Status copy_device_to_device(void* device_dst, const void* device_src, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(owner_device(device_dst));
  PA_CUDA_RETURN(guard.status(), "copy_device_to_device: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemcpy(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice),
                 "cudaMemcpy device to device");
  return Status::Ok();
}

Status device_memory_info(std::size_t* free_bytes, std::size_t* total_bytes, int device) {
  PAGEDATTN_RETURN_IF_ERROR(no_device("device_memory_info"));
  DeviceGuard guard(device);
  PA_CUDA_RETURN(guard.status(), "device_memory_info: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return Status::Ok();
}

// ------------------------------------------------------------------ merge of two states

namespace {

struct MergeParams {
  const void* a;
  std::int64_t a0, a1;
  const void* b;
  std::int64_t b0, b1;
  void* o;
  std::int64_t o0, o1;
  const float* la;
  std::int64_t la0, la1;
  const float* lb;
  std::int64_t lb0, lb1;
  float* lo;  // may be null
  std::int64_t lo0, lo1;
  std::int64_t num_tokens;
  int num_heads;
  int head_size;
};

/// One warp per (token, head). Each lane reads its elements of out_a/out_b before writing the
/// same elements of out, and lane 0 writes lse_out after the warp's lanes received both LSEs
/// through a shuffle, so `out` may alias out_a or out_b.
template <class T>
__global__ void __launch_bounds__(128) merge_states_kernel(const MergeParams p) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps_total = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  const std::int64_t rows = p.num_tokens * p.num_heads;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) +
                        (threadIdx.x >> 5);
       r < rows; r += warps_total) {
    const std::int64_t t = r / p.num_heads;
    const std::int64_t h = r - t * p.num_heads;
    float la = 0.f, lb = 0.f;
    if (lane == 0) {
      la = p.la[t * p.la0 + h * p.la1];
      lb = p.lb[t * p.lb0 + h * p.lb1];
    }
    la = __shfl_sync(0xFFFFFFFFu, la, 0);
    lb = __shfl_sync(0xFFFFFFFFu, lb, 0);
    const bool a_none = la == -INFINITY, b_none = lb == -INFINITY;
    float wa = 0.f, wb = 0.f, lse = -INFINITY;
    if (!(a_none && b_none)) {
      const float m = fmaxf(la, lb);
      const float ea = a_none ? 0.f : expf(la - m);
      const float eb = b_none ? 0.f : expf(lb - m);
      const float s = ea + eb;
      lse = m + logf(s);
      wa = ea / s;
      wb = eb / s;
    }
    const T* a = static_cast<const T*>(p.a) + t * p.a0 + h * p.a1;
    const T* b = static_cast<const T*>(p.b) + t * p.b0 + h * p.b1;
    T* o = static_cast<T*>(p.o) + t * p.o0 + h * p.o1;
    for (int d = lane; d < p.head_size; d += 32) {
      float v = 0.f;
      if (!a_none) v += wa * to_float<T>(a[d]);
      if (!b_none) v += wb * to_float<T>(b[d]);
      store_rounded<T>(o + d, v);
    }
    if (p.lo && lane == 0) p.lo[t * p.lo0 + h * p.lo1] = lse;
    __syncwarp();
  }
}

}  // namespace

Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out, Stream stream) {
  DeviceGuard guard(out.device.index);
  if (guard.status() != cudaSuccess) return cuda_error(guard.status(), "merge_attention_states: set device");
  MergeParams p{};
  p.a = out_a.data;
  p.a0 = out_a.strides[0];
  p.a1 = out_a.strides[1];
  p.b = out_b.data;
  p.b0 = out_b.strides[0];
  p.b1 = out_b.strides[1];
  p.o = out.data;
  p.o0 = out.strides[0];
  p.o1 = out.strides[1];
  p.la = static_cast<const float*>(lse_a.data);
  p.la0 = lse_a.strides[0];
  p.la1 = lse_a.strides[1];
  p.lb = static_cast<const float*>(lse_b.data);
  p.lb0 = lse_b.strides[0];
  p.lb1 = lse_b.strides[1];
  p.lo = lse_out.defined() ? static_cast<float*>(lse_out.data) : nullptr;
  if (p.lo) {
    p.lo0 = lse_out.strides[0];
    p.lo1 = lse_out.strides[1];
  }
  p.num_tokens = out.shape[0];
  p.num_heads = static_cast<int>(out.shape[1]);
  p.head_size = static_cast<int>(out.shape[2]);
  const std::int64_t rows = p.num_tokens * p.num_heads;
  if (rows == 0) return Status::Ok();
  const std::int64_t blocks64 = std::min<std::int64_t>((rows + 3) / 4, 1 << 20);
  const unsigned blocks = static_cast<unsigned>(blocks64);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (out.dtype) {
    case DType::kFloat32: merge_states_kernel<float><<<blocks, 128, 0, s>>>(p); break;
    case DType::kFloat16: merge_states_kernel<__half><<<blocks, 128, 0, s>>>(p); break;
    case DType::kBFloat16: merge_states_kernel<__nv_bfloat16><<<blocks, 128, 0, s>>>(p); break;
    default:
      return Status(StatusCode::kInvalidArgument,
                    std::string("merge_attention_states: out.dtype = ") + to_string(out.dtype) +
                        ": expected fp32, fp16 or bf16");
  }
  PA_CUDA_RETURN(cudaGetLastError(), "merge_attention_states launch");
  return Status::Ok();
}

// ------------------------------------------------------------------ test support

namespace testsupport {

Result<void*> stream_create() {
  cudaStream_t s = nullptr;
  PA_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return static_cast<void*>(s);
}
void stream_destroy(void* stream) {
  if (stream) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
Status stream_synchronize(void* stream) {
  PA_CUDA_RETURN(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  return Status::Ok();
}
Status memset_device(void* ptr, int byte, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(owner_device(ptr));
  PA_CUDA_RETURN(guard.status(), "memset_device: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemset(ptr, byte, bytes), "cudaMemset");
  return Status::Ok();
}
Status capture_begin(void* stream, bool relaxed) {
  PA_CUDA_RETURN(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                        relaxed ? cudaStreamCaptureModeRelaxed
                                                : cudaStreamCaptureModeGlobal),
                 "cudaStreamBeginCapture");
  return Status::Ok();
}
Result<void*> capture_end(void* stream, int* programmatic_edges) {
  cudaGraph_t graph = nullptr;
  PA_CUDA_RETURN(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph),
                 "cudaStreamEndCapture");
  if (programmatic_edges) {
    std::size_t n = 0;
    cudaError_t err = cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n);
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    if (err == cudaSuccess && n > 0)
      err = cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n);
    if (err != cudaSuccess) (void)cudaGraphDestroy(graph);
    PA_CUDA_RETURN(err, "cudaGraphGetEdges");
    *programmatic_edges = static_cast<int>(
        std::count_if(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n),
                      [](const cudaGraphEdgeData& e) {
                        return e.type == cudaGraphDependencyTypeProgrammatic;
                      }));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  PA_CUDA_RETURN(err, "cudaGraphInstantiate");
  return static_cast<void*>(exec);
}
Status graph_launch(void* graph_exec, void* stream) {
  PA_CUDA_RETURN(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec),
                                 static_cast<cudaStream_t>(stream)),
                 "cudaGraphLaunch");
  return Status::Ok();
}
void graph_destroy(void* graph_exec) {
  if (graph_exec) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec));
}
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}
Status set_device(int index) {
  PA_CUDA_RETURN(cudaSetDevice(index), "cudaSetDevice");
  return Status::Ok();
}

}  // namespace testsupport

}  // namespace pagedattn::cuda
