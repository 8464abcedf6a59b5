// The replay of `pagedattn run`: drives write_kv + plan/run attention step by step over the
// scheduler's batches and checks the results against the oracle. The block allocator
// (allocator.cpp), the scheduler (scheduler.cpp) and the presets and flag values
// (presets.cpp) are their own files.
#include "src/serving/replay_state.h"

namespace pagedattn::serving {
namespace replay_internal {

void Replay::record_failure(std::string what) {
  if (report_.first_failure.empty()) report_.first_failure = std::move(what);
  report_.pass = false;
}

// A length of 0 (absent from the shipped traces) is raised to 1: every request needs a prompt
// token to prefill and produces at least one token. Counted apart from the clipped.
std::pair<std::int64_t, std::int64_t> Replay::replayed_lengths(const TraceRecord& rec) const {
  return {std::clamp<std::int64_t>(rec.prompt_tokens, 1, config_.max_prompt),
          std::clamp<std::int64_t>(rec.output_tokens, 1, config_.max_output)};
}

void Replay::count_spec(const TraceRecord& rec, int sign) {
  const auto [prompt, output] = replayed_lengths(rec);
  report_.prompts_clipped += sign * (prompt < rec.prompt_tokens);
  report_.outputs_clipped += sign * (output < rec.output_tokens);
  report_.prompts_raised += sign * (prompt > rec.prompt_tokens);
  report_.outputs_raised += sign * (output > rec.output_tokens);
  report_.trace_prompt_tokens += sign * rec.prompt_tokens;
  report_.trace_output_tokens += sign * rec.output_tokens;
}

void Replay::uncount_dropped(std::int64_t dropped) {
  // The waiting requests a soak drops at its deadline are the last `dropped` that make_spec
  // built: the report's clipping counts and trace totals cover the replayed requests only.
  const auto available = static_cast<std::int64_t>(trace_.records.size());
  for (std::int64_t index = next_request_ - dropped; index < next_request_; ++index)
    count_spec(trace_.records[static_cast<std::size_t>(index % available)], -1);
}

Result<RequestSpec> Replay::make_spec(std::int64_t index) {
  const auto available = static_cast<std::int64_t>(trace_.records.size());
  const TraceRecord& rec = trace_.records[static_cast<std::size_t>(index % available)];
  const std::int64_t pass = index / available;
  report_.trace_passes = std::max(report_.trace_passes, pass + 1);
  RequestSpec spec;
  std::tie(spec.prompt_tokens, spec.output_tokens) = replayed_lengths(rec);
  count_spec(rec, 1);
  if (spec.prompt_tokens + spec.output_tokens > max_model_len_) {
    return invalid(fmt::format(
        "--max-model-len {}: request {} has {} prompt + {} output tokens; use at least {}",
        max_model_len_, index, spec.prompt_tokens, spec.output_tokens,
        spec.prompt_tokens + spec.output_tokens));
  }
  if (!rec.hash_ids.empty()) {
    // Chain entry j hashes hash_ids[0 .. j] (and the pass over the trace): equal entries mean
    // equal prompts up to the end of trace block j, whatever the trace's ids promise about
    // their own chaining.
    std::uint64_t h = mix64(0x9AC0FF1Eull ^ mix64(static_cast<std::uint64_t>(pass)));
    spec.prefix_chain.reserve(rec.hash_ids.size());
    for (const std::int64_t id : rec.hash_ids) {
      h = mix64(h ^ mix64(static_cast<std::uint64_t>(id) + kGolden));
      spec.prefix_chain.push_back(h);
    }
    spec.prefix_block_tokens = kMooncakeHashBlockTokens;
    spec.prefix_tokens = std::min<std::int64_t>(
        spec.prompt_tokens,
        static_cast<std::int64_t>(rec.hash_ids.size()) * kMooncakeHashBlockTokens);
    report_.prefix_tokens += spec.prefix_tokens;
  }
  next_request_ = std::max(next_request_, index + 1);
  return spec;
}

Status Replay::setup() {
  const ReplayConfig& c = config_;
  // ---- flags
  if (c.requests < 1) return invalid(fmt::format("--requests {}: expected >= 1", c.requests));
  if (c.max_prompt < 1) return invalid(fmt::format("--max-prompt {}: expected >= 1", c.max_prompt));
  if (c.max_output < 1) return invalid(fmt::format("--max-output {}: expected >= 1", c.max_output));
  if (c.max_prompt > kMaxInt32 || c.max_output > kMaxInt32) {
    return invalid("--max-prompt / --max-output: expected < 2^31");
  }
  if (c.verify_rows < 0) {
    return invalid(fmt::format("--verify-rows {}: expected >= 0", c.verify_rows));
  }
  if (c.block_size < 0) {
    return invalid(fmt::format("--block-size {}: expected >= 1 (0 = the model's)", c.block_size));
  }
  if (c.num_blocks < 0) {
    return invalid(fmt::format("--num-blocks {}: expected >= 1 (0 = auto)", c.num_blocks));
  }
  if (c.page_pad < -1) {
    return invalid(fmt::format("--page-pad {}: expected >= 0 (-1 = the model's)", c.page_pad));
  }
  if (c.max_model_len < 0) {
    return invalid(fmt::format("--max-model-len {}: expected >= 1 (0 = auto)", c.max_model_len));
  }
  if (c.threads < 0) return invalid(fmt::format("--threads {}: expected >= 0", c.threads));
  if (c.dtype != DType::kFloat32 && c.dtype != DType::kFloat16 && c.dtype != DType::kBFloat16) {
    return invalid(fmt::format("--dtype {}: expected fp32, fp16 or bf16 (fp8 is a --kv-dtype)",
                               to_string(c.dtype)));
  }
  if (c.kv_dtype && !is_fp8(*c.kv_dtype)) {
    return invalid(fmt::format("--kv-dtype {}: expected auto, fp8_e4m3 or fp8_e5m2",
                               to_string(*c.kv_dtype)));
  }
  Result<ModelPreset> preset = find_model_preset(c.model);
  if (!preset.ok()) return preset.status();
  ModelPreset model = *preset;
  if (c.block_size > 0) model.block_size = c.block_size;
  if (c.page_pad >= 0) model.page_pad = c.page_pad;
  num_heads_ = model.num_heads;
  num_kv_heads_ = model.num_kv_heads;
  head_size_ = model.head_size;
  block_size_ = model.block_size;
  dtype_ = c.dtype;
  cache_dtype_ = c.kv_dtype ? *c.kv_dtype : c.dtype;
  tol_ = testing::tolerance_for(dtype_, cache_dtype_);
  // Random Q/K at the model's scale give logits with a standard deviation of about 1/3: nearly
  // uniform attention, under which a missing or extra key moves an output by less than the
  // tolerance. The test harness's boost makes attention peaked, as a real model's is, so that
  // such faults show (same constant as the GoogleTest cases).
  scale_ = testing::kDefaultScaleBoost * default_scale(head_size_);

  // ---- requests: the first N records, in arrival order (the parsers reject a trace whose
  // timestamps step back, so file order is arrival order), lengths clipped
  const auto available = static_cast<std::int64_t>(trace_.records.size());
  if (c.requests > available) {
    return invalid(fmt::format("--requests {}: trace '{}' has only {} record{}", c.requests,
                               trace_.name, available, available == 1 ? "" : "s"));
  }
  if (!(c.duration_s >= 0) || c.duration_s > 1e7) {
    return invalid(fmt::format("--duration {}: expected 0 .. 1e7 seconds", c.duration_s));
  }
  if (!(c.sample_interval_s >= 0) || c.sample_interval_s > 1e7) {
    return invalid(fmt::format("--report-interval {}: expected 0 .. 1e7 seconds",
                               c.sample_interval_s));
  }
  if (c.fault_every < 0) {
    return invalid(fmt::format("--fault-every {}: expected >= 0", c.fault_every));
  }
  switch (c.prefix_sharing) {
    case PrefixSharing::kAuto: sharing_ = trace_.has_hash_ids; break;
    case PrefixSharing::kOff: sharing_ = false; break;
    case PrefixSharing::kOn:
      if (!trace_.has_hash_ids) {
        return invalid(fmt::format("--prefix-sharing on: trace '{}' has no hash_ids (only "
                                   "Mooncake traces name shared prefixes)",
                                   trace_.name));
      }
      sharing_ = true;
      break;
  }
  max_model_len_ = c.max_model_len > 0 ? c.max_model_len : c.max_prompt + c.max_output;
  std::int64_t total_blocks = 0;
  std::int64_t max_need = 0;
  specs_.clear();
  for (std::int64_t i = 0; i < c.requests; ++i) {
    Result<RequestSpec> spec = make_spec(i);
    if (!spec.ok()) return spec.status();
    const std::int64_t need = (spec->final_kv_tokens() + block_size_ - 1) / block_size_;
    total_blocks += need;
    max_need = std::max(max_need, need);
    specs_.push_back(std::move(spec).value());
  }
  if (c.duration_s > 0) {
    // A soak cycles through every record: the automatic pool must hold the largest of them.
    for (const TraceRecord& rec : trace_.records) {
      const std::int64_t kv = std::clamp<std::int64_t>(rec.prompt_tokens, 1, c.max_prompt) +
                              std::clamp<std::int64_t>(rec.output_tokens, 1, c.max_output) - 1;
      max_need = std::max(max_need, (kv + block_size_ - 1) / block_size_);
    }
  }
  // Auto pool: see ReplayConfig::num_blocks.
  const std::int64_t num_blocks =
      c.num_blocks > 0 ? c.num_blocks
                       : std::min(std::max(total_blocks, max_need),
                                  std::max(2 * max_need, (total_blocks + 1) / 2));
  // How messages name the pool: the flag as typed, or the automatic size the user never typed.
  auto blocks_flag = [&] {
    return c.num_blocks > 0 ? fmt::format("--num-blocks {}", num_blocks)
                            : fmt::format("the automatic pool of {} block{} (--num-blocks 0)",
                                          num_blocks, num_blocks == 1 ? "" : "s");
  };

  // ---- device
  Device device = Device::cpu();
  if (c.device == DeviceChoice::kCUDA) {
    Result<DeviceInfo> info = query_device(Device::cuda(0));
    if (!info.ok()) {
      return Status(info.status().code(),
                    "--device cuda: " + info.status().message());
    }
    device = Device::cuda(0);
  } else if (c.device == DeviceChoice::kAuto) {
    if (query_device(Device::cuda(0)).ok()) device = Device::cuda(0);
  }
  Result<DeviceInfo> info = query_device(device);
  if (!info.ok()) return info.status();
  on_cuda_ = device.type == DeviceType::kCUDA;
  device_ = device;

  // ---- cache: NaN everywhere, so that a read of memory the math must not use shows up
  KVCacheSpec spec;
  spec.layout = c.layout;
  spec.num_blocks = num_blocks;
  spec.block_size = block_size_;
  spec.num_kv_heads = num_kv_heads_;
  spec.head_size = head_size_;
  spec.dtype = cache_dtype_;
  spec.page_pad = model.page_pad;
  Result<std::int64_t> elements = kv_cache_elements(spec);
  if (!elements.ok()) return elements.status();
  const std::size_t es = dtype_size(cache_dtype_);
  const auto cache_bytes = static_cast<std::size_t>(*elements) * es;
  // The host holds K and V (the cache itself, or the CUDA run's mirror). Refuse sizes that
  // would only end in the out-of-memory killer, with the flag to change.
  const double host_bytes = 2.0 * static_cast<double>(*elements) * static_cast<double>(es);
#if defined(__unix__)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    const double physical = static_cast<double>(pages) * static_cast<double>(page_size);
    if (host_bytes > 0.8 * physical) {
      return invalid(fmt::format(
          "{}: the KV cache needs {:.1f} GiB of host memory (K+V), more than 80% of "
          "this machine's {:.1f} GiB",
          blocks_flag(), host_bytes / 1073741824.0, physical / 1073741824.0));
    }
  }
#endif
  // fp8 caches use power-of-two scales: they exercise the scale path in every reader, while
  // x / s and x * (1 / s) stay equal, so writer and checks agree bit for bit.
  const float k_scale = is_fp8(cache_dtype_) ? 0.5f : 1.0f;
  const float v_scale = is_fp8(cache_dtype_) ? 0.25f : 1.0f;
  nan_ = poison_element(cache_dtype_);
  host_k_.resize(cache_bytes);
  host_v_.resize(cache_bytes);
  fill_fast(host_k_.data(), cache_bytes, nan_);
  fill_fast(host_v_.data(), cache_bytes, nan_);
  Result<KVCache> host_cache =
      make_kv_cache(spec, host_k_.data(), host_v_.data(), Device::cpu(), k_scale, v_scale);
  if (!host_cache.ok()) return host_cache.status();
  host_cache_ = *host_cache;
  if (on_cuda_) {
    PAGEDATTN_RETURN_IF_ERROR(dev_k_.reserve(cache_bytes));
    PAGEDATTN_RETURN_IF_ERROR(dev_v_.reserve(cache_bytes));
    // The poison goes up once (1 MiB at most) and is doubled on the device: a soak's pool of
    // gigabytes is not sent over PCIe.
    for (DeviceMemory* dev : {&dev_k_, &dev_v_}) {
      auto* d = static_cast<unsigned char*>(dev->get());
      const std::size_t seed = std::min<std::size_t>(cache_bytes, std::size_t{1} << 20);
      PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d, host_k_.data(), seed));
      for (std::size_t done = seed; done < cache_bytes;) {
        const std::size_t n = std::min(done, cache_bytes - done);
        PAGEDATTN_RETURN_IF_ERROR(cuda::copy_device_to_device(d + done, d, n));
        done += n;
      }
    }
    // Poisoned pages (K and V pages have the same stride) for refilling freed blocks: a run of
    // adjacent freed blocks is refilled by one copy.
    const std::size_t page = static_cast<std::size_t>(host_cache_.key.stride(0)) * es;
    poison_pages_ = std::min<std::int64_t>(kPoisonPages, num_blocks);
    PAGEDATTN_RETURN_IF_ERROR(dev_poison_.reserve(page * poison_pages_));
    PAGEDATTN_RETURN_IF_ERROR(
        cuda::copy_to_device(dev_poison_.get(), host_k_.data(), page * poison_pages_));
    Result<KVCache> dev_cache =
        make_kv_cache(spec, dev_k_.get(), dev_v_.get(), device, k_scale, v_scale);
    if (!dev_cache.ok()) return dev_cache.status();
    cache_ = *dev_cache;
  } else {
    cache_ = host_cache_;
  }
  Result<KVCacheGeometry> geometry = describe_kv_cache(host_cache_);
  if (!geometry.ok()) return geometry.status();
  x_ = geometry->x;

  // ---- allocator and scheduler
  Result<BlockAllocator> allocator = BlockAllocator::create(num_blocks, c.seed);
  if (!allocator.ok()) {
    return invalid(fmt::format("{}: {}", blocks_flag(), allocator.status().message()));
  }
  allocator_.emplace(std::move(allocator).value());
  SchedulerConfig sc;
  sc.token_budget = c.token_budget;
  sc.max_seqs = c.max_seqs;
  sc.block_size = block_size_;
  sc.pool_name = blocks_flag();
  sc.prefix_sharing = sharing_;
  Result<Scheduler> scheduler = Scheduler::create(sc, specs_, &*allocator_);
  if (!scheduler.ok()) return scheduler.status();
  scheduler_.emplace(std::move(scheduler).value());
  sample_rng_seed_ = mix64(c.seed ^ 0xC0FFEEull);

  // ---- report header
  ReplayReport& r = report_;
  r.device = to_string(device);
  r.device_name = info->name;
  r.trace_name = trace_.name;
  r.trace_path = trace_.path;
  r.trace_format = trace_.format;
  r.trace_records = available;
  r.requests = c.requests;
  r.model = model;
  r.layout = c.layout;
  r.dtype = dtype_;
  r.kv_dtype = cache_dtype_;
  r.k_scale = k_scale;
  r.v_scale = v_scale;
  r.num_blocks = num_blocks;
  r.num_blocks_auto = c.num_blocks == 0;
  r.cache_bytes = static_cast<std::int64_t>(cache_bytes) * 2;
  r.token_budget = c.token_budget;
  r.max_seqs = c.max_seqs;
  r.max_prompt = c.max_prompt;
  r.max_output = c.max_output;
  r.max_model_len = max_model_len_;
  r.seed = c.seed;
  // The thread count the CPU backend will use (PlanOptions: 0 = every hardware thread).
  r.threads = c.threads > 0 ? c.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.verified = c.verify_rows > 0;
  r.softmax_scale = scale_;
  r.atol = tol_.atol;
  r.rtol = tol_.rtol;
  r.contiguous_blocks_per_request = (max_model_len_ + block_size_ - 1) / block_size_;
  r.prefix_sharing = sharing_;
  r.duration_s = c.duration_s;
  periodic_faults_ = c.fault_every > 0 && c.fault != FaultInjection::kNone;
  host_stale_.assign(static_cast<std::size_t>(num_blocks), 0);
  next_sample_s_ = c.sample_interval_s;
  r.contiguous_max_running = num_blocks / r.contiguous_blocks_per_request;
  return Status::Ok();
}

Status Replay::mirror_blocks(const std::vector<std::int32_t>& blocks, std::int64_t num_tokens) {
  if (!on_cuda_) return Status::Ok();
  const std::size_t es = dtype_size(cache_dtype_);
  const std::int64_t used = (num_tokens + block_size_ - 1) / block_size_;
  // Blocks are written only by write_kv (which marks them stale) once the mirror has them: a
  // full block is copied once, not at every check that reads it.
  std::vector<std::int64_t> stale;
  for (std::int64_t j = 0; j < used; ++j) {
    const std::int64_t b = blocks[j];
    if (!host_stale_[static_cast<std::size_t>(b)]) continue;
    host_stale_[static_cast<std::size_t>(b)] = 0;
    stale.push_back(b);
  }
  if (stale.empty()) return Status::Ok();
  // Whole pages (padding included: the stride is what separates blocks), gathered on the device
  // by copies that do not wait into one staging buffer, a run of adjacent blocks per copy, then
  // brought over in one transfer (a 126k-token request has 8k scattered blocks).
  std::sort(stale.begin(), stale.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;  // (first block, count)
  for (const std::int64_t b : stale) {
    if (!runs.empty() && runs.back().first + runs.back().second == b) {
      ++runs.back().second;
    } else {
      runs.emplace_back(b, 1);
    }
  }
  const auto count = static_cast<std::int64_t>(stale.size());
  for (const auto& [host, dev, view] :
       {std::make_tuple(host_k_.data(), static_cast<unsigned char*>(dev_k_.get()), &cache_.key),
        std::make_tuple(host_v_.data(), static_cast<unsigned char*>(dev_v_.get()),
                        &cache_.value)}) {
    const std::size_t page = static_cast<std::size_t>(view->stride(0)) * es;
    if (runs.size() < 4) {
      for (const auto& [b, n] : runs) {
        PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_host(host + b * page, dev + b * page, n * page));
      }
      continue;
    }
    PAGEDATTN_RETURN_IF_ERROR(dev_staging_.reserve(static_cast<std::size_t>(count) * page));
    auto* staging = static_cast<unsigned char*>(dev_staging_.get());
    std::int64_t at = 0;
    for (const auto& [b, n] : runs) {
      PAGEDATTN_RETURN_IF_ERROR(
          cuda::copy_device_to_device(staging + at * page, dev + b * page, n * page));
      at += n;
    }
    host_staging_.resize(static_cast<std::size_t>(count) * page);
    PAGEDATTN_RETURN_IF_ERROR(
        cuda::copy_to_host(host_staging_.data(), staging, static_cast<std::size_t>(count) * page));
    at = 0;
    for (const auto& [b, n] : runs) {
      std::memcpy(host + b * page, host_staging_.data() + at * page, n * page);
      at += n;
    }
  }
  return Status::Ok();
}

Status Replay::poison_blocks(const std::vector<std::int32_t>& blocks) {
  // Freed blocks go back to NaN: a kernel that reads past a sequence's end into a reused block
  // then reads NaN instead of a finished request's plausible stale values.
  const std::size_t es = dtype_size(cache_dtype_);
  if (!corrupted_slots_.empty()) {
    for (const std::int32_t b : blocks) {
      for (std::int64_t o = 0; o < block_size_; ++o) {
        corrupted_slots_.erase(static_cast<std::int64_t>(b) * block_size_ + o);
      }
    }
  }
  if (!on_cuda_) {
    for (const std::int32_t b : blocks) {
      for (unsigned char* host : {host_k_.data(), host_v_.data()}) {
        const std::size_t page = static_cast<std::size_t>(host_cache_.key.stride(0)) * es;
        fill_fast(host + static_cast<std::size_t>(b) * page, page, nan_);
      }
    }
    return Status::Ok();
  }
  // CUDA: the device pages are refilled from the poisoned pages (no host transfer, copies that
  // do not wait), a run of adjacent blocks per copy; the host mirror is not written but marked
  // stale, so that whatever reads it next (a check, a copy on write) fetches the poison.
  std::vector<std::int32_t> sorted(blocks);
  std::sort(sorted.begin(), sorted.end());
  const std::size_t page = static_cast<std::size_t>(cache_.key.stride(0)) * es;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1 &&
           static_cast<std::int64_t>(j - i) < poison_pages_) {
      ++j;
    }
    const std::size_t first = static_cast<std::size_t>(sorted[i]);
    for (unsigned char* dev : {static_cast<unsigned char*>(dev_k_.get()),
                               static_cast<unsigned char*>(dev_v_.get())}) {
      PAGEDATTN_RETURN_IF_ERROR(
          cuda::copy_device_to_device(dev + first * page, dev_poison_.get(), (j - i) * page));
    }
    for (std::size_t k = i; k < j; ++k) host_stale_[static_cast<std::size_t>(sorted[k])] = 1;
    i = j;
  }
  return Status::Ok();
}

Status Replay::copy_on_write(const BlockCopy& copy) {
  // Through the host mirror (copies are rare: one per request at most): the source's shared
  // slots into the new block, whose other slots keep their poison.
  // The destination too: its page goes back up whole, and its mirror may still be stale from
  // the poisoning (see poison_blocks).
  PAGEDATTN_RETURN_IF_ERROR(mirror_blocks({copy.src, copy.dst}, 2 * block_size_));
  const std::size_t es = dtype_size(cache_dtype_);
  for (int kv = 0; kv < 2; ++kv) {
    const bool is_key = kv == 0;
    const TensorView& view = is_key ? host_cache_.key : host_cache_.value;
    auto* base = static_cast<unsigned char*>(view.data);
    for (std::int64_t o = 0; o < copy.tokens; ++o) {
      for (std::int64_t h = 0; h < num_kv_heads_; ++h) {
        for (std::int64_t d = 0; d < head_size_; ++d) {
          const std::int64_t from = cache_offset(view, host_cache_.layout, is_key, x_, copy.src,
                                                 o, h, d);
          const std::int64_t to = cache_offset(view, host_cache_.layout, is_key, x_, copy.dst,
                                               o, h, d);
          std::memcpy(base + to * static_cast<std::int64_t>(es),
                      base + from * static_cast<std::int64_t>(es), es);
        }
      }
    }
    if (on_cuda_) {
      const std::size_t page = static_cast<std::size_t>(view.stride(0)) * es;
      unsigned char* dev = static_cast<unsigned char*>(is_key ? dev_k_.get() : dev_v_.get());
      PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(dev + copy.dst * page,
                                                     base + copy.dst * page, page));
    }
  }
  // A corrupted shared slot stays corrupted in the copy (the copy must be exact).
  for (std::int64_t o = 0; o < copy.tokens; ++o) {
    const auto it = corrupted_slots_.find(static_cast<std::int64_t>(copy.src) * block_size_ + o);
    if (it != corrupted_slots_.end()) {
      corrupted_slots_[static_cast<std::int64_t>(copy.dst) * block_size_ + o] = it->second;
    }
  }
  return Status::Ok();
}

std::int64_t Replay::replay_device_bytes() const {
  if (!on_cuda_) return 0;
  std::size_t n = dev_k_.capacity() + dev_v_.capacity() + dev_workspace_.capacity() +
                  dev_poison_.capacity() + dev_staging_.capacity();
  for (const StepBuffer* b : {&query_, &key_, &value_, &out_, &lse_, &slots_, &block_table_,
                              &seq_lens_, &qsl_}) {
    n += b->device.capacity();
  }
  return static_cast<std::int64_t>(n);
}

Status Replay::corrupt_cache(std::int64_t slot) {
  const std::int64_t off = cache_offset(host_cache_.key, host_cache_.layout, /*is_key=*/true, x_,
                                        slot / block_size_, slot % block_size_, 0, 0);
  const std::size_t es = dtype_size(cache_dtype_);
  auto* host = static_cast<unsigned char*>(host_cache_.key.data);
  if (on_cuda_) {
    PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_host(
        host + off * static_cast<std::int64_t>(es),
        static_cast<unsigned char*>(cache_.key.data) + off * static_cast<std::int64_t>(es), es));
  }
  // Written values lie in [-1, 1] (fp8: scaled into [-2, 2]); 7 is none of them.
  numeric::store_from_float(host, cache_dtype_, off, 7.0f);
  if (on_cuda_) {
    return cuda::copy_to_device(
        static_cast<unsigned char*>(cache_.key.data) + off * static_cast<std::int64_t>(es),
        host + off * static_cast<std::int64_t>(es), es);
  }
  return Status::Ok();
}
Status Replay::run_step(const StepBatch& batch) {
  const std::int64_t step = batch.step;
  const std::int64_t T = batch.num_tokens;
  const auto S = static_cast<std::int64_t>(batch.seqs.size());
  const std::int64_t H = num_heads_, KVH = num_kv_heads_, D = head_size_;
  const std::size_t esq = dtype_size(dtype_);
  std::int64_t W = 1;
  for (const ScheduledSeq& seq : batch.seqs) {
    W = std::max<std::int64_t>(W, scheduler_->request(seq.request).blocks.size());
  }
  table_width_ = W;
  // Copies-on-write first: a source block may take this step's writes past its shared slots,
  // and the copy must see it as it was (the mirror is refreshed from the device here).
  for (const BlockCopy& copy : batch.copies) {
    PAGEDATTN_RETURN_IF_ERROR(in_step(step, "copy on write", copy_on_write(copy)));
  }

  // ---- host tensors
  query_.resize(static_cast<std::size_t>(T * H * D) * esq);
  key_.resize(static_cast<std::size_t>(T * KVH * D) * esq);
  value_.resize(static_cast<std::size_t>(T * KVH * D) * esq);
  out_.resize(static_cast<std::size_t>(T * H * D) * esq);
  lse_.resize(static_cast<std::size_t>(T * H) * sizeof(float));
  slots_.resize(static_cast<std::size_t>(T) * sizeof(std::int64_t));
  block_table_.resize(static_cast<std::size_t>(S * W) * sizeof(std::int32_t));
  seq_lens_.resize(static_cast<std::size_t>(S) * sizeof(std::int32_t));
  qsl_.resize(static_cast<std::size_t>(S + 1) * sizeof(std::int32_t));
  auto* slots = slots_.as<std::int64_t>();
  auto* bt = block_table_.as<std::int32_t>();
  auto* sl = seq_lens_.as<std::int32_t>();
  auto* qsl = qsl_.as<std::int32_t>();
  qsl[0] = 0;
  std::int64_t row = 0;
  std::vector<std::int32_t> row_seq(static_cast<std::size_t>(T));
  for (std::int64_t s = 0; s < S; ++s) {
    const ScheduledSeq& seq = batch.seqs[s];
    const RequestState& r = scheduler_->request(seq.request);
    for (std::int64_t j = 0; j < seq.query_len; ++j, ++row) {
      const std::int64_t pos = seq.context_len + j;
      const std::int32_t block = r.blocks[pos / block_size_];
      // Sharing's invariant: a request writes only into blocks nobody else holds.
      if (allocator_->refcount(block) != 1) {
        return internal(fmt::format(
            "step {}: request {} writes position {} into block {}, which {} requests hold",
            step, seq.request, pos, block, allocator_->refcount(block)));
      }
      slots[row] = static_cast<std::int64_t>(block) * block_size_ + pos % block_size_;
      if (on_cuda_) host_stale_[static_cast<std::size_t>(block)] = 1;
      row_seq[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(s);
      // Keys attended by this row (causal): positions 0 .. pos.
      report_.keys_attended += pos + 1;
    }
    // Entries past the sequence's blocks are never read; 0 keeps them valid ids anyway.
    std::fill(bt + s * W, bt + (s + 1) * W, 0);
    std::copy(r.blocks.begin(), r.blocks.end(), bt + s * W);
    sl[s] = static_cast<std::int32_t>(seq.context_len + seq.query_len);
    qsl[s + 1] = static_cast<std::int32_t>(row);
  }
  // Q/K/V values: millions of generated elements in a long prefill step, so on every thread.
  const auto t_inputs = std::chrono::steady_clock::now();
  parallel_for(T, std::max(1, report_.threads), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const ScheduledSeq& seq = batch.seqs[static_cast<std::size_t>(row_seq[row])];
      const RequestSpec& spec = scheduler_->request(seq.request).spec;
      const std::int64_t pos = seq.context_len + (row - qsl[row_seq[row]]);
      fill_row(query_.host.data(), dtype_, row * H * D,
               row_key(config_.seed, Stream::kQuery, seq.request, pos), H * D);
      fill_row(key_.host.data(), dtype_, row * KVH * D,
               kv_row_key(config_.seed, Stream::kKey, spec, seq.request, pos), KVH * D);
      fill_row(value_.host.data(), dtype_, row * KVH * D,
               kv_row_key(config_.seed, Stream::kValue, spec, seq.request, pos), KVH * D);
    }
  });
  // Outputs start as NaN so that a row the kernel fails to write cannot pass.
  fill_fast(out_.host.data(), out_.host.size(), poison_element(dtype_));
  std::fill(lse_.as<float>(), lse_.as<float>() + T * H, std::numeric_limits<float>::quiet_NaN());
  for (StepBuffer* b : {&query_, &key_, &value_, &out_, &lse_, &slots_, &block_table_,
                        &seq_lens_, &qsl_}) {
    PAGEDATTN_RETURN_IF_ERROR(in_step(step, "copying inputs to the device", b->upload(on_cuda_)));
  }
  report_.inputs_s += seconds_since(t_inputs);

  // ---- write the new tokens' K/V
  const TensorView key = TensorView::contiguous(key_.data(on_cuda_), dtype_, {T, KVH, D}, device_);
  const TensorView value =
      TensorView::contiguous(value_.data(on_cuda_), dtype_, {T, KVH, D}, device_);
  const TensorView slot_mapping =
      TensorView::contiguous(slots_.data(on_cuda_), DType::kInt64, {T}, device_);
  WriteKVOptions write_options;
  write_options.host_slot_mapping = TensorView::contiguous(slots_.host.data(), DType::kInt64, {T});
  auto t = std::chrono::steady_clock::now();
  Status st = write_kv(key, value, slot_mapping, cache_, nullptr, write_options);
  if (st.ok() && on_cuda_) st = cuda::device_synchronize();
  report_.write_kv_s += seconds_since(t);
  PAGEDATTN_RETURN_IF_ERROR(in_step(step, "write_kv", st));
  // Faults: at step 0 (both kinds for kBoth), or at every fault_every-th step (kBoth: the
  // kinds by turns).
  bool inject_output = false, inject_cache = false;
  if (config_.fault != FaultInjection::kNone &&
      (config_.fault_every > 0 ? step % config_.fault_every == 0 : step == 0)) {
    const std::int64_t turn = config_.fault_every > 0 ? step / config_.fault_every : 0;
    const bool both = config_.fault == FaultInjection::kBoth;
    inject_output = config_.fault == FaultInjection::kOutput ||
                    (both && (config_.fault_every == 0 || turn % 2 == 0));
    inject_cache = config_.fault == FaultInjection::kCache ||
                   (both && (config_.fault_every == 0 || turn % 2 == 1));
  }
  output_fault_now_ = false;
  if (inject_cache) {
    PAGEDATTN_RETURN_IF_ERROR(in_step(step, "injecting a cache fault", corrupt_cache(slots[0])));
    corrupted_slots_[slots[0]] = static_cast<std::int64_t>(fault_detected_.size());
    fault_detected_.push_back(0);
    ++report_.cache_faults_injected;
  }

  // ---- plan and run attention
  AttentionArgs args;
  args.query = TensorView::contiguous(query_.data(on_cuda_), dtype_, {T, H, D}, device_);
  args.cache = cache_;
  args.block_table =
      TensorView::contiguous(block_table_.data(on_cuda_), DType::kInt32, {S, W}, device_);
  args.seq_lens = TensorView::contiguous(seq_lens_.data(on_cuda_), DType::kInt32, {S}, device_);
  args.query_start_loc =
      TensorView::contiguous(qsl_.data(on_cuda_), DType::kInt32, {S + 1}, device_);
  args.out = TensorView::contiguous(out_.data(on_cuda_), dtype_, {T, H, D}, device_);
  args.lse = TensorView::contiguous(lse_.data(on_cuda_), DType::kFloat32, {T, H}, device_);
  args.params.scale = scale_;
  HostMetadata host;
  host.block_table = TensorView::contiguous(block_table_.host.data(), DType::kInt32, {S, W});
  host.seq_lens = TensorView::contiguous(seq_lens_.host.data(), DType::kInt32, {S});
  host.query_start_loc = TensorView::contiguous(qsl_.host.data(), DType::kInt32, {S + 1});
  PlanOptions plan_options;
  plan_options.num_threads = config_.threads;
  plan_options.batch_invariant = config_.batch_invariant;
  t = std::chrono::steady_clock::now();
  Result<AttentionPlan> plan = plan_attention(args, host, plan_options);
  report_.plan_s += seconds_since(t);
  if (!plan.ok()) return in_step(step, "plan_attention", plan.status());
  if (report_.kernel.empty()) {
    const KernelChoice& choice = plan->choice();
    report_.kernel = to_string(choice.kernel);
    report_.cache_access = choice.access == CacheAccess::kNative ? "native" : "strided";
    report_.tile_tokens = choice.tile_tokens;
    report_.num_splits = choice.num_splits;
    report_.kernel_reason = choice.reason;
  }
  const std::size_t workspace_bytes = plan->workspace_bytes();
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    if (on_cuda_) {
      PAGEDATTN_RETURN_IF_ERROR(
          in_step(step, "allocating the workspace", dev_workspace_.reserve(workspace_bytes)));
      workspace = dev_workspace_.get();
    } else {
      if (cpu_workspace_.size() < workspace_bytes) cpu_workspace_.resize(workspace_bytes);
      workspace = cpu_workspace_.data();
    }
  }
  t = std::chrono::steady_clock::now();
  st = run_attention(*plan, args, workspace, workspace_bytes, nullptr);
  if (st.ok() && on_cuda_) st = cuda::device_synchronize();
  report_.attention_s += seconds_since(t);
  PAGEDATTN_RETURN_IF_ERROR(in_step(step, "run_attention", st));
  PAGEDATTN_RETURN_IF_ERROR(in_step(step, "copying outputs to the host", out_.download(on_cuda_)));
  PAGEDATTN_RETURN_IF_ERROR(in_step(step, "copying outputs to the host", lse_.download(on_cuda_)));
  if (inject_output) {
    output_fault_now_ = true;
    output_fault_index_ = static_cast<std::int64_t>(fault_detected_.size());
    fault_detected_.push_back(0);
    ++report_.output_faults_injected;
    for (std::int64_t i = 0; i < T; ++i) {
      const float v = numeric::load_as_float(out_.host.data(), dtype_, i * H * D);
      numeric::store_from_float(out_.host.data(), dtype_, i * H * D, v + 1.0f);
    }
  }

  // ---- verification
  if (config_.verify_rows > 0) {
    t = std::chrono::steady_clock::now();
    PAGEDATTN_RETURN_IF_ERROR(verify_rows(batch));
    report_.oracle_s += seconds_since(t);
    const auto t_cache = std::chrono::steady_clock::now();
    for (const ScheduledSeq& seq : batch.seqs) {
      if (scheduler_->finishes(seq)) {
        PAGEDATTN_RETURN_IF_ERROR(check_request_cache(seq, step));
      }
    }
    report_.cache_check_s += seconds_since(t_cache);
    report_.verify_s += seconds_since(t);
  }
  return Status::Ok();
}

void Replay::finish_report() {
  ReplayReport& r = report_;
  r.attention_flops = 4.0 * static_cast<double>(r.keys_attended) * num_heads_ * head_size_;
  r.peak_blocks_used = allocator_->peak_used();
  r.peak_running = scheduler_->peak_running();
  r.contiguous_blocks_at_peak = r.peak_running * r.contiguous_blocks_per_request;
  r.requests = scheduler_->num_requests();
  r.prefix_hit_blocks = scheduler_->prefix_hit_blocks();
  r.prefix_hit_tokens = scheduler_->prefix_hit_tokens();
  r.prefix_copies = scheduler_->prefix_copies();
  r.faults_injected = static_cast<std::int64_t>(fault_detected_.size());
  r.faults_detected = std::count(fault_detected_.begin(), fault_detected_.end(), 1);
  r.wall_s = seconds_since(t0_);
}

void Replay::take_sample() {
  finish_report();
  ReplayReport& r = report_;
  SoakSample s;
  s.elapsed_s = r.wall_s;
  s.requests_finished = scheduler_->num_finished();
  s.steps = r.steps;
  s.tokens = tokens_done_;
  const std::int64_t checks = r.rows_checked + r.requests_cache_checked;
  s.checks_detected_fault = r.rows_fault_detected + r.requests_fault_detected;
  s.checks_failed = r.rows_failed - r.rows_fault_detected + r.requests_cache_failed;
  s.checks_passed = checks - s.checks_failed - s.checks_detected_fault;
  s.blocks_used = allocator_->num_used();
  s.peak_blocks_used = allocator_->peak_used();
  s.shared_blocks = scheduler_->shared_blocks_now();
  s.replay_device_bytes = replay_device_bytes();
  if (on_cuda_) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cuda::device_memory_info(&free_bytes, &total_bytes, device_.index).ok()) {
      s.device_used_bytes = static_cast<std::int64_t>(total_bytes - free_bytes);
      r.device_used_min = r.device_used_min < 0 ? s.device_used_bytes
                                                : std::min(r.device_used_min, s.device_used_bytes);
      r.device_used_max = std::max(r.device_used_max, s.device_used_bytes);
    }
  }
  r.blocks_used_min =
      r.blocks_used_min < 0 ? s.blocks_used : std::min(r.blocks_used_min, s.blocks_used);
  r.blocks_used_max = std::max(r.blocks_used_max, s.blocks_used);
  r.peak_shared_blocks = std::max(r.peak_shared_blocks, s.shared_blocks);
  r.samples.push_back(s);
}

ReplayProgress Replay::progress_now() const {
  ReplayProgress p;
  p.step = report_.steps;
  p.finished = scheduler_->num_finished();
  p.total = scheduler_->num_requests();
  p.running = scheduler_->num_running();
  p.waiting = scheduler_->num_waiting();
  p.blocks_used = allocator_->num_used();
  p.num_blocks = allocator_->num_blocks();
  p.tokens = tokens_done_;
  p.elapsed_s = seconds_since(t0_);
  p.verified_ok = report_.pass;
  return p;
}

Result<ReplayReport> Replay::run() {
  t0_ = std::chrono::steady_clock::now();
  PAGEDATTN_RETURN_IF_ERROR(setup());
  ReplayReport& r = report_;
  std::int64_t& tokens_done = tokens_done_;
  const bool sampling = config_.sample_interval_s > 0;
  if (sampling) take_sample();
  bool admission_closed = false;
  while (!scheduler_->done()) {
    // A soak keeps the queue fed, cycling through the trace, until its time is up. A short
    // queue is enough (admission takes what the budget and the pool allow each step) and
    // keeps what must still drain after the time is up small.
    if (config_.duration_s > 0 && !admission_closed) {
      if (seconds_since(t0_) < config_.duration_s) {
        while (scheduler_->num_waiting() < 16) {
          Result<RequestSpec> spec = make_spec(next_request_);
          if (!spec.ok()) return spec.status();
          PAGEDATTN_RETURN_IF_ERROR(scheduler_->add_request(std::move(spec).value()));
        }
      } else {
        // The deadline: nothing more is admitted; what runs finishes (and is checked).
        r.requests_not_admitted = scheduler_->drop_waiting();
        uncount_dropped(r.requests_not_admitted);
        admission_closed = true;
        if (scheduler_->done()) break;
      }
    }
    Result<StepBatch> scheduled = scheduler_->schedule();
    if (!scheduled.ok()) return scheduled.status();
    const StepBatch& batch = *scheduled;
    // KV held after this step's writes: everything running has `computed` tokens plus the new.
    std::int64_t kv_tokens = batch.num_tokens;
    for (const std::int32_t id : scheduler_->running()) {
      kv_tokens += scheduler_->request(id).computed;
    }
    r.peak_kv_tokens = std::max(r.peak_kv_tokens, kv_tokens);
    for (const ScheduledSeq& seq : batch.seqs) {
      if (seq.prefill) {
        r.prefill_tokens += seq.query_len;
        // The chunk that completes the prompt samples the first output token.
        const RequestSpec& spec = scheduler_->request(seq.request).spec;
        if (seq.context_len + seq.query_len == spec.prompt_tokens) {
          ++r.generated_tokens;
        }
      } else {
        r.decode_tokens += 1;
        ++r.generated_tokens;
      }
    }
    r.prefill_chunks += batch.num_prefill;
    r.mixed_steps += batch.num_prefill > 0 && batch.num_decode > 0;
    r.memory_wait_steps += batch.admission_blocked_by_memory;
    r.max_batch_tokens = std::max(r.max_batch_tokens, batch.num_tokens);
    r.max_batch_seqs = std::max<std::int64_t>(r.max_batch_seqs, batch.seqs.size());

    PAGEDATTN_RETURN_IF_ERROR(run_step(batch));

    Result<StepOutcome> outcome = scheduler_->complete(batch);
    if (!outcome.ok()) return outcome.status();
    const auto t_poison = std::chrono::steady_clock::now();
    PAGEDATTN_RETURN_IF_ERROR(in_step(batch.step, "poisoning freed blocks",
                                      poison_blocks(outcome->freed_blocks)));
    r.poison_s += seconds_since(t_poison);
    ++r.steps;
    tokens_done += batch.num_tokens;
    if (progress_) {
      ReplayProgress p = progress_now();
      if (sampling && p.elapsed_s >= next_sample_s_) {
        take_sample();
        p.sample = true;
        p.report = &report_;
        next_sample_s_ = p.elapsed_s + config_.sample_interval_s;
      }
      progress_(p);
    } else if (sampling && seconds_since(t0_) >= next_sample_s_) {
      take_sample();
      next_sample_s_ = seconds_since(t0_) + config_.sample_interval_s;
    }
  }
  if (allocator_->num_used() != 0) {
    return internal(fmt::format("replay finished with {} blocks still allocated",
                                allocator_->num_used()));
  }
  if (scheduler_->prefix_table_size() != 0) {
    return internal(fmt::format("replay finished with {} prefix-table entries left",
                                scheduler_->prefix_table_size()));
  }
  if (sampling) {
    take_sample();
    // The closing sample is reported like the periodic ones, so that a soak shorter than its
    // interval still prints (and writes) one line with its final counters.
    if (progress_) {
      ReplayProgress p = progress_now();
      p.sample = true;
      p.report = &report_;
      progress_(p);
    }
  }
  finish_report();
  if (periodic_faults_) {
    // Pass: every injection detected, nothing else failed.
    r.pass = r.unexpected_failures == 0 && r.faults_detected == r.faults_injected;
    if (r.faults_detected != r.faults_injected && r.first_failure.empty()) {
      r.first_failure = fmt::format("{} of {} injected faults went undetected",
                                    r.faults_injected - r.faults_detected, r.faults_injected);
    }
  }
  return report_;
}

}  // namespace replay_internal

using replay_internal::Replay;
using detail::invalid;

Result<ReplayReport> run_replay(const ReplayConfig& config, const Trace& trace,
                                const ProgressFn& progress) {
  // Out of memory (a huge --num-blocks) is an input problem, not a crash: no exception may
  // leave this function.
  try {
    Replay replay(config, trace, progress);
    return replay.run();
  } catch (const std::bad_alloc&) {
    return invalid(
        "out of host memory: reduce --num-blocks, --requests, --max-prompt or --token-budget");
  } catch (const std::length_error&) {
    return invalid(
        "out of host memory: reduce --num-blocks, --requests, --max-prompt or --token-budget");
  }
}

Result<ReplayReport> run_replay(const ReplayConfig& config, const ProgressFn& progress) {
  Result<Trace> trace = load_trace(config.trace);
  if (!trace.ok()) return trace.status();
  return run_replay(config, *trace, progress);
}

}  // namespace pagedattn::serving
