// The replay's token-budget scheduler with chunked prefill (replay.h, Scheduler).
#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "src/serving/replay.h"
#include "src/serving/serving_util.h"

namespace pagedattn::serving {

using detail::internal;
using detail::invalid;
using detail::kMaxInt32;

Result<Scheduler> Scheduler::create(const SchedulerConfig& config,
                                    std::vector<RequestSpec> requests, BlockAllocator* allocator) {
  if (allocator == nullptr) return invalid("scheduler: allocator is null");
  if (config.token_budget < 1 || config.token_budget > kMaxInt32) {
    return invalid(fmt::format("--token-budget {}: expected 1 .. {}", config.token_budget,
                               kMaxInt32));
  }
  if (config.max_seqs < 1) {
    return invalid(fmt::format("--max-seqs {}: expected >= 1", config.max_seqs));
  }
  if (config.block_size < 1) {
    return invalid(fmt::format("--block-size {}: expected >= 1", config.block_size));
  }
  Scheduler s;
  s.config_ = config;
  s.allocator_ = allocator;
  s.block_key_.assign(static_cast<std::size_t>(allocator->num_blocks()), 0);
  s.registered_.assign(static_cast<std::size_t>(allocator->num_blocks()), 0);
  s.requests_.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    PAGEDATTN_RETURN_IF_ERROR(s.validate(requests[i], i));
    RequestState state;
    state.spec = std::move(requests[i]);
    s.requests_.push_back(std::move(state));
  }
  return s;
}

Status Scheduler::validate(const RequestSpec& spec, std::size_t i) const {
  if (spec.prompt_tokens < 1 || spec.output_tokens < 1) {
    return invalid(fmt::format("request {}: prompt {} / output {} tokens: both must be >= 1", i,
                               spec.prompt_tokens, spec.output_tokens));
  }
  if (spec.final_kv_tokens() > kMaxInt32) {
    return invalid(fmt::format("request {}: {} KV tokens exceed the int32 seq_lens range", i,
                               spec.final_kv_tokens()));
  }
  if (spec.prefix_tokens < 0 || spec.prefix_tokens > spec.prompt_tokens ||
      spec.prefix_block_tokens < 1 ||
      spec.prefix_tokens > static_cast<std::int64_t>(spec.prefix_chain.size()) *
                               spec.prefix_block_tokens) {
    return invalid(fmt::format("request {}: prefix of {} tokens does not fit its prompt ({}) "
                               "or its chain ({} entries of {} tokens)",
                               i, spec.prefix_tokens, spec.prompt_tokens,
                               spec.prefix_chain.size(), spec.prefix_block_tokens));
  }
  const std::int64_t need = blocks_for(spec.final_kv_tokens());
  if (need > allocator_->num_blocks()) {
    return invalid(fmt::format(
        "{}: request {} (prompt {} + output {} tokens) needs {} blocks of {} "
        "tokens and could never run; use at least {}",
        config_.pool_name.empty() ? fmt::format("--num-blocks {}", allocator_->num_blocks())
                                  : config_.pool_name,
        i, spec.prompt_tokens, spec.output_tokens, need, config_.block_size, need));
  }
  return Status::Ok();
}

std::int64_t Scheduler::drop_waiting() {
  const std::int64_t dropped = num_waiting();
  // Waiting requests hold no blocks and no table entries: they are only their specs.
  requests_.resize(static_cast<std::size_t>(next_waiting_));
  return dropped;
}

Status Scheduler::add_request(RequestSpec spec) {
  PAGEDATTN_RETURN_IF_ERROR(validate(spec, requests_.size()));
  RequestState state;
  state.spec = std::move(spec);
  requests_.push_back(std::move(state));
  return Status::Ok();
}

std::uint64_t Scheduler::table_key(const RequestSpec& spec, std::int64_t k, std::int64_t last) {
  // The chain entry of the trace block holding the last shared slot names every token before
  // it too; the block index places the slots.
  return testing::mix64(spec.chain_at(last) ^
                        testing::mix64(static_cast<std::uint64_t>(k) + 0x9E3779B97F4A7C15ull));
}

Scheduler::PrefixHit Scheduler::lookup(const RequestSpec& spec) const {
  PrefixHit hit;
  if (!config_.prefix_sharing || spec.prefix_tokens == 0) return hit;
  const std::int64_t B = config_.block_size;
  // The last prompt token is always computed: it samples the first output token.
  const std::int64_t limit = std::min(spec.prefix_tokens, spec.prompt_tokens - 1);
  std::int64_t k = 0;
  for (; (k + 1) * B <= limit; ++k) {
    const auto it = table_.find(table_key(spec, k, (k + 1) * B - 1));
    if (it == table_.end() || it->second.tokens < B) break;
    hit.blocks.push_back(it->second.block);
  }
  const std::int64_t rest = limit - k * B;  // shared tokens of block k this request needs
  if (rest > 0 && (k + 1) * B > limit) {
    const auto it = table_.find(table_key(spec, k, k * B + rest - 1));
    if (it != table_.end() && it->second.tokens >= rest) {
      hit.cow_src = it->second.block;
      hit.cow_tokens = static_cast<std::int32_t>(rest);
    }
  }
  return hit;
}

void Scheduler::offer_blocks(std::int32_t id, RequestState& r) {
  (void)id;
  const RequestSpec& spec = r.spec;
  const std::int64_t B = config_.block_size;
  while (r.registered_upto < static_cast<std::int64_t>(r.blocks.size())) {
    const std::int64_t k = r.registered_upto;
    const std::int64_t ext = std::min(B, spec.prefix_tokens - k * B);
    if (ext <= 0) {
      r.registered_upto = std::numeric_limits<std::int64_t>::max() / 2;  // nothing more to offer
      return;
    }
    if (r.computed < k * B + ext) return;  // shared slots not all written yet
    const std::int32_t block = r.blocks[static_cast<std::size_t>(k)];
    ++r.registered_upto;
    if (registered_[static_cast<std::size_t>(block)]) continue;  // taken from the table
    const std::uint64_t key = table_key(spec, k, k * B + ext - 1);
    auto it = table_.find(key);
    if (it != table_.end()) {
      if (it->second.tokens >= ext) continue;  // an equal or longer copy is there already
      registered_[static_cast<std::size_t>(it->second.block)] = 0;
      it->second = {block, static_cast<std::int32_t>(ext)};
    } else {
      table_.emplace(key, TableEntry{block, static_cast<std::int32_t>(ext)});
    }
    registered_[static_cast<std::size_t>(block)] = 1;
    block_key_[static_cast<std::size_t>(block)] = key;
  }
}

std::int64_t Scheduler::shared_blocks_now() const {
  std::int64_t n = 0;
  for (std::int32_t b = 0; b < allocator_->num_blocks(); ++b) n += allocator_->refcount(b) > 1;
  return n;
}

std::int64_t Scheduler::blocks_for(std::int64_t tokens) const {
  return (tokens + config_.block_size - 1) / config_.block_size;
}

Status Scheduler::grow_blocks(RequestState& r, std::int64_t tokens) {
  while (static_cast<std::int64_t>(r.blocks.size()) < blocks_for(tokens)) {
    Result<std::int32_t> block = allocator_->allocate();
    if (!block.ok()) {
      return internal("scheduler: allocation failed despite admission control: " +
                      block.status().message());
    }
    r.blocks.push_back(*block);
    --r.allocations_left;
    --pending_allocations_;
  }
  return Status::Ok();
}

bool Scheduler::finishes(const ScheduledSeq& seq) const {
  const RequestState& r = requests_[seq.request];
  if (seq.prefill) {
    return seq.context_len + seq.query_len == r.spec.prompt_tokens && r.spec.output_tokens == 1;
  }
  return r.generated + 1 == r.spec.output_tokens;
}

Result<StepBatch> Scheduler::schedule() {
  if (batch_outstanding_) return internal("scheduler: schedule() before complete()");
  if (done()) return internal("scheduler: schedule() after every request finished");
  StepBatch batch;
  batch.step = next_step_;
  std::int64_t budget = config_.token_budget;

  // (1) Decodes first: they are latency-critical and cost one token each.
  for (const std::int32_t id : running_) {
    if (budget == 0) break;
    RequestState& r = requests_[id];
    if (r.phase != RequestPhase::kDecode) continue;
    batch.seqs.push_back({id, r.computed, 1, false});
    --budget;
  }
  // (2) Continue partial prefills, oldest first.
  for (const std::int32_t id : running_) {
    if (budget == 0) break;
    RequestState& r = requests_[id];
    if (r.phase != RequestPhase::kPrefill) continue;
    const std::int64_t chunk = std::min(budget, r.spec.prompt_tokens - r.computed);
    batch.seqs.push_back({id, r.computed, static_cast<std::int32_t>(chunk), true});
    budget -= chunk;
  }
  // (3) Admit in arrival order. Stop at the first request that does not fit: admitting a
  // later, smaller one would starve the head of the queue.
  while (budget > 0 && next_waiting_ < num_requests() &&
         num_running() < static_cast<std::int64_t>(config_.max_seqs)) {
    const auto id = static_cast<std::int32_t>(next_waiting_);
    RequestState& r = requests_[id];
    const PrefixHit hit = lookup(r.spec);
    const auto shared = static_cast<std::int64_t>(hit.blocks.size());
    const std::int64_t need = blocks_for(r.spec.final_kv_tokens()) - shared;
    if (reserved_blocks() + need > allocator_->num_blocks()) {
      batch.admission_blocked_by_memory = true;
      break;
    }
    r.allocations_left = need;
    pending_allocations_ += need;
    for (const std::int32_t b : hit.blocks) {
      PAGEDATTN_RETURN_IF_ERROR(allocator_->retain(b));
      r.blocks.push_back(b);
    }
    r.shared_blocks = shared;
    r.cached_tokens = shared * config_.block_size;
    r.registered_upto = shared;
    if (hit.cow_src >= 0) {
      // Copy on write: this request's next token goes into the block where its shared prefix
      // ends, which another request wrote (and may still be writing past the shared slots).
      Result<std::int32_t> dst = allocator_->allocate();
      if (!dst.ok()) {
        return internal("scheduler: allocation failed despite admission control: " +
                        dst.status().message());
      }
      r.blocks.push_back(*dst);
      --r.allocations_left;
      --pending_allocations_;
      batch.copies.push_back({hit.cow_src, *dst, hit.cow_tokens, id});
      r.cached_tokens += hit.cow_tokens;
      ++prefix_copies_;
    }
    prefix_hit_blocks_ += shared;
    prefix_hit_tokens_ += r.cached_tokens;
    r.computed = r.cached_tokens;
    r.phase = RequestPhase::kPrefill;
    r.admitted_step = next_step_;
    running_.push_back(id);
    ++next_waiting_;
    ++batch.num_admitted;
    const std::int64_t chunk = std::min(budget, r.spec.prompt_tokens - r.computed);
    batch.seqs.push_back({id, r.computed, static_cast<std::int32_t>(chunk), true});
    budget -= chunk;
  }
  peak_running_ = std::max(peak_running_, num_running());
  if (batch.seqs.empty()) {
    return internal(fmt::format("scheduler: step {} scheduled nothing ({} running, {} waiting)",
                                next_step_, num_running(), num_waiting()));
  }
  // Blocks for the new tokens; reservation guarantees they exist.
  for (const ScheduledSeq& seq : batch.seqs) {
    PAGEDATTN_RETURN_IF_ERROR(grow_blocks(requests_[seq.request], seq.context_len + seq.query_len));
    batch.num_tokens += seq.query_len;
    (seq.prefill ? batch.num_prefill : batch.num_decode) += 1;
  }
  batch_outstanding_ = true;
  ++next_step_;
  return batch;
}

Result<StepOutcome> Scheduler::complete(const StepBatch& batch) {
  if (!batch_outstanding_ || batch.step + 1 != next_step_) {
    return internal(fmt::format("scheduler: complete() of step {} which is not outstanding",
                                batch.step));
  }
  StepOutcome outcome;
  for (const ScheduledSeq& seq : batch.seqs) {
    RequestState& r = requests_[seq.request];
    if (r.computed != seq.context_len) {
      return internal(fmt::format("scheduler: request {} has {} tokens cached, batch says {}",
                                  seq.request, r.computed, seq.context_len));
    }
    r.computed += seq.query_len;
    if (seq.prefill) {
      // The step that processes the last prompt token samples the first output token.
      if (r.computed == r.spec.prompt_tokens) {
        r.generated = 1;
        r.phase = RequestPhase::kDecode;
      }
    } else {
      ++r.generated;
    }
    if (config_.prefix_sharing && r.spec.prefix_tokens > 0) offer_blocks(seq.request, r);
    if (r.generated == r.spec.output_tokens) {
      r.phase = RequestPhase::kFinished;
      r.finished_step = batch.step;
      // Last block first: the tail of a sequence is the least likely to be shared, so it
      // should be the first to be reused (vLLM frees in reverse order for the same reason).
      // A block other requests still hold stays (and stays in the prefix table); the last
      // user's release takes it out of the table and returns it.
      for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) {
        Result<bool> released = allocator_->release(*it);
        if (!released.ok()) return released.status();
        if (!*released) continue;
        const auto b = static_cast<std::size_t>(*it);
        if (registered_[b]) {
          table_.erase(block_key_[b]);
          registered_[b] = 0;
        }
        outcome.freed_blocks.push_back(*it);
      }
      if (r.allocations_left != 0) {
        return internal(fmt::format("scheduler: request {} finished with {} reserved blocks "
                                    "never allocated",
                                    seq.request, r.allocations_left));
      }
      r.blocks.clear();
      r.blocks.shrink_to_fit();
      r.spec.prefix_chain.clear();
      r.spec.prefix_chain.shrink_to_fit();
      outcome.finished.push_back(seq.request);
      ++num_finished_;
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [&](std::int32_t id) {
                                  return requests_[id].phase == RequestPhase::kFinished;
                                }),
                 running_.end());
  batch_outstanding_ = false;
  return outcome;
}

}  // namespace pagedattn::serving
