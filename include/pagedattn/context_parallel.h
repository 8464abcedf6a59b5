// Decode context parallelism (issue 25, docs/context_parallel.md): every sequence's KV blocks
// are sharded across `world` ranks (GPUs, or threads in tests); each rank attends its own
// blocks with LSE through run_attention, the ranks exchange their partial (out, lse) with one
// all-gather, and every rank merges the W partial states by log-sum-exp in rank order, so all
// ranks end with the same (bitwise) result.
//
// Not part of the installed library: the target `pagedattn_dist` (CMakeLists.txt), which also
// holds the NCCL communicator when CUDA (and NCCL) are available.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pagedattn/attention.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn::dist {

// ------------------------------------------------------------------------- communicators

/// The one collective the decode step needs. Implementations: in-process threads
/// (make_thread_communicators, CPU buffers) and NCCL (make_nccl_communicator, CUDA buffers).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Where all_gather's buffers must live: Device::cpu() or the rank's CUDA device.
  virtual Device device() const = 0;
  /// `recv` (world_size() * `bytes`) receives every rank's `send` (`bytes`) in rank order.
  /// In place when `send == recv + rank() * bytes`. Every rank must call it, in the same
  /// order, with the same `bytes`. NCCL: asynchronous on `stream` (a cudaStream_t of the
  /// communicator's device); threads: synchronous, `stream` ignored.
  /// Errors: kInvalidArgument for ranks that disagree on `bytes` (threads; NCCL cannot tell
  /// and hangs or corrupts), kInternal for a failed NCCL call.
  virtual Status all_gather(const void* send, void* recv, std::size_t bytes,
                            Stream stream = nullptr) = 0;
};

/// `world_size` communicators of one process whose ranks are threads: rank r's object must
/// be used by one thread at a time, and every rank's thread must enter each collective.
/// `device`: where every rank's buffers live. Device::cpu() (default): host memcpy.
/// Device::cuda(i): every rank on the SAME GPU i (one GPU standing in for several, in tests
/// and single-GPU measurements), each with its own stream: all_gather waits for the caller's
/// `stream` before posting its slot (a peer must read finished data), copies the peers'
/// slots with cudaMemcpyAsync on `stream` and waits for it again before returning (so no
/// rank reuses its send buffer while a peer still reads it). Synchronous, hence not for
/// CUDA graph capture. A rank whose wait or copy fails returns kInternal and so do its peers
/// (naming that rank) instead of merging unfinished data.
/// Errors: kInvalidArgument for world_size < 1; kDeviceUnavailable for a CUDA device in a
/// build without CUDA or one this machine does not have.
Result<std::vector<std::unique_ptr<Communicator>>> make_thread_communicators(
    int world_size, Device device = Device::cpu());

/// Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES), kept here so that the header needs no
/// NCCL.
inline constexpr std::size_t kNcclIdBytes = 128;
struct NcclId {
  char bytes[kNcclIdBytes] = {};
};
/// A fresh id (rank 0 makes it and shares it with the others: a file, a socket, or threads).
/// Errors: kDeviceUnavailable in a build without CUDA/NCCL; kInternal when NCCL fails.
Result<NcclId> make_nccl_unique_id();
/// NCCL communicator of `rank` in a group of `world_size` on CUDA device `device`
/// (ncclCommInitRank: blocks until every rank has joined, so ranks of one process need one
/// thread each). Sets NCCL_NVLS_ENABLE=0 in the environment when it is unset: NVLink
/// SHARP / multicast must stay off on shared hosts (it can take GPUs out of service).
/// Errors: kInvalidArgument for rank outside [0, world_size); kDeviceUnavailable without
/// CUDA/NCCL or that device; kInternal when NCCL fails.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int world_size,
                                                             int rank, int device);

// ------------------------------------------------------------------------- sharding

/// How a sequence's logical blocks are spread over the ranks.
///  - kInterleaved: logical block j lives on rank j % world (vLLM's decode context
///    parallelism); the tail grows on every rank in turn, balanced within one block.
///  - kContiguous: rank r holds blocks [floor(r * n / W), floor((r + 1) * n / W)) of the
///    sequence's n = ceil(seq_len / block_size) blocks; one contiguous position range per rank.
enum class ShardScheme : std::uint8_t { kInterleaved, kContiguous };
/// "interleaved", "contiguous".
const char* to_string(ShardScheme scheme);
/// Inverse of to_string(ShardScheme); kInvalidArgument otherwise.
Result<ShardScheme> parse_shard_scheme(const std::string& name);

/// Tokens of a `seq_len`-token sequence that `rank` holds (0 = an empty shard). Preconditions
/// (not checked): 0 <= rank < world, block_size >= 1, seq_len >= 0.
std::int64_t shard_seq_len(ShardScheme scheme, int world, int rank, int block_size,
                           std::int64_t seq_len);
/// Absolute position in the sequence of the `local`-th key (0-based) of `rank`'s shard.
/// With kInterleaved the positions of a shard are not contiguous: local key i sits in global
/// block (i / block_size) * world + rank. This is why ALiBi and sliding windows, which depend
/// on absolute key positions, are rejected by the decode step (see below).
std::int64_t global_key_position(ShardScheme scheme, int world, int rank, int block_size,
                                 std::int64_t seq_len, std::int64_t local);

/// One rank's share of a batch, as host vectors ready to become the metadata of its
/// AttentionArgs and HostMetadata.
struct LocalShard {
  /// Row width of block_table (>= 1).
  std::int32_t max_blocks_per_seq = 1;
  /// `[num_seqs, max_blocks_per_seq]` int32, row-major: local block i of sequence s -> a
  /// physical block. Entries past a row's blocks are 0, which the decode step reads (without
  /// using the key) for an empty shard, so block 0 must exist in the rank's cache.
  std::vector<std::int32_t> block_table;
  /// `[num_seqs]` int32: shard_seq_len of each sequence (0 = empty shard).
  std::vector<std::int32_t> seq_lens;
  /// With `renumber`: local physical block k holds global physical block physical_blocks[k]
  /// (in order of first use); the rank's cache needs max(1, size()) blocks. Empty otherwise.
  std::vector<std::int32_t> physical_blocks;
};

/// Rank `rank`'s share of a batch from its global metadata. `block_table`: CPU int32
/// `[num_seqs, max_blocks]` (strided allowed), `seq_lens`: CPU int32 `[num_seqs]`, values
/// >= 0 and covered by the table (ceil(seq_len / block_size) <= max_blocks). Without
/// `renumber` the local table names the global physical blocks (ranks sharing one cache, as
/// the tests do); with it, local ids 0, 1, ... index physical_blocks (one cache per GPU).
/// Errors: kInvalidArgument naming the argument (world < 1, rank outside [0, world),
/// block_size < 1, a tensor of the wrong dtype/shape/device, a negative or uncovered length,
/// a negative block id).
Result<LocalShard> shard_block_table(const TensorView& block_table, const TensorView& seq_lens,
                                     int block_size, ShardScheme scheme, int world, int rank,
                                     bool renumber = false);

// ------------------------------------------------------------------------- the decode step

/// A planned context-parallel decode step of one rank: the local attention plan (made with
/// every empty shard counted as one key, whose result is then discarded) and the workspace.
struct ContextParallelPlan {
  AttentionPlan local;
  /// Bytes of workspace run_context_parallel_decode needs, on the communicator's device.
  std::size_t workspace_bytes = 0;
  std::int64_t num_seqs = 0;
  std::int64_t num_heads = 0;
  std::int64_t head_size = 0;
  DType dtype = DType::kFloat16;
  int world_size = 1;
  int rank = 0;
};

/// Plan rank comm.rank()'s step. `local_args` is a decode batch over this rank's shard:
/// query `[num_seqs, H, D]` (every rank passes the same query), the rank's cache, its local
/// block_table and seq_lens (shard_block_table; a length may be 0), query_start_loc
/// = [0, 1, ..., num_seqs]; `out` `[num_seqs, H, D]` (query dtype) and the optional `lse`
/// `[num_seqs, H]` fp32 receive the merged result over the whole sequences. `local_host`:
/// host copies of the local metadata (HostMetadata::from_args for CPU tensors). Every
/// rank must plan the same num_seqs, H, D and dtype (the all-gather's size).
/// Scale, softcap and sinks are supported (a sink joins the merge once, not once per rank).
/// Errors: kUnsupported for sliding_window != 0 and ALiBi ("context parallel decode does not
/// support sliding_window / alibi_slopes": both depend on absolute key positions, which a
/// shard's local positions are not) and for query lengths other than 1 (decode only);
/// kInvalidArgument for a tensor on another device than comm.device(), an empty shard whose
/// block_table entry 0 is not a valid block, and everything plan_attention rejects.
Result<ContextParallelPlan> plan_context_parallel_decode(const Communicator& comm,
                                                         const AttentionArgs& local_args,
                                                         const HostMetadata& local_host,
                                                         const PlanOptions& options = {});

/// Run a planned step: local attention into this rank's slot of the exchange buffer, one
/// all_gather of (out, lse, local lengths), the W-way merge into local_args.out / .lse.
/// `workspace`: plan.workspace_bytes bytes on the communicator's device, aligned to
/// kWorkspaceAlignment. CUDA: asynchronous on `stream`, no allocation, no host
/// synchronisation. Every rank must call it (it is a collective). Deterministic: the merge
/// visits ranks 0..W-1 in order on every rank. Errors: as run_attention and all_gather.
Status run_context_parallel_decode(const ContextParallelPlan& plan, Communicator& comm,
                                   const AttentionArgs& local_args, void* workspace,
                                   std::size_t workspace_bytes, Stream stream = nullptr);

/// Convenience: plan, allocate the workspace, run, wait, free (not for CUDA graphs).
Status context_parallel_decode(Communicator& comm, const AttentionArgs& local_args,
                               const HostMetadata& local_host, Stream stream = nullptr,
                               const PlanOptions& options = {});

}  // namespace pagedattn::dist
