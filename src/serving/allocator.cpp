// The KV-cache block allocator of the replay (replay.h, BlockAllocator): a FIFO ring of free
// block ids in a seeded random order.
#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "src/serving/replay.h"
#include "src/serving/serving_util.h"

namespace pagedattn::serving {

using detail::invalid;
using detail::kMaxInt32;

Result<BlockAllocator> BlockAllocator::create(std::int64_t num_blocks, std::uint64_t seed) {
  if (num_blocks < 1 || num_blocks > kMaxInt32) {
    return invalid(fmt::format("block pool: num_blocks = {}: expected 1 .. {}", num_blocks,
                               kMaxInt32));
  }
  BlockAllocator a;
  a.ring_.resize(static_cast<std::size_t>(num_blocks));
  std::iota(a.ring_.begin(), a.ring_.end(), 0);
  // Fisher-Yates with our own generator: the same permutation on every platform.
  testing::SplitMix64 rng = detail::serving_rng(seed);
  for (std::int64_t i = num_blocks - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(a.ring_[i], a.ring_[j]);
  }
  a.in_use_.assign(static_cast<std::size_t>(num_blocks), 0);
  return a;
}

Result<std::int32_t> BlockAllocator::allocate() {
  if (num_free() == 0) {
    return invalid(fmt::format("out of KV-cache blocks: all {} in use", num_blocks()));
  }
  const std::int32_t block = ring_[head_];
  head_ = (head_ + 1) % num_blocks();
  in_use_[block] = 1;
  ++num_used_;
  peak_used_ = std::max(peak_used_, num_used_);
  return block;
}

Status BlockAllocator::free(std::int32_t block) {
  Result<bool> released = release(block);
  return released.ok() ? Status::Ok() : released.status();
}

Result<bool> BlockAllocator::release(std::int32_t block) {
  if (block < 0 || block >= num_blocks()) {
    return invalid(fmt::format("free: block {} is outside the pool [0, {})", block, num_blocks()));
  }
  if (in_use_[block] == 0) return invalid(fmt::format("free: block {} is not allocated", block));
  if (--in_use_[block] > 0) return false;
  // The free ids occupy ring_[head_ .. head_ + num_free()) (mod size); the slot after them is
  // the back of the queue.
  ring_[(head_ + num_free()) % num_blocks()] = block;
  --num_used_;
  return true;
}

Status BlockAllocator::retain(std::int32_t block) {
  if (!is_allocated(block)) {
    return invalid(fmt::format("retain: block {} is not allocated", block));
  }
  ++in_use_[block];
  return Status::Ok();
}

std::int32_t BlockAllocator::refcount(std::int32_t block) const {
  return block >= 0 && block < num_blocks() ? in_use_[block] : 0;
}

bool BlockAllocator::is_allocated(std::int32_t block) const {
  return block >= 0 && block < num_blocks() && in_use_[block] != 0;
}

}  // namespace pagedattn::serving
