// The replay's checks (see replay_state.h): every step's sampled rows against the oracle,
// and each finished request's cache contents regenerated and compared bit for bit.
#include "src/serving/replay_state.h"

namespace pagedattn::serving::replay_internal {

Status Replay::check_request_cache(const ScheduledSeq& seq, std::int64_t step) {
  // Every K/V element of the request, compared bit for bit with what write_kv had to store:
  // catches writer bugs and any block shared with, or overwritten by, another request during
  // this request's life (corruption persists until the finish, when this runs).
  const std::int32_t request = seq.request;
  const RequestState& r = scheduler_->request(request);
  // complete() has not run: the tokens of this, the last, step are in the cache but not yet
  // counted in r.computed.
  const std::int64_t tokens = seq.context_len + seq.query_len;
  PAGEDATTN_RETURN_IF_ERROR(mirror_blocks(r.blocks, tokens));
  const std::size_t es = dtype_size(cache_dtype_);
  const std::int64_t row = static_cast<std::int64_t>(num_kv_heads_) * head_size_;
  const RequestSpec& spec = r.spec;
  // Positions split over the CPU threads (a 126k-token request has 10^8 elements); each part
  // keeps its count and its first mismatch, merged in position order so the report is the
  // same for every thread count.
  struct Part {
    std::int64_t mismatches = 0;
    std::int64_t first_pos = -1;
    std::string first;
    std::vector<std::int64_t> injected;  // corrupted slots found (injections detected)
  };
  const std::int64_t workers = std::max<std::int64_t>(
      1, std::min<std::int64_t>(report_.threads, tokens / 256 + 1));
  std::vector<Part> parts(static_cast<std::size_t>(workers));
  auto check = [&](std::int64_t begin, std::int64_t end, Part& part) {
    std::vector<unsigned char> rounded(static_cast<std::size_t>(row) * dtype_size(dtype_));
    unsigned char expected[4];
    for (std::int64_t pos = begin; pos < end; ++pos) {
      const std::int64_t block = r.blocks[pos / block_size_];
      const std::int64_t offset = pos % block_size_;
      for (int kv = 0; kv < 2; ++kv) {
        const bool is_key = kv == 0;
        const TensorView& view = is_key ? host_cache_.key : host_cache_.value;
        const float scale = is_key ? host_cache_.k_scale : host_cache_.v_scale;
        const unsigned char* base = static_cast<const unsigned char*>(view.data);
        // Same dtype and no fp8 scale: what write_kv stores is the generated value's bits.
        const bool whole_heads = cache_dtype_ == dtype_ && !is_fp8(cache_dtype_) &&
                                 host_cache_.layout != KVLayout::kSplit && view.stride(3) == 1;
        fill_row(rounded.data(), dtype_, 0,
                 kv_row_key(config_.seed, is_key ? Stream::kKey : Stream::kValue, spec, request,
                            pos),
                 row);
        for (int h = 0; h < num_kv_heads_; ++h) {
          if (whole_heads) {
            // The head's dims are adjacent and stored as generated: one comparison, and the
            // element loop below only to name a mismatch.
            const std::int64_t off0 = cache_offset(view, host_cache_.layout, is_key, x_, block,
                                                   offset, h, 0);
            if (std::memcmp(base + off0 * static_cast<std::int64_t>(es),
                            rounded.data() + static_cast<std::size_t>(h) * head_size_ * es,
                            static_cast<std::size_t>(head_size_) * es) == 0) {
              continue;
            }
          }
          for (int d = 0; d < head_size_; ++d) {
            float v = numeric::load_as_float(rounded.data(), dtype_,
                                             static_cast<std::int64_t>(h) * head_size_ + d);
            if (is_fp8(cache_dtype_)) v /= scale;
            numeric::store_from_float(expected, cache_dtype_, 0, v);
            const std::int64_t off = cache_offset(view, host_cache_.layout, is_key, x_, block,
                                                  offset, h, d);
            if (std::memcmp(base + off * static_cast<std::int64_t>(es), expected, es) == 0) {
              continue;
            }
            const std::int64_t slot = block * block_size_ + offset;
            if (is_key && h == 0 && d == 0 && corrupted_slots_.count(slot) != 0) {
              part.injected.push_back(slot);
              if (periodic_faults_) continue;  // the injection's, not a failure
            }
            ++part.mismatches;
            if (part.first_pos < 0) {
              part.first_pos = pos;
              part.first = fmt::format(
                  "step {}: cache of request {} differs from what was written: {} position {} "
                  "(physical block {}, offset {}, {} reference{}) kv head {} dim {}: stored {} "
                  "expected {}",
                  step, request, is_key ? "key" : "value", pos, block, offset,
                  allocator_->refcount(static_cast<std::int32_t>(block)),
                  allocator_->refcount(static_cast<std::int32_t>(block)) == 1 ? "" : "s", h, d,
                  numeric::load_as_float(base, cache_dtype_, off),
                  numeric::load_as_float(expected, cache_dtype_, 0));
            }
          }
        }
      }
    }
  };
  parallel_for(workers, workers, [&](std::int64_t wb, std::int64_t we) {
    for (std::int64_t w = wb; w < we; ++w) {
      check(tokens * w / workers, tokens * (w + 1) / workers, parts[static_cast<std::size_t>(w)]);
    }
  });
  std::int64_t mismatches = 0;
  bool injected = false;
  for (Part& part : parts) {
    mismatches += part.mismatches;
    if (part.first_pos >= 0 && report_.first_failure.empty()) record_failure(part.first);
    for (const std::int64_t slot : part.injected) {
      fault_detected_[static_cast<std::size_t>(corrupted_slots_.at(slot))] = 1;
      injected = true;
    }
  }
  report_.cache_mismatches += mismatches;
  if (mismatches > 0) {
    report_.pass = false;
    report_.unexpected_failures += mismatches;
  }
  ++report_.requests_cache_checked;
  // A check that found only an injected fault detected it: not a failed check.
  report_.requests_cache_failed += mismatches > 0;
  report_.requests_fault_detected += mismatches == 0 && injected;
  report_.cache_tokens_checked += tokens;
  return Status::Ok();
}

Status Replay::verify_rows(const StepBatch& batch) {
  const std::int64_t T = batch.num_tokens;
  const std::int32_t* qsl = qsl_.as<std::int32_t>();
  const std::int64_t n_want = std::min<std::int64_t>(config_.verify_rows, T);
  SplitMix64 rng =
      detail::serving_rng(sample_rng_seed_ ^ mix64(static_cast<std::uint64_t>(batch.step) + 1));

  // ---- the sample: one decode row and one prefill row when the step has them (the two code
  // paths of a mixed batch), then uniformly random rows.
  std::vector<std::uint8_t> taken(static_cast<std::size_t>(T), 0);
  std::vector<std::int64_t> picks;
  for (const bool prefill : {false, true}) {
    std::int64_t count = 0;
    for (const ScheduledSeq& seq : batch.seqs) count += seq.prefill == prefill ? seq.query_len : 0;
    if (count == 0) continue;
    std::int64_t k = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(count)));
    for (std::size_t s = 0; s < batch.seqs.size(); ++s) {
      const ScheduledSeq& seq = batch.seqs[s];
      if (seq.prefill != prefill) continue;
      if (k < seq.query_len) {
        picks.push_back(qsl[s] + k);
        taken[static_cast<std::size_t>(qsl[s] + k)] = 1;
        break;
      }
      k -= seq.query_len;
    }
  }
  std::vector<std::int64_t> rest;
  rest.reserve(static_cast<std::size_t>(T));
  for (std::int64_t r = 0; r < T; ++r) {
    if (!taken[static_cast<std::size_t>(r)]) rest.push_back(r);
  }
  for (std::int64_t i = 0; static_cast<std::int64_t>(picks.size()) < n_want; ++i) {
    const std::int64_t n_rest = static_cast<std::int64_t>(rest.size());
    const auto j = i + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(n_rest - i)));
    std::swap(rest[i], rest[j]);
    picks.push_back(rest[i]);
  }
  std::sort(picks.begin(), picks.end());
  const auto n = static_cast<std::int64_t>(picks.size());

  // ---- the oracle's sub-batch: each sampled row becomes a one-row sequence whose seq_len
  // ends at that row's position, over the same block-table row. Its q_pos and therefore its
  // keys are exactly those of the row in the full batch, at a cost of one row.
  const std::int64_t H = num_heads_, D = head_size_, W = table_width_;
  const std::size_t esq = dtype_size(dtype_);
  std::vector<unsigned char> q_ref(static_cast<std::size_t>(n * H * D) * esq);
  std::vector<std::int32_t> bt_ref(static_cast<std::size_t>(n * W));
  std::vector<std::int32_t> sl_ref(static_cast<std::size_t>(n));
  std::vector<std::int32_t> qsl_ref(static_cast<std::size_t>(n + 1));
  std::vector<float> out_ref(static_cast<std::size_t>(n * H * D));
  std::vector<float> lse_ref(static_cast<std::size_t>(n * H));
  std::vector<std::size_t> row_seq(static_cast<std::size_t>(n));
  std::vector<std::uint8_t> mirrored(batch.seqs.size(), 0);
  const std::int32_t* bt = block_table_.as<std::int32_t>();
  for (std::int64_t p = 0; p < n; ++p) {
    const std::int64_t row = picks[p];
    const auto s = static_cast<std::size_t>(
        std::upper_bound(qsl, qsl + batch.seqs.size() + 1, static_cast<std::int32_t>(row)) - qsl -
        1);
    const ScheduledSeq& seq = batch.seqs[s];
    row_seq[p] = s;
    if (!mirrored[s]) {
      PAGEDATTN_RETURN_IF_ERROR(
          in_step(batch.step, "copying cache blocks to the host",
                  mirror_blocks(scheduler_->request(seq.request).blocks,
                                seq.context_len + seq.query_len)));
      mirrored[s] = 1;
    }
    std::memcpy(q_ref.data() + static_cast<std::size_t>(p * H * D) * esq,
                query_.host.data() + static_cast<std::size_t>(row * H * D) * esq,
                static_cast<std::size_t>(H * D) * esq);
    std::copy(bt + s * W, bt + (s + 1) * W, bt_ref.begin() + p * W);
    sl_ref[p] = static_cast<std::int32_t>(seq.context_len + (row - qsl[s]) + 1);
    qsl_ref[p + 1] = static_cast<std::int32_t>(p + 1);
  }
  // The oracle is naive and single-threaded by design; the sampled rows and the heads are
  // independent, so (row, query head) tasks go to the CPU threads from a shared counter: two
  // long-context rows (a soak's 126k-token contexts) make 2 x num_heads tasks, enough to keep
  // every thread busy however uneven the rows. Each head's result does not depend on which
  // other heads share the call.
  const std::int64_t threads = std::max(1, report_.threads);
  const std::int64_t KVH = num_kv_heads_, G = H / KVH;
  const std::int64_t tasks = n * H;
  std::vector<Status> statuses(static_cast<std::size_t>(tasks));
  auto oracle = [&](std::int64_t task) {
    const std::int64_t begin = task / H;
    const std::int64_t rows = 1;
    const std::int64_t h0 = task % H, hn = 1;
    const std::int64_t kv0 = h0 / G, kvn = 1;
    AttentionArgs ref;
    ref.query = TensorView::strided(
        q_ref.data() + static_cast<std::size_t>((begin * H + h0) * D) * esq, dtype_,
        {rows, hn, D}, {H * D, D, 1});
    ref.cache = host_cache_;
    // The head kv0 of the cache: same pages, the head dimension narrowed.
    const int head_dim = host_cache_.layout == KVLayout::kNHD ? 2 : 1;
    for (TensorView* t : {&ref.cache.key, &ref.cache.value}) {
      t->data = static_cast<unsigned char*>(t->data) +
                kv0 * t->strides[head_dim] * static_cast<std::int64_t>(dtype_size(t->dtype));
      t->shape[head_dim] = kvn;
    }
    ref.block_table =
        TensorView::contiguous(bt_ref.data() + begin * W, DType::kInt32, {rows, W});
    ref.seq_lens = TensorView::contiguous(sl_ref.data() + begin, DType::kInt32, {rows});
    // Every sub-batch row has query_len 1, so qsl_ref[0 .. rows] = 0 .. rows serves any row.
    ref.query_start_loc = TensorView::contiguous(qsl_ref.data(), DType::kInt32, {rows + 1});
    ref.out = TensorView::strided(out_ref.data() + (begin * H + h0) * D, DType::kFloat32,
                                  {rows, hn, D}, {H * D, D, 1});
    ref.lse = TensorView::strided(lse_ref.data() + begin * H + h0, DType::kFloat32, {rows, hn},
                                  {H, 1});
    ref.params.scale = scale_;
    statuses[static_cast<std::size_t>(task)] = reference_attention(ref);
  };
  std::atomic<std::int64_t> next_task{0};
  parallel_for(threads, threads, [&](std::int64_t, std::int64_t) {
    for (std::int64_t task; (task = next_task.fetch_add(1)) < tasks;) oracle(task);
  });
  for (const Status& st : statuses) {
    PAGEDATTN_RETURN_IF_ERROR(in_step(batch.step, "reference_attention", st));
  }

  // ---- compare: |got - ref| <= atol + rtol * |ref|; NaN never passes.
  const float* lse_got = lse_.as<float>();
  // A periodic output fault's failures are the injection's: counted, not a failed run.
  const bool expected_failures = periodic_faults_ && output_fault_now_;
  std::int64_t step_rows_failed = 0;
  for (std::int64_t p = 0; p < n; ++p) {
    bool row_failed = false;
    const std::int64_t row = picks[p];
    const ScheduledSeq& seq = batch.seqs[row_seq[p]];
    const std::int64_t pos = seq.context_len + (row - qsl[row_seq[p]]);
    auto check = [&](double got, double want, const char* what, std::int64_t h, std::int64_t d) {
      const double err = std::fabs(got - want);
      const double bound = tol_.atol + tol_.rtol * std::fabs(want);
      ++report_.elements_checked;
      if (expected_failures && !(err <= bound)) {
        // The injection's: counted, kept out of the error statistics.
        ++report_.elements_failed;
        row_failed = true;
        return;
      }
      if (std::isfinite(err)) {
        report_.max_abs_error = std::max(report_.max_abs_error, err);
        report_.worst_ratio = std::max(report_.worst_ratio, err / bound);
      } else {
        report_.worst_ratio = std::numeric_limits<double>::infinity();
      }
      if (!(err <= bound)) {
        ++report_.elements_failed;
        row_failed = true;
        ++report_.unexpected_failures;
        if (report_.first_failure.empty()) {
          record_failure(fmt::format(
              "step {}: request {} ({} row, position {}) {} head {}{}: got {} expected {} "
              "(|error| {:.3g} > {:.3g})",
              batch.step, seq.request, seq.prefill ? "prefill" : "decode", pos, what, h,
              d >= 0 ? fmt::format(" dim {}", d) : std::string(), got, want, err, bound));
        }
        report_.pass = false;
      }
    };
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) {
        check(numeric::load_as_float(out_.host.data(), dtype_, (row * H + h) * D + d),
              out_ref[static_cast<std::size_t>((p * H + h) * D + d)], "out", h, d);
      }
      check(lse_got[row * H + h], lse_ref[static_cast<std::size_t>(p * H + h)], "lse", h, -1);
    }
    ++report_.rows_checked;
    (seq.prefill ? report_.prefill_rows_checked : report_.decode_rows_checked) += 1;
    step_rows_failed += row_failed;
  }
  report_.rows_failed += step_rows_failed;
  if (expected_failures) report_.rows_fault_detected += step_rows_failed;
  if (output_fault_now_ && step_rows_failed > 0) {
    fault_detected_[static_cast<std::size_t>(output_fault_index_)] = 1;
  }
  return Status::Ok();
}

}  // namespace pagedattn::serving::replay_internal
