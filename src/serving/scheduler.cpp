// The replay's token-budget scheduler with chunked prefill (replay.h, Scheduler).
#include <algorithm>
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
  s.requests_.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RequestSpec& spec = requests[i];
    if (spec.prompt_tokens < 1 || spec.output_tokens < 1) {
      return invalid(fmt::format("request {}: prompt {} / output {} tokens: both must be >= 1", i,
                                 spec.prompt_tokens, spec.output_tokens));
    }
    if (spec.final_kv_tokens() > kMaxInt32) {
      return invalid(fmt::format("request {}: {} KV tokens exceed the int32 seq_lens range", i,
                                 spec.final_kv_tokens()));
    }
    const std::int64_t need = s.blocks_for(spec.final_kv_tokens());
    if (need > allocator->num_blocks()) {
      return invalid(fmt::format(
          "{}: request {} (prompt {} + output {} tokens) needs {} blocks of {} "
          "tokens and could never run; use at least {}",
          config.pool_name.empty() ? fmt::format("--num-blocks {}", allocator->num_blocks())
                                   : config.pool_name,
          i, spec.prompt_tokens, spec.output_tokens, need, config.block_size, need));
    }
    RequestState state;
    state.spec = spec;
    s.requests_.push_back(std::move(state));
  }
  return s;
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
    const std::int64_t need = blocks_for(r.spec.final_kv_tokens());
    if (reserved_blocks_ + need > allocator_->num_blocks()) {
      batch.admission_blocked_by_memory = true;
      break;
    }
    reserved_blocks_ += need;
    r.phase = RequestPhase::kPrefill;
    r.admitted_step = next_step_;
    running_.push_back(id);
    ++next_waiting_;
    ++batch.num_admitted;
    const std::int64_t chunk = std::min(budget, r.spec.prompt_tokens);
    batch.seqs.push_back({id, 0, static_cast<std::int32_t>(chunk), true});
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
    if (r.generated == r.spec.output_tokens) {
      r.phase = RequestPhase::kFinished;
      r.finished_step = batch.step;
      // Last block first: the tail of a sequence is the least likely to be shared, so it
      // should be the first to be reused (vLLM frees in reverse order for the same reason).
      for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) {
        PAGEDATTN_RETURN_IF_ERROR(allocator_->free(*it));
        outcome.freed_blocks.push_back(*it);
      }
      r.blocks.clear();
      r.blocks.shrink_to_fit();
      reserved_blocks_ -= blocks_for(r.spec.final_kv_tokens());
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
