// Shard bookkeeping of decode context parallelism (include/pagedattn/context_parallel.h): which
// logical blocks of a sequence each rank holds, and the local metadata that results.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "pagedattn/context_parallel.h"

namespace pagedattn::dist {
namespace {

Status invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

// Logical blocks [begin, end) of a contiguous shard; balanced so that shards differ by at most
// one block.
void contiguous_range(int world, int rank, std::int64_t num_blocks, std::int64_t* begin,
                      std::int64_t* end) {
  *begin = num_blocks * rank / world;
  *end = num_blocks * (rank + 1) / world;
}

// Number of logical blocks j in [0, num_blocks) with j % world == rank.
std::int64_t interleaved_count(int world, int rank, std::int64_t num_blocks) {
  return num_blocks > rank ? (num_blocks - rank + world - 1) / world : 0;
}

std::int32_t read_i32(const TensorView& v, std::int64_t i, std::int64_t j = 0) {
  const std::int64_t off = i * v.strides[0] + (v.ndim > 1 ? j * v.strides[1] : 0);
  return static_cast<const std::int32_t*>(v.data)[off];
}

}  // namespace

const char* to_string(ShardScheme scheme) {
  return scheme == ShardScheme::kInterleaved ? "interleaved" : "contiguous";
}

Result<ShardScheme> parse_shard_scheme(const std::string& name) {
  if (name == "interleaved") return ShardScheme::kInterleaved;
  if (name == "contiguous") return ShardScheme::kContiguous;
  return invalid("shard scheme '" + name + "': expected 'interleaved' or 'contiguous'");
}

std::int64_t shard_seq_len(ShardScheme scheme, int world, int rank, int block_size,
                           std::int64_t seq_len) {
  const std::int64_t nb = (seq_len + block_size - 1) / block_size;
  const std::int64_t last = nb - 1;  // the only block that may be partial
  const std::int64_t last_tokens = seq_len - last * block_size;
  if (scheme == ShardScheme::kInterleaved) {
    const std::int64_t n = interleaved_count(world, rank, nb);
    if (n == 0) return 0;
    const bool holds_last = last % world == rank;
    return holds_last ? (n - 1) * block_size + last_tokens : n * block_size;
  }
  std::int64_t b = 0, e = 0;
  contiguous_range(world, rank, nb, &b, &e);
  if (e <= b) return 0;
  return e == nb ? (e - 1 - b) * block_size + last_tokens : (e - b) * block_size;
}

std::int64_t global_key_position(ShardScheme scheme, int world, int rank, int block_size,
                                 std::int64_t seq_len, std::int64_t local) {
  const std::int64_t i = local / block_size, in_block = local % block_size;
  if (scheme == ShardScheme::kInterleaved) return (i * world + rank) * block_size + in_block;
  const std::int64_t nb = (seq_len + block_size - 1) / block_size;
  std::int64_t b = 0, e = 0;
  contiguous_range(world, rank, nb, &b, &e);
  return b * block_size + local;
}

Result<LocalShard> shard_block_table(const TensorView& block_table, const TensorView& seq_lens,
                                     int block_size, ShardScheme scheme, int world, int rank,
                                     bool renumber) {
  if (world < 1) return invalid("world = " + std::to_string(world) + ": expected >= 1");
  if (rank < 0 || rank >= world)
    return invalid("rank = " + std::to_string(rank) + ": expected 0 <= rank < world " +
                   std::to_string(world));
  if (block_size < 1)
    return invalid("block_size = " + std::to_string(block_size) + ": expected >= 1");
  if (block_table.ndim != 2 || block_table.dtype != DType::kInt32 ||
      block_table.device.type != DeviceType::kCPU || block_table.data == nullptr)
    return invalid("block_table " + block_table.describe() +
                   ": expected a CPU int32 [num_seqs, max_blocks] tensor with data");
  if (seq_lens.ndim != 1 || seq_lens.dtype != DType::kInt32 ||
      seq_lens.device.type != DeviceType::kCPU || seq_lens.data == nullptr ||
      seq_lens.shape[0] != block_table.shape[0])
    return invalid("seq_lens " + seq_lens.describe() +
                   ": expected a CPU int32 [num_seqs] tensor with data, num_seqs = " +
                   std::to_string(block_table.shape[0]));
  const std::int64_t num_seqs = seq_lens.shape[0];
  const std::int64_t width = block_table.shape[1];

  // Logical block j of sequence s for each local block, row by row.
  std::vector<std::vector<std::int64_t>> logical(static_cast<std::size_t>(num_seqs));
  LocalShard shard;
  shard.seq_lens.resize(static_cast<std::size_t>(num_seqs));
  std::int64_t max_local = 1;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t len = read_i32(seq_lens, s);
    if (len < 0) return invalid("seq_lens[" + std::to_string(s) + "] = " + std::to_string(len) +
                                ": expected >= 0");
    const std::int64_t nb = (len + block_size - 1) / block_size;
    if (nb > width)
      return invalid("seq_lens[" + std::to_string(s) + "] = " + std::to_string(len) + " needs " +
                     std::to_string(nb) + " blocks of " + std::to_string(block_size) +
                     " but block_table has " + std::to_string(width) + " columns");
    auto& row = logical[static_cast<std::size_t>(s)];
    if (scheme == ShardScheme::kInterleaved) {
      for (std::int64_t j = rank; j < nb; j += world) row.push_back(j);
    } else {
      const std::int64_t b = nb * rank / world, e = nb * (rank + 1) / world;
      for (std::int64_t j = b; j < e; ++j) row.push_back(j);
    }
    max_local = std::max<std::int64_t>(max_local, static_cast<std::int64_t>(row.size()));
    shard.seq_lens[static_cast<std::size_t>(s)] =
        static_cast<std::int32_t>(shard_seq_len(scheme, world, rank, block_size, len));
  }
  shard.max_blocks_per_seq = static_cast<std::int32_t>(max_local);
  shard.block_table.assign(static_cast<std::size_t>(num_seqs * max_local), 0);
  std::unordered_map<std::int32_t, std::int32_t> local_id;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const auto& row = logical[static_cast<std::size_t>(s)];
    for (std::size_t i = 0; i < row.size(); ++i) {
      std::int32_t id = read_i32(block_table, s, row[i]);
      if (id < 0)
        return invalid("block_table[" + std::to_string(s) + "][" + std::to_string(row[i]) +
                       "] = " + std::to_string(id) + ": expected a block id >= 0");
      if (renumber) {
        auto it = local_id.find(id);
        if (it == local_id.end()) {
          it = local_id.emplace(id, static_cast<std::int32_t>(shard.physical_blocks.size())).first;
          shard.physical_blocks.push_back(id);
        }
        id = it->second;
      }
      shard.block_table[static_cast<std::size_t>(s * max_local) + i] = id;
    }
  }
  return shard;
}

}  // namespace pagedattn::dist
