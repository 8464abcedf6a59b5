// Communicators of decode context parallelism: ranks as threads of one process (the CPU tests,
// and several ranks on one GPU) and NCCL (GPUs; compiled when the build has CUDA and finds libnccl).
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "pagedattn/context_parallel.h"
#include "src/dist/cp_merge.h"

#if defined(PAGEDATTN_WITH_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace pagedattn::dist {
namespace {

// What the ranks of one thread group share: the posted buffers of the collective in progress
// and a reusable barrier (generation counter, so that a fast rank cannot lap a slow one).
struct ThreadGroup {
  ThreadGroup(int world, Device device)
      : world(world), device(device), send(world), bytes(world), failed(world) {}
  const int world;
  const Device device;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<const void*> send;
  std::vector<std::size_t> bytes;
  // CUDA: a rank whose stream wait failed before posting (its slot may be unfinished).
  std::vector<char> failed;

  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    const std::uint64_t gen = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen; });
  }
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world; }
  Device device() const override { return group_->device; }

  Status all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) override {
    ThreadGroup& g = *group_;
    const bool cuda = g.device.type == DeviceType::kCUDA;
    // CUDA: the slot is written by kernels on this rank's stream; the peers read it only
    // after the barrier, so it must be finished before posting.
    Status st = cuda ? detail::cuda_stream_wait(g.device.index, stream) : Status::Ok();
    {
      std::lock_guard<std::mutex> lock(g.mu);
      g.send[rank_] = send;
      g.bytes[rank_] = bytes;
      g.failed[rank_] = !st.ok();
    }
    g.barrier();  // every rank has posted
    for (int r = 0; r < g.world && st.ok(); ++r) {
      if (g.failed[r]) {
        st = Status(StatusCode::kInternal, "all_gather: rank " + std::to_string(r) +
                                               " failed to finish its slot (its stream)");
      } else if (g.bytes[r] != bytes) {
        st = Status(StatusCode::kInvalidArgument,
                    "all_gather: rank " + std::to_string(r) + " sends " +
                        std::to_string(g.bytes[r]) + " bytes, rank " + std::to_string(rank_) +
                        " " + std::to_string(bytes) + ": every rank must send the same size");
      }
    }
    if (st.ok()) {
      for (int r = 0; r < g.world && st.ok(); ++r) {
        unsigned char* dst = static_cast<unsigned char*>(recv) + r * bytes;
        if (dst == g.send[r] || bytes == 0) continue;
        if (cuda) {
          st = detail::cuda_copy_async(dst, g.send[r], bytes, g.device.index, stream);
        } else {
          std::memcpy(dst, g.send[r], bytes);
        }
      }
      // The copies read the peers' send buffers: done before the closing barrier.
      if (cuda) {
        const Status wait = detail::cuda_stream_wait(g.device.index, stream);
        if (st.ok()) st = wait;
      }
    }
    g.barrier();  // nobody changes its send buffer while another rank still reads it
    return st;
  }

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_thread_communicators(int world_size,
                                                                             Device device) {
  if (world_size < 1)
    return Status(StatusCode::kInvalidArgument,
                  "world_size = " + std::to_string(world_size) + ": expected >= 1");
  if (device.type == DeviceType::kCUDA)
    PAGEDATTN_RETURN_IF_ERROR(detail::cuda_check_device(device.index));
  auto group = std::make_shared<ThreadGroup>(world_size, device);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return comms;
}

#if defined(PAGEDATTN_WITH_NCCL)
namespace {

Status nccl_error(const char* what, ncclResult_t r) {
  return Status(StatusCode::kInternal,
                std::string(what) + " failed: " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int world, int rank, int device)
      : comm_(comm), world_(world), rank_(rank), device_(device) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return Device::cuda(device_); }

  Status all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) override {
    if (bytes == 0) return Status::Ok();
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    const ncclResult_t r = ncclAllGather(send, recv, bytes, ncclUint8, comm_,
                                         static_cast<cudaStream_t>(stream));
    cudaSetDevice(previous);
    return r == ncclSuccess ? Status::Ok() : nccl_error("ncclAllGather", r);
  }

 private:
  ncclComm_t comm_;
  int world_, rank_, device_;
};

}  // namespace

Result<NcclId> make_nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL_UNIQUE_ID_BYTES changed");
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  NcclId out;
  std::memcpy(out.bytes, &id, kNcclIdBytes);
  return out;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int world_size,
                                                             int rank, int device) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return Status(StatusCode::kInvalidArgument,
                  "rank = " + std::to_string(rank) + ", world_size = " +
                      std::to_string(world_size) + ": expected 0 <= rank < world_size");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceUnavailable,
                  "cuda:" + std::to_string(device) + ": this machine has " +
                      std::to_string(count) + " CUDA devices");
  }
  // NVLink SHARP (multicast) stays off unless the user chose otherwise explicitly.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes, kNcclIdBytes);
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, world_size, nid, rank);
  cudaSetDevice(previous);
  if (r != ncclSuccess) return nccl_error("ncclCommInitRank", r);
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, world_size, rank, device));
}
#else
Result<NcclId> make_nccl_unique_id() {
  return Status(StatusCode::kDeviceUnavailable, "this build has no NCCL (needs CUDA and libnccl)");
}
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId&, int, int, int) {
  return Status(StatusCode::kDeviceUnavailable, "this build has no NCCL (needs CUDA and libnccl)");
}
#endif

}  // namespace pagedattn::dist
