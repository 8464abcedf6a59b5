// Prefix sharing and the soak mode of the trace replay (src/serving): Mooncake hash_ids,
// reference-counted blocks, the scheduler's prefix table with copy-on-write of a partial last
// block, blocks freed at their last user, saved blocks on a small synthetic trace, attention
// with shared blocks equal to attention over private copies, and periodic fault injection.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/serving/replay.h"
#include "src/serving/trace.h"
#include "src/testing/fill.h"

namespace pagedattn::serving {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/pagedattn_prefix_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// ------------------------------------------------------------------------------ trace

TEST(PrefixTrace, MooncakeHashIdsAreParsed) {
  std::istringstream in(
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [4, 7]}\n"
      "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 2}\n");
  Result<std::vector<TraceRecord>> r = parse_mooncake_jsonl(in, "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].hash_ids, (std::vector<std::int64_t>{4, 7}));
  EXPECT_TRUE((*r)[1].hash_ids.empty());
  // Ids past the prompt's blocks name no token: dropped.
  std::istringstream extra(
      "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [0, 1]}\n");
  EXPECT_EQ(parse_mooncake_jsonl(extra, "x.jsonl").value()[0].hash_ids,
            (std::vector<std::int64_t>{0}));

  Result<Trace> shipped = load_trace("mooncake", 3);
  ASSERT_TRUE(shipped.ok()) << shipped.status().to_string();
  EXPECT_TRUE(shipped->has_hash_ids);
  EXPECT_EQ(shipped->records[0].hash_ids.size(), 14u);  // 6758 tokens = 14 blocks of 512
  EXPECT_FALSE(load_trace("azure-conv", 3)->has_hash_ids);
}

TEST(PrefixTrace, BadHashIdsNameTheLine) {
  const char* bads[][2] = {
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": 3}",
       "expected an array of integers"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [-1]}",
       "hash_ids[0] = -1"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1.5]}",
       "hash_ids[0] = 1.5"},
  };
  for (const auto& bad : bads) {
    SCOPED_TRACE(bad[0]);
    std::istringstream in(std::string("\n") + bad[0] + "\n");
    Result<std::vector<TraceRecord>> r = parse_mooncake_jsonl(in, "bad.jsonl");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), "bad.jsonl:2: ")) << r.status().message();
    EXPECT_TRUE(contains(r.status().message(), bad[1])) << r.status().message();
  }
}

// ------------------------------------------------------------------------------ allocator

TEST(PrefixAllocator, ReferenceCountsReturnABlockAtItsLastRelease) {
  BlockAllocator a = BlockAllocator::create(4, 1).value();
  const std::int32_t b = a.allocate().value();
  EXPECT_EQ(a.refcount(b), 1);
  ASSERT_TRUE(a.retain(b).ok());
  ASSERT_TRUE(a.retain(b).ok());
  EXPECT_EQ(a.refcount(b), 3);
  EXPECT_FALSE(a.release(b).value());
  EXPECT_FALSE(a.release(b).value());
  EXPECT_EQ(a.num_used(), 1);
  EXPECT_TRUE(a.is_allocated(b));
  EXPECT_TRUE(a.release(b).value());  // the last one frees it
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.refcount(b), 0);
  EXPECT_FALSE(a.release(b).ok());  // double free
  EXPECT_FALSE(a.retain(b).ok());   // a free block cannot be shared
  EXPECT_FALSE(a.retain(99).ok());
}

// ------------------------------------------------------------------------------ scheduler

// Requests whose prompts share their first `shared` tokens (one chain entry) and then differ.
RequestSpec prefixed(std::int64_t prompt, std::int64_t output, std::uint64_t chain,
                     std::int64_t shared) {
  RequestSpec s;
  s.prompt_tokens = prompt;
  s.output_tokens = output;
  s.prefix_chain = {chain};
  s.prefix_block_tokens = 512;
  s.prefix_tokens = shared;
  return s;
}

// Run one step and complete it; returns the batch.
StepBatch step(Scheduler& s) {
  StepBatch b = s.schedule().value();
  EXPECT_TRUE(s.complete(b).ok());
  return b;
}

TEST(PrefixScheduler, SharesWholeBlocksCopiesThePartialOneAndFreesAtTheLastUser) {
  SchedulerConfig c;
  c.token_budget = 40;  // step 0 admits A only: B arrives when A's blocks are in the table
  c.block_size = 16;
  c.prefix_sharing = true;
  // A writes 40 shared tokens (blocks 0, 1 whole, block 2 with 8 shared slots) and lives on;
  // B has the same 40-token prompt.
  std::vector<RequestSpec> specs = {prefixed(40, 30, 77, 40), prefixed(40, 3, 77, 40)};
  BlockAllocator allocator2 = BlockAllocator::create(64, 3).value();
  Scheduler t = Scheduler::create(c, specs, &allocator2).value();
  StepBatch b0 = step(t);
  ASSERT_EQ(b0.seqs.size(), 1u);
  EXPECT_EQ(t.prefix_table_size(), 3);  // A's blocks 0, 1 (whole) and 2 (8 shared slots)
  // Step 1: A decodes; B is admitted and takes blocks 0 and 1 by reference; its last prompt
  // token (39) must be computed, so block 2 (where its prefix ends, slots 0..6 needed) is
  // copied on write into a new block.
  StepBatch b1 = t.schedule().value();
  ASSERT_EQ(b1.seqs.size(), 2u);
  const RequestState& a = t.request(0);
  const RequestState& b = t.request(1);
  ASSERT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_NE(b.blocks[2], a.blocks[2]);
  EXPECT_EQ(allocator2.refcount(a.blocks[0]), 2);
  EXPECT_EQ(allocator2.refcount(a.blocks[1]), 2);
  EXPECT_EQ(allocator2.refcount(a.blocks[2]), 1);
  EXPECT_EQ(allocator2.refcount(b.blocks[2]), 1);
  ASSERT_EQ(b1.copies.size(), 1u);
  EXPECT_EQ(b1.copies[0].src, a.blocks[2]);
  EXPECT_EQ(b1.copies[0].dst, b.blocks[2]);
  EXPECT_EQ(b1.copies[0].tokens, 7);
  EXPECT_EQ(b.cached_tokens, 39);
  EXPECT_EQ(b1.seqs[1].context_len, 39);  // B computes only its last prompt token
  EXPECT_EQ(b1.seqs[1].query_len, 1);
  EXPECT_EQ(t.prefix_hit_blocks(), 2);
  EXPECT_EQ(t.prefix_hit_tokens(), 39);
  EXPECT_EQ(t.prefix_copies(), 1);
  EXPECT_EQ(t.shared_blocks_now(), 2);
  // Blocks in use: A's 3 (its 41 tokens still fit) + B's copy.
  EXPECT_EQ(allocator2.num_used(), 4);
  ASSERT_TRUE(t.complete(b1).ok());
  // B finishes first (3 outputs); A still holds the shared blocks: none of them is freed.
  std::vector<std::int32_t> shared = {a.blocks[0], a.blocks[1]};
  while (t.request(1).phase != RequestPhase::kFinished) {
    StepBatch bn = t.schedule().value();
    StepOutcome out = t.complete(bn).value();
    for (const std::int32_t f : out.freed_blocks) {
      EXPECT_NE(f, shared[0]);
      EXPECT_NE(f, shared[1]);
    }
  }
  EXPECT_EQ(allocator2.refcount(shared[0]), 1);
  EXPECT_EQ(allocator2.refcount(shared[1]), 1);
  EXPECT_GT(t.prefix_table_size(), 0);
  while (!t.done()) step(t);
  // No leaks: every block back, the table empty.
  EXPECT_EQ(allocator2.num_used(), 0);
  EXPECT_EQ(t.prefix_table_size(), 0);
  EXPECT_EQ(t.reserved_blocks(), 0);
}

TEST(PrefixScheduler, DifferentChainsShareNothingAndSharingOffIsThePlainScheduler) {
  SchedulerConfig c;
  c.token_budget = 40;
  c.block_size = 16;
  c.prefix_sharing = true;
  std::vector<RequestSpec> specs = {prefixed(40, 30, 1, 40), prefixed(40, 3, 2, 40)};
  BlockAllocator a1 = BlockAllocator::create(64, 3).value();
  Scheduler s = Scheduler::create(c, specs, &a1).value();
  while (!s.done()) step(s);
  EXPECT_EQ(s.prefix_hit_blocks(), 0);
  EXPECT_EQ(s.prefix_copies(), 0);

  // Same chains, sharing off: no hit, and the same schedule as requests without prefixes.
  c.prefix_sharing = false;
  specs[1].prefix_chain = {1};
  BlockAllocator a2 = BlockAllocator::create(64, 3).value();
  BlockAllocator a3 = BlockAllocator::create(64, 3).value();
  Scheduler off = Scheduler::create(c, specs, &a2).value();
  Scheduler plain =
      Scheduler::create(c, {prefixed(40, 30, 0, 0), prefixed(40, 3, 0, 0)}, &a3).value();
  while (!off.done()) {
    StepBatch x = step(off);
    StepBatch y = step(plain);
    ASSERT_EQ(x.seqs.size(), y.seqs.size());
    for (std::size_t i = 0; i < x.seqs.size(); ++i) {
      EXPECT_EQ(x.seqs[i].context_len, y.seqs[i].context_len);
      EXPECT_EQ(x.seqs[i].query_len, y.seqs[i].query_len);
    }
  }
  EXPECT_TRUE(plain.done());
  EXPECT_EQ(off.prefix_hit_blocks(), 0);
  EXPECT_EQ(a2.peak_used(), a3.peak_used());
}

TEST(PrefixScheduler, AdmissionCountsSharedBlocksOnce) {
  // A pool of 6 blocks: A needs 4 (40 + 19 tokens), B alone would need 3 more than fit, but
  // with its first two blocks shared it needs 1 (its copy) + its decode blocks.
  SchedulerConfig c;
  c.token_budget = 40;
  c.block_size = 16;
  c.prefix_sharing = true;
  std::vector<RequestSpec> specs = {prefixed(40, 20, 5, 40), prefixed(40, 2, 5, 40)};
  BlockAllocator a = BlockAllocator::create(6, 3).value();
  Scheduler s = Scheduler::create(c, specs, &a).value();
  step(s);                       // A's prefill
  StepBatch b1 = step(s);        // B admitted: 4 (A) + 1 (B's copy) <= 6
  EXPECT_EQ(b1.num_admitted, 1);
  EXPECT_LE(s.reserved_blocks(), 6);
  while (!s.done()) {
    step(s);
    EXPECT_LE(a.num_used(), 6);
  }
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(s.prefix_hit_blocks(), 2);
}

// ------------------------------------------------------------------------------ replay

// Four requests: 0 writes chain [1, 2] (600 tokens), 1 shares its first 512 tokens, 2 is the
// first 512 tokens exactly (so its last block is copied on write: its last prompt token must
// be computed), 3 shares nothing.
std::string synthetic_trace() {
  return write_temp("four.jsonl",
                    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 20, "
                    "\"hash_ids\": [1, 2]}\n"
                    "{\"timestamp\": 0, \"input_length\": 530, \"output_length\": 20, "
                    "\"hash_ids\": [1, 3]}\n"
                    "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 5, "
                    "\"hash_ids\": [1]}\n"
                    "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, "
                    "\"hash_ids\": [9]}\n");
}

ReplayConfig prefix_config() {
  ReplayConfig c;
  c.device = DeviceChoice::kCPU;
  c.trace = synthetic_trace();
  c.requests = 4;
  c.max_prompt = 1024;
  c.max_output = 20;
  c.token_budget = 48;
  c.num_blocks = 200;
  c.verify_rows = 6;
  c.threads = 2;
  return c;
}

void expect_clean(const ReplayReport& r) {
  EXPECT_TRUE(r.pass) << r.first_failure;
  EXPECT_EQ(r.elements_failed, 0);
  EXPECT_EQ(r.cache_mismatches, 0);
  EXPECT_GT(r.rows_checked, 0);
  // Every token of every request checked bit for bit at its finish, shared ones included.
  EXPECT_EQ(r.cache_tokens_checked, r.prefill_tokens + r.decode_tokens + r.prefix_hit_tokens);
}

TEST(PrefixReplay, SavesBlocksOnASmallSyntheticTrace) {
  ReplayConfig c = prefix_config();
  ReplayReport on = run_replay(c).value();
  expect_clean(on);
  EXPECT_TRUE(on.prefix_sharing);  // auto: the trace has hash_ids
  // Request 1 takes blocks 0..31 (512 tokens); request 2 takes blocks 0..30 and copies 15
  // slots of block 31 (its token 511 is computed). Request 3 shares nothing.
  EXPECT_EQ(on.prefix_hit_blocks, 32 + 31);
  EXPECT_EQ(on.prefix_hit_tokens, 512 + 511);
  EXPECT_EQ(on.prefix_copies, 1);
  EXPECT_EQ(on.prefill_tokens, 600 + 530 + 512 + 100 - (512 + 511));
  EXPECT_EQ(on.prefix_tokens, 600 + 530 + 512 + 100);

  c.prefix_sharing = PrefixSharing::kOff;
  ReplayReport off = run_replay(c).value();
  expect_clean(off);
  EXPECT_FALSE(off.prefix_sharing);
  EXPECT_EQ(off.prefix_hit_blocks, 0);
  EXPECT_EQ(off.prefill_tokens, 600 + 530 + 512 + 100);
  EXPECT_LT(on.peak_blocks_used, off.peak_blocks_used);
}

TEST(PrefixReplay, EveryRowWithSharingMatchesTheOracleOnEveryLayoutAndDtype) {
  // All rows of every step checked, with shared blocks and copies, on each layout; fp8 too.
  struct Case {
    KVLayout layout;
    std::optional<DType> kv;
    int block;
  };
  // (NHD with the preset's block is PrefixReplay.SavesBlocksOnASmallSyntheticTrace.) Block 24
  // does not divide the trace's 512: blocks straddle trace blocks.
  for (const Case& k : {Case{KVLayout::kSplit, DType::kFloat8E4M3, 0},
                        Case{KVLayout::kHND, std::nullopt, 24}}) {
    SCOPED_TRACE(std::string(to_string(k.layout)) + " block " + std::to_string(k.block));
    ReplayConfig c = prefix_config();
    c.layout = k.layout;
    c.kv_dtype = k.kv;
    c.block_size = k.block;
    c.verify_rows = 48;  // = the token budget: every row of every step
    c.max_output = 4;
    ReplayReport r = run_replay(c).value();
    expect_clean(r);
    EXPECT_GT(r.prefix_hit_blocks, 0);
  }
}

TEST(PrefixReplay, SharingOnNeedsHashIds) {
  ReplayConfig c;
  c.device = DeviceChoice::kCPU;
  c.requests = 3;
  c.prefix_sharing = PrefixSharing::kOn;
  Result<ReplayReport> r = run_replay(c);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "--prefix-sharing on")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "no hash_ids")) << r.status().message();
}

// Attention over blocks shared by two sequences equals attention over private copies of the
// same blocks, bit for bit (the CPU backend; the CUDA suite checks shared blocks under the
// sanitizers).
TEST(PrefixReplay, AttentionOverSharedBlocksEqualsPrivateCopies) {
  const int H = 4, KVH = 2, D = 64, B = 16;
  KVCacheSpec spec;
  spec.layout = KVLayout::kNHD;
  spec.num_blocks = 8;
  spec.block_size = B;
  spec.num_kv_heads = KVH;
  spec.head_size = D;
  spec.dtype = DType::kFloat32;
  const std::int64_t n = kv_cache_elements(spec).value();
  std::vector<float> k(static_cast<std::size_t>(n)), v(k.size());
  testing::SplitMix64 rng(5);
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = rng.uniform(-1, 1);
    v[i] = rng.uniform(-1, 1);
  }
  const std::int64_t per_block = n / spec.num_blocks;
  // Blocks 4, 5 are copies of 0, 1 (the shared prefix); 2 and 3 hold each sequence's tail.
  std::memcpy(k.data() + 4 * per_block, k.data(), sizeof(float) * 2 * per_block);
  std::memcpy(v.data() + 4 * per_block, v.data(), sizeof(float) * 2 * per_block);
  KVCache cache = make_kv_cache(spec, k.data(), v.data(), Device::cpu()).value();
  const int T = 2 + 3;  // seq 0: a chunk of two tokens, seq 1: three
  std::vector<float> q(static_cast<std::size_t>(T * H * D));
  for (float& x : q) x = rng.uniform(-1, 1);
  std::vector<std::int32_t> seq_lens = {40, 45}, qsl = {0, 2, 5};
  auto run = [&](std::vector<std::int32_t> table) {
    std::vector<float> out(static_cast<std::size_t>(T * H * D)), lse(static_cast<std::size_t>(T * H));
    AttentionArgs args;
    args.query = TensorView::contiguous(q.data(), DType::kFloat32, {T, H, D});
    args.cache = cache;
    args.block_table = TensorView::contiguous(table.data(), DType::kInt32, {2, 3});
    args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
    args.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
    args.out = TensorView::contiguous(out.data(), DType::kFloat32, {T, H, D});
    args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H});
    args.params.scale = 4.0f * default_scale(D);
    const Status st = paged_attention(args, HostMetadata::from_args(args));
    EXPECT_TRUE(st.ok()) << st.to_string();
    out.insert(out.end(), lse.begin(), lse.end());
    return out;
  };
  const std::vector<float> shared = run({0, 1, 2, 0, 1, 3});
  const std::vector<float> copies = run({0, 1, 2, 4, 5, 3});
  ASSERT_EQ(shared.size(), copies.size());
  EXPECT_EQ(std::memcmp(shared.data(), copies.data(), shared.size() * sizeof(float)), 0);
  // And the blocks matter: a different tail changes the result.
  EXPECT_NE(std::memcmp(shared.data(), run({0, 1, 3, 0, 1, 2}).data(),
                        shared.size() * sizeof(float)),
            0);
}

// The oracle splits the sampled rows and the KV heads over the threads (a soak's few
// long-context rows): the split must not change a bit of the reference results.
TEST(PrefixReplay, OracleSplitOverHeadsChangesNothing) {
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit}) {
    SCOPED_TRACE(to_string(layout));
    ReplayConfig c = prefix_config();
    c.layout = layout;
    c.max_prompt = 200;
    c.max_output = 3;
    c.verify_rows = 1;
    c.threads = 1;
    const ReplayReport one = run_replay(c).value();
    c.threads = 8;  // 1-2 rows a step: 4-8 KV-head groups
    const ReplayReport many = run_replay(c).value();
    expect_clean(one);
    expect_clean(many);
    EXPECT_EQ(one.rows_checked, many.rows_checked);
    EXPECT_EQ(one.max_abs_error, many.max_abs_error);
    EXPECT_EQ(one.worst_ratio, many.worst_ratio);
  }
}

// ------------------------------------------------------------------------------ soak

TEST(Soak, PeriodicFaultsAreAllDetectedAndDoNotFailTheRun) {
  ReplayConfig c = prefix_config();
  c.fault = FaultInjection::kBoth;
  c.fault_every = 5;
  ReplayReport r = run_replay(c).value();
  EXPECT_TRUE(r.pass) << r.first_failure;
  EXPECT_GT(r.output_faults_injected, 0);
  EXPECT_GT(r.cache_faults_injected, 0);
  EXPECT_EQ(r.faults_injected, r.output_faults_injected + r.cache_faults_injected);
  EXPECT_EQ(r.faults_detected, r.faults_injected);
  EXPECT_EQ(r.unexpected_failures, 0);
  EXPECT_GT(r.elements_failed, 0);  // the output faults' failures were seen...
  EXPECT_GT(r.requests_fault_detected, 0);  // ...and so were the cache faults'
  EXPECT_EQ(r.requests_cache_failed, 0);     // checks that caught a fault did not fail
  EXPECT_EQ(r.rows_fault_detected, r.rows_failed);

  // Without verification nothing can be detected: the run fails.
  c.verify_rows = 0;
  ReplayReport blind = run_replay(c).value();
  EXPECT_FALSE(blind.pass);
  EXPECT_EQ(blind.faults_detected, 0);
  EXPECT_TRUE(contains(blind.first_failure, "went undetected")) << blind.first_failure;
}

TEST(Soak, DurationCyclesThroughTheTraceAndSamples) {
  ReplayConfig c = prefix_config();
  c.max_prompt = 64;
  c.max_output = 3;
  c.duration_s = 1.0;
  c.sample_interval_s = 0.2;
  ReplayReport r = run_replay(c).value();
  EXPECT_TRUE(r.pass) << r.first_failure;
  EXPECT_GT(r.requests, 4);          // more than the 4 asked for
  EXPECT_GT(r.trace_passes, 1);      // the 4-record trace was cycled
  EXPECT_GE(r.wall_s, 1.0);
  ASSERT_GE(r.samples.size(), 3u);
  EXPECT_EQ(r.samples.back().requests_finished, r.requests);
  EXPECT_EQ(r.samples.back().blocks_used, 0);
  EXPECT_EQ(r.blocks_used_min, 0);
  EXPECT_GT(r.blocks_used_max, 0);
  EXPECT_EQ(r.samples.back().checks_failed, 0);
  EXPECT_GT(r.samples.back().checks_passed, 0);
  EXPECT_EQ(r.device_used_min, -1);  // CPU
  // Passes salt the prefix hashes: a later pass shares nothing with an earlier one, but
  // within a pass requests 1 and 2 still share request 0's prefix.
  EXPECT_GT(r.prefix_hit_blocks, 0);
  for (std::size_t i = 1; i < r.samples.size(); ++i) {
    EXPECT_GE(r.samples[i].elapsed_s, r.samples[i - 1].elapsed_s);
    EXPECT_GE(r.samples[i].steps, r.samples[i - 1].steps);
  }
}

// A run shorter than its sample interval still reports its closing sample through the
// progress callback (the CLI's last soak line and report rewrite), with the final counters.
TEST(Soak, ClosingSampleReachesTheProgressCallbackEvenWhenTheRunIsShort) {
  ReplayConfig c = prefix_config();
  c.sample_interval_s = 1e6;  // no periodic sample can fall due
  std::vector<ReplayProgress> sampled;
  std::int64_t calls = 0;
  const ProgressFn progress = [&](const ReplayProgress& p) {
    ++calls;
    if (p.sample) {
      ASSERT_NE(p.report, nullptr);
      sampled.push_back(p);
    }
  };
  ReplayReport r = run_replay(c, progress).value();
  EXPECT_TRUE(r.pass) << r.first_failure;
  EXPECT_GT(calls, 1);  // every step, then the closing sample
  ASSERT_EQ(sampled.size(), 1u);
  EXPECT_EQ(sampled.back().finished, r.requests);
  EXPECT_EQ(sampled.back().blocks_used, 0);
  EXPECT_EQ(sampled.back().running, 0);
  EXPECT_EQ(sampled.back().step, r.steps);
  ASSERT_EQ(r.samples.size(), 2u);  // the opening and the closing sample
  EXPECT_EQ(r.samples.back().requests_finished, r.requests);
}

}  // namespace
}  // namespace pagedattn::serving
