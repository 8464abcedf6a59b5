// Trace replay: the serving loop of `pagedattn run`. Requests from a trace go through a block
// allocator (free list of KV-cache blocks) and a scheduler with a per-step token budget
// (running decodes first, then chunked-prefill chunks, as serving engines batch); every step
// writes the new tokens' K/V with write_kv, runs paged attention for the mixed batch, and
// checks a sample of rows against the oracle (reference_attention). When a request finishes,
// its whole KV (every token, through its block table) is compared bit for bit with the values
// write_kv had to store, before its blocks go back to the free list (and are refilled with
// NaN, so that a kernel reading stale memory cannot pass).
//
// Device memory: on CUDA the cache, the step's tensors and the workspace live on the GPU
// (src/cuda/backend/cuda_backend.h helpers); the oracle and the cache check run on host copies of the
// outputs and of the cache blocks they need.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"
#include "src/serving/trace.h"

namespace pagedattn::serving {

// ------------------------------------------------------------------------------ models

/// Attention shape of a model layer: what `--model` selects.
struct ModelPreset {
  std::string name;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;
  /// Tokens per cache block the model is served with.
  int block_size = 16;
  /// Elements of padding after each K block and each V block (stride-padded pages of hybrid
  /// attention/Mamba models; DESIGN.md §1 "padded page"). 0 = dense blocks.
  std::int64_t page_pad = 0;
  /// One line for --help and the report.
  std::string description;
};

/// llama-3.2-1b (32/8 heads, head 64, block 16), llama-3.1-8b (32/8, 128, block 16),
/// jamba-hybrid (32/8, 128, block 2048, padded pages).
const std::vector<ModelPreset>& model_presets();

/// The preset called `name`. Error: kInvalidArgument listing the known names.
Result<ModelPreset> find_model_preset(const std::string& name);

// ------------------------------------------------------------------------------ device

/// `--device`: kAuto picks CUDA when query_device(cuda:0) succeeds, else the CPU.
enum class DeviceChoice : std::uint8_t { kAuto, kCPU, kCUDA };
/// "auto", "cpu", "cuda".
const char* to_string(DeviceChoice choice);
/// Inverse of to_string(DeviceChoice); "cuda:0" is also kCUDA. Error: kInvalidArgument (any
/// other name, cuda:N for N > 0 included: the replay uses device 0).
Result<DeviceChoice> parse_device_choice(const std::string& name);

/// `--kv-dtype`: "auto" (the cache has the query dtype: nullopt), "fp8_e4m3" or "fp8_e5m2".
/// Error: kInvalidArgument for anything else.
Result<std::optional<DType>> parse_kv_dtype(const std::string& name);

// ------------------------------------------------------------------------------ allocator

/// Fixed pool of `num_blocks` cache blocks with a FIFO free list, as vLLM's block pool: blocks
/// are taken from the front and returned to the back, so a freed block is reused only after
/// the older free ones, and the physical ids of one sequence are scattered (the initial order
/// is a seeded random permutation: block tables are never contiguous, which is what the
/// kernels must handle). Tracks blocks in use and their peak. Not thread-safe.
class BlockAllocator {
 public:
  /// A pool of blocks [0, num_blocks) in an order drawn from `seed`.
  /// Error: kInvalidArgument unless 1 <= num_blocks <= 2^31 - 1 (block ids are int32 in the
  /// block table).
  static Result<BlockAllocator> create(std::int64_t num_blocks, std::uint64_t seed);

  /// Take the block at the front of the free list; its reference count is 1.
  /// Error: kInvalidArgument "out of KV-cache blocks: all N in use" when none is free (the
  /// Scheduler's admission control never lets this happen).
  Result<std::int32_t> allocate();
  /// Drop one reference to `block`; the last one returns it to the back of the free list.
  /// Error: kInvalidArgument for an id outside the pool or a block that is not allocated
  /// (double free); nothing changes then.
  Status free(std::int32_t block);
  /// free(), also saying whether the block went back to the free list (its last reference).
  Result<bool> release(std::int32_t block);
  /// Add a reference to an allocated `block` (a prefix block shared by another request).
  /// Error: kInvalidArgument for a block that is not allocated.
  Status retain(std::int32_t block);
  /// References to `block` (0 = free or outside the pool).
  std::int32_t refcount(std::int32_t block) const;

  std::int64_t num_blocks() const { return static_cast<std::int64_t>(in_use_.size()); }
  std::int64_t num_free() const { return num_blocks() - num_used_; }
  std::int64_t num_used() const { return num_used_; }
  /// Largest num_used() seen so far.
  std::int64_t peak_used() const { return peak_used_; }
  /// True if `block` is in the pool and currently allocated.
  bool is_allocated(std::int32_t block) const;

 private:
  BlockAllocator() = default;
  std::vector<std::int32_t> ring_;  // circular FIFO of free ids, capacity num_blocks
  std::int64_t head_ = 0;           // index in ring_ of the next block to hand out
  std::int64_t num_used_ = 0;
  std::int64_t peak_used_ = 0;
  std::vector<std::int32_t> in_use_;  // reference count per block
};

// ------------------------------------------------------------------------------ scheduler

/// Lengths of one request as replayed (after clipping). Both >= 1.
struct RequestSpec {
  RequestSpec() = default;
  /// Lengths only (no prefix): what `{prompt, output}` means.
  RequestSpec(std::int64_t prompt, std::int64_t output)
      : prompt_tokens(prompt), output_tokens(output) {}
  std::int64_t prompt_tokens = 1;
  /// Tokens generated. The prefill produces the first; each of the other output_tokens - 1
  /// needs a decode step, whose query is the previously generated token. The last generated
  /// token is never fed back, so a finished request holds prompt + output - 1 tokens of KV.
  std::int64_t output_tokens = 1;
  /// KV tokens the request holds when it finishes: prompt_tokens + output_tokens - 1.
  std::int64_t final_kv_tokens() const { return prompt_tokens + output_tokens - 1; }
  /// Prefix identity (empty: nothing to share). prefix_chain[j] names the prompt's tokens
  /// [0, (j + 1) * prefix_block_tokens): a hash of the trace's hash_ids[0 .. j], so two
  /// requests with an equal entry have equal prompts up to the end of that trace block.
  std::vector<std::uint64_t> prefix_chain;
  /// Tokens [0, prefix_tokens) of the prompt have content that depends only on their chain
  /// entry and position (<= prompt_tokens, <= prefix_chain.size() * prefix_block_tokens).
  std::int64_t prefix_tokens = 0;
  /// Tokens per chain entry (Mooncake: kMooncakeHashBlockTokens). >= 1.
  std::int64_t prefix_block_tokens = 512;
  /// The chain entry that names token `pos` (< prefix_tokens).
  std::uint64_t chain_at(std::int64_t pos) const {
    return prefix_chain[static_cast<std::size_t>(pos / prefix_block_tokens)];
  }
};

/// Knobs of the scheduler (vLLM's max_num_batched_tokens, max_num_seqs, block_size).
struct SchedulerConfig {
  /// Tokens (query rows) per step, decode and prefill together. >= 1.
  std::int64_t token_budget = 512;
  /// Requests running at once (admitted, not finished). >= 1.
  int max_seqs = 256;
  /// Tokens per cache block. >= 1.
  int block_size = 16;
  /// How error messages name the block pool; empty: "--num-blocks N" (N the allocator's
  /// size). The replay passes its automatic pool's own name, which the user never typed.
  std::string pool_name;
  /// Share prefix blocks between requests (RequestSpec::prefix_chain): see Scheduler.
  bool prefix_sharing = false;
};

enum class RequestPhase : std::uint8_t { kWaiting, kPrefill, kDecode, kFinished };

/// Life of one request inside the Scheduler.
struct RequestState {
  RequestSpec spec;
  RequestPhase phase = RequestPhase::kWaiting;
  /// Tokens whose K/V are in the cache (0 .. final_kv_tokens()).
  std::int64_t computed = 0;
  /// Output tokens produced so far (0 .. output_tokens).
  std::int64_t generated = 0;
  /// The block-table row: logical block j -> physical block id. Empty once finished.
  std::vector<std::int32_t> blocks;
  /// Step in which it was admitted / finished (-1 = not yet).
  std::int64_t admitted_step = -1;
  std::int64_t finished_step = -1;
  /// Prompt tokens found in the prefix cache at admission (not computed by this request):
  /// shared_blocks whole blocks held by reference, plus the tokens of a copied-on-write block.
  std::int64_t cached_tokens = 0;
  std::int64_t shared_blocks = 0;
  /// Blocks this request has still to allocate (admission reserved them).
  std::int64_t allocations_left = 0;
  /// Logical blocks [0, registered_upto) have been offered to the prefix cache.
  std::int64_t registered_upto = 0;
};

/// A copy-on-write: the first `tokens` slots of block `src` (shared prefix content another
/// request wrote) are copied into the new private block `dst` before the step's writes; the
/// other slots of `dst` stay poisoned.
struct BlockCopy {
  std::int32_t src = 0;
  std::int32_t dst = 0;
  std::int32_t tokens = 0;
  std::int32_t request = 0;  // the request that owns dst
};

/// One sequence of a step's batch.
struct ScheduledSeq {
  /// Index of the request (order of the RequestSpec list).
  std::int32_t request = 0;
  /// Tokens already in the cache before this step: the sequence's context_len.
  std::int64_t context_len = 0;
  /// New tokens this step (>= 1): positions [context_len, context_len + query_len).
  std::int32_t query_len = 0;
  /// True for a prefill chunk (prompt tokens), false for a decode token.
  bool prefill = false;
};

/// What one step computes. Sequences are ordered decodes first (in admission order), then
/// prefill chunks (continuing requests in admission order, then newly admitted ones).
struct StepBatch {
  std::int64_t step = 0;
  std::vector<ScheduledSeq> seqs;
  std::int64_t num_tokens = 0;
  int num_decode = 0;
  int num_prefill = 0;
  /// Requests admitted in this step.
  int num_admitted = 0;
  /// True when the oldest waiting request could not be admitted because its blocks were not
  /// free (admission control, the alternative to preemption); false when nothing waited or
  /// the token budget or max_seqs stopped admission.
  bool admission_blocked_by_memory = false;
  /// Copies-on-write the step must do before writing K/V (prefix sharing only).
  std::vector<BlockCopy> copies;
};

/// What finishing a step changed.
struct StepOutcome {
  /// Requests that generated their last token in this step.
  std::vector<std::int32_t> finished;
  /// Blocks those requests returned to the allocator.
  std::vector<std::int32_t> freed_blocks;
};

/// Token-budget scheduler with chunked prefill (vLLM v1 style), over a BlockAllocator.
///
/// Prefix sharing (config.prefix_sharing): a prefix table maps (chain entry, logical block
/// index) to a physical block and the number of its leading slots that hold shared prefix
/// content. A block enters the table at the end of the step that wrote its shared slots; a
/// block that other requests may read is never written again (its shared slots are full, or
/// it is read only through copy-on-write). At admission a request takes its leading whole
/// blocks from the table by reference (refcount + 1, no prefill for their tokens); where its
/// shareable prefix ends inside a block that the table holds (partly or wholly), that block's
/// shared slots are copied into a new private block (BlockCopy) and not recomputed. The last
/// prompt token is always computed (it yields the first output token). Policy: a block leaves
/// the table when its last user finishes and goes back to the free list at once (no retention
/// of unused cached blocks), so sharing happens between requests whose lives overlap.
/// Admission counts blocks in use plus the allocations the running requests still have to
/// make, so shared blocks are counted once and allocation still never fails.
///
/// Each step: (1) every running request in its decode phase gets one token, in admission
/// order, while the budget lasts; (2) running requests still in prefill get the next chunk of
/// their prompt, up to the budget left; (3) waiting requests are admitted in arrival order
/// while budget is left, fewer than max_seqs run, and the blocks of the request's whole life
/// (final_kv_tokens) fit next to what the running requests have reserved. That reservation is
/// the admission control that replaces preemption: blocks are still allocated lazily, step by
/// step, but allocation can never fail. (It uses the output length known from the trace, which
/// a real engine does not know; engines without it preempt instead.)
class Scheduler {
 public:
  /// Errors: kInvalidArgument for a config value out of range, a request with a length < 1,
  /// or a request whose final_kv_tokens need more blocks than the whole pool (it could never
  /// be admitted); the message names the request index.
  static Result<Scheduler> create(const SchedulerConfig& config, std::vector<RequestSpec> requests,
                                  BlockAllocator* allocator);

  /// Choose the next step's batch and allocate the blocks its new tokens need (the requests'
  /// block tables grow accordingly). Precondition: !done() and the previous batch completed.
  /// Errors: kInternal if nothing could be scheduled or an allocation failed (both would be
  /// scheduler bugs).
  Result<StepBatch> schedule();

  /// Remove the requests still waiting (never admitted) and return how many: a soak's deadline
  /// stops admission, the running requests go on to their finish. Indices of the remaining
  /// requests do not change.
  std::int64_t drop_waiting();

  /// Append a request behind the waiting ones (a soak that runs longer than the trace).
  /// Errors: those of create() for one request; its index is num_requests() before the call.
  Status add_request(RequestSpec spec);

  /// Record that `batch` ran: advance each request, offer newly written prefix blocks to the
  /// prefix table, generate tokens, and free the blocks of requests that finished (last logical block first, so that a request's blocks re-enter the
  /// free list tail first, as vLLM does). Error: kInternal on a batch this scheduler did not
  /// produce last.
  Result<StepOutcome> complete(const StepBatch& batch);

  bool done() const { return num_finished_ == static_cast<std::int64_t>(requests_.size()); }
  const RequestState& request(std::int32_t index) const { return requests_[index]; }
  /// Running (admitted, unfinished) requests in admission order.
  const std::vector<std::int32_t>& running() const { return running_; }
  /// True if `seq` of the outstanding batch makes its request generate its last token, so
  /// that complete() will finish it and free its blocks.
  bool finishes(const ScheduledSeq& seq) const;
  std::int64_t num_requests() const { return static_cast<std::int64_t>(requests_.size()); }
  std::int64_t num_waiting() const { return num_requests() - next_waiting_; }
  std::int64_t num_running() const { return static_cast<std::int64_t>(running_.size()); }
  std::int64_t num_finished() const { return num_finished_; }
  /// Most requests running at once so far.
  std::int64_t peak_running() const { return peak_running_; }
  /// Blocks in use plus those the running requests have still to allocate (without prefix
  /// sharing: the sum of their final blocks).
  std::int64_t reserved_blocks() const { return allocator_->num_used() + pending_allocations_; }
  /// Prefix sharing totals: whole blocks taken by reference, copies-on-write, prompt tokens
  /// not computed, and the table's current size.
  std::int64_t prefix_hit_blocks() const { return prefix_hit_blocks_; }
  std::int64_t prefix_copies() const { return prefix_copies_; }
  std::int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  std::int64_t prefix_table_size() const { return static_cast<std::int64_t>(table_.size()); }
  /// Blocks with more than one reference now.
  std::int64_t shared_blocks_now() const;
  /// Steps scheduled so far.
  std::int64_t steps() const { return next_step_; }
  const SchedulerConfig& config() const { return config_; }
  /// Blocks that hold `tokens` tokens: ceil(tokens / block_size).
  std::int64_t blocks_for(std::int64_t tokens) const;

 private:
  Scheduler() = default;
  Status grow_blocks(RequestState& r, std::int64_t tokens);
  Status validate(const RequestSpec& spec, std::size_t index) const;
  // Prefix table key of logical block `k` whose shared slots end at token `last` (inclusive).
  static std::uint64_t table_key(const RequestSpec& spec, std::int64_t k, std::int64_t last);
  // What admission would take from the table: whole blocks (physical ids) and an optional
  // copy-on-write source with its token count.
  struct PrefixHit {
    std::vector<std::int32_t> blocks;
    std::int32_t cow_src = -1;
    std::int32_t cow_tokens = 0;
  };
  PrefixHit lookup(const RequestSpec& spec) const;
  void offer_blocks(std::int32_t id, RequestState& r);
  struct TableEntry {
    std::int32_t block = 0;
    std::int32_t tokens = 0;  // leading slots holding shared content
  };

  SchedulerConfig config_;
  BlockAllocator* allocator_ = nullptr;
  std::vector<RequestState> requests_;
  std::vector<std::int32_t> running_;  // admission order
  std::int64_t next_waiting_ = 0;      // requests [next_waiting_, n) wait, in arrival order
  std::int64_t num_finished_ = 0;
  std::int64_t peak_running_ = 0;
  std::int64_t pending_allocations_ = 0;
  std::int64_t next_step_ = 0;
  std::unordered_map<std::uint64_t, TableEntry> table_;
  std::vector<std::uint64_t> block_key_;   // per physical block: its table key when registered
  std::vector<std::uint8_t> registered_;   // per physical block: in the table
  std::int64_t prefix_hit_blocks_ = 0;
  std::int64_t prefix_copies_ = 0;
  std::int64_t prefix_hit_tokens_ = 0;
  bool batch_outstanding_ = false;
};

// ------------------------------------------------------------------------------ replay

/// Deliberate corruption, to prove that the checks fire (tests and `pagedattn run
/// --inject-fault`). Never set in normal runs.
enum class FaultInjection : std::uint8_t {
  kNone,
  /// After step 0's attention, add 1 to element (head 0, dim 0) of every output row: the oracle
  /// comparison must fail.
  kOutput,
  /// After step 0's write_kv, change one stored key element of the first token written: the
  /// oracle reads the same cache and still agrees, so only the finish-time cache check can
  /// catch it.
  kCache,
  /// Output and cache faults by turns (with ReplayConfig::fault_every; alone: both at step 0).
  kBoth,
};
/// "none", "output", "cache", "both".
const char* to_string(FaultInjection fault);
/// Inverse of to_string(FaultInjection). Error: kInvalidArgument.
Result<FaultInjection> parse_fault_injection(const std::string& name);

/// `--prefix-sharing`: auto = on when the trace has hash_ids.
enum class PrefixSharing : std::uint8_t { kAuto, kOn, kOff };
/// "auto", "on", "off".
const char* to_string(PrefixSharing mode);
/// Inverse of to_string(PrefixSharing). Error: kInvalidArgument naming the flag.
Result<PrefixSharing> parse_prefix_sharing(const std::string& name);

/// Every flag of `pagedattn run`. Zero / negative sentinels mean "derive it" as documented.
struct ReplayConfig {
  DeviceChoice device = DeviceChoice::kAuto;
  /// Short name of a shipped trace (known_traces()) or a path.
  std::string trace = "azure-conv";
  /// Replay the first `requests` records of the trace (in arrival order). >= 1.
  std::int64_t requests = 32;
  /// A model_presets() name.
  std::string model = "llama-3.2-1b";
  KVLayout layout = KVLayout::kNHD;
  /// Query/output dtype, and the cache's when kv_dtype is unset: fp32, fp16 or bf16.
  DType dtype = DType::kBFloat16;
  /// fp8_e4m3 / fp8_e5m2 cache; unset = "auto" (same as dtype).
  std::optional<DType> kv_dtype;
  /// Tokens per block; 0 = the preset's.
  std::int32_t block_size = 0;
  /// Blocks in the cache pool; 0 = auto: half the blocks of all replayed requests together
  /// (rounded up), but room for at least two of the largest replayed request at once and never
  /// more than all requests together: memory is short enough that admission control and
  /// block reuse happen, yet requests still run side by side.
  std::int64_t num_blocks = 0;
  /// Padding elements after each K/V block; -1 = the preset's.
  std::int64_t page_pad = -1;
  /// Query tokens per step (decode + prefill). >= 1.
  std::int64_t token_budget = 512;
  /// Requests running at once. >= 1.
  std::int32_t max_seqs = 256;
  /// Prompts longer than this are clipped to it (reported). >= 1.
  std::int64_t max_prompt = 2048;
  /// Outputs longer than this are clipped to it (reported). >= 1.
  std::int64_t max_output = 32;
  /// Tokens a contiguous (pre-paging) allocator reserves per request, for the memory
  /// comparison; 0 = max_prompt + max_output. Must hold the longest replayed request.
  std::int64_t max_model_len = 0;
  /// Rows checked against the oracle per step (at least one decode and one prefill row when
  /// the step has both, so the effective count may be 2 when this is 1); 0 = no verification.
  std::int32_t verify_rows = 4;
  /// Seeds Q/K/V values, the initial free-list order and the row sample.
  std::uint64_t seed = 1;
  /// CPU threads; 0 = all hardware threads.
  std::int32_t threads = 0;
  /// Plan every step with PlanOptions::batch_invariant (a request's attention bits do not
  /// depend on which other requests share its step).
  bool batch_invariant = false;
  /// Testing only: see FaultInjection.
  FaultInjection fault = FaultInjection::kNone;
  /// > 0: inject `fault` at steps 0, N, 2N, ... and count each injection as detected (the
  /// step's oracle check failed / the corrupted request's finish check failed) or missed,
  /// instead of failing the run; pass then means every injection was detected and nothing
  /// else failed. 0: one injection at step 0, which fails the run.
  std::int64_t fault_every = 0;
  /// Share prefix blocks between requests (Scheduler): needs a trace with hash_ids.
  PrefixSharing prefix_sharing = PrefixSharing::kAuto;
  /// > 0: a soak: keep admitting requests after the first `requests`, cycling through the
  /// trace (request i replays record i mod R; pass i / R > 0 salts the prefix hashes, so
  /// passes share nothing with each other), until this many seconds have passed. At the
  /// deadline admission stops: the requests still waiting are dropped (never started; counted
  /// in ReplayReport::requests_not_admitted, even those of the first `requests`), the running
  /// ones finish and are checked, then the report is made.
  double duration_s = 0;
  /// > 0: seconds between soak samples (ReplayProgress::sample, ReplayReport::samples).
  double sample_interval_s = 0;
};

/// Where a replay stands; passed to the progress callback after every step.
struct ReplayProgress {
  std::int64_t step = 0;           // steps completed
  std::int64_t finished = 0;       // requests finished
  std::int64_t total = 0;          // requests replayed
  std::int64_t running = 0;
  std::int64_t waiting = 0;
  std::int64_t blocks_used = 0;
  std::int64_t num_blocks = 0;
  std::int64_t tokens = 0;         // query tokens processed so far
  double elapsed_s = 0;            // wall time since run_replay started
  bool verified_ok = true;         // no mismatch so far
  /// True when this call took a soak sample (ReplayConfig::sample_interval_s): `report` is
  /// then the report so far (samples included), for a periodic line and report file.
  bool sample = false;
  const struct ReplayReport* report = nullptr;
};
using ProgressFn = std::function<void(const ReplayProgress&)>;

/// One soak sample: the run's counters at `elapsed_s`.
struct SoakSample {
  double elapsed_s = 0;
  std::int64_t requests_finished = 0;
  std::int64_t steps = 0;
  std::int64_t tokens = 0;             // query tokens processed
  std::int64_t checks_passed = 0;      // rows and finished requests whose checks passed
  std::int64_t checks_failed = 0;      // ... failed for a reason other than an injection
  std::int64_t checks_detected_fault = 0;  // ... failed only because of an injected fault
  std::int64_t blocks_used = 0;
  std::int64_t peak_blocks_used = 0;
  std::int64_t shared_blocks = 0;      // blocks held by more than one request
  /// CUDA: device bytes in use (cudaMemGetInfo total - free, the whole device); -1 on the CPU.
  std::int64_t device_used_bytes = -1;
  /// Bytes the replay itself holds on the device (cache, step tensors, workspace).
  std::int64_t replay_device_bytes = 0;
};

/// Everything `pagedattn run` reports. Times in seconds, memory in blocks unless named bytes.
struct ReplayReport {
  // ---- what ran
  std::string device;            // "cpu" or "cuda:0"
  std::string device_name;
  std::string trace_name;
  std::string trace_path;
  TraceFormat trace_format = TraceFormat::kAzureCsv;
  std::int64_t trace_records = 0;   // records in the whole trace file
  std::int64_t requests = 0;        // replayed (the first N)
  ModelPreset model;                // with block_size / page_pad as used
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  float k_scale = 1.0f;              // fp8 caches: 0.5 (powers of two; see replay.cpp)
  float v_scale = 1.0f;              // fp8 caches: 0.25
  /// Softmax scale: testing::kDefaultScaleBoost / sqrt(head_size) (peaked attention, so that a
  /// wrong key set is visible; see replay.cpp).
  float softmax_scale = 0.0f;
  std::int64_t num_blocks = 0;      // pool size used
  bool num_blocks_auto = false;
  std::int64_t cache_bytes = 0;     // K + V, padding included
  std::int64_t token_budget = 0;
  std::int32_t max_seqs = 0;
  std::int64_t max_prompt = 0;
  std::int64_t max_output = 0;
  std::int64_t max_model_len = 0;
  std::uint64_t seed = 0;
  int threads = 0;                  // CPU threads the backend uses (--threads 0 resolved)
  // ---- clipping of the trace's lengths
  std::int64_t prompts_clipped = 0;  // longer than max_prompt, cut to it
  std::int64_t outputs_clipped = 0;  // longer than max_output, cut to it
  std::int64_t prompts_raised = 0;   // of length 0 in the trace, raised to 1
  std::int64_t outputs_raised = 0;   // of length 0 in the trace, raised to 1
  std::int64_t trace_prompt_tokens = 0;   // sum over replayed requests, as in the trace
  std::int64_t trace_output_tokens = 0;
  // ---- the serving run
  std::int64_t steps = 0;
  std::int64_t prefill_tokens = 0;        // prompt tokens processed (= replayed prompt sum)
  std::int64_t decode_tokens = 0;         // decode query tokens (= sum of output - 1)
  std::int64_t generated_tokens = 0;      // = replayed output sum
  std::int64_t prefill_chunks = 0;        // prefill sequences scheduled, over all steps
  std::int64_t mixed_steps = 0;           // steps with both decode and prefill rows
  std::int64_t memory_wait_steps = 0;     // steps where admission waited for free blocks
  std::int64_t max_batch_tokens = 0;
  std::int64_t max_batch_seqs = 0;
  std::int64_t peak_running = 0;          // most requests running at once
  // ---- time
  double attention_s = 0;   // run_attention calls only (CUDA: plus a device synchronise)
  double write_kv_s = 0;
  double plan_s = 0;
  double verify_s = 0;      // oracle + cache check
  double oracle_s = 0;      // of verify_s: the sampled rows (mirroring their blocks, the oracle)
  double cache_check_s = 0; // of verify_s: finished requests' caches (mirroring, comparing)
  double inputs_s = 0;      // generating the step's Q/K/V and copying the inputs to the device
  double poison_s = 0;      // refilling freed blocks with NaN (CUDA: a copy per run of blocks)
  double wall_s = 0;        // whole run_replay
  /// 4 * sum over query rows of (keys attended) * num_heads * head_size: the multiply-adds of
  /// QK^T and PV, counted as 2 flops each.
  double attention_flops = 0;
  /// Sum over query rows of keys attended (causal: position + 1).
  std::int64_t keys_attended = 0;
  // ---- memory
  std::int64_t peak_blocks_used = 0;
  /// Most KV tokens held at once (counted after each step's writes); with peak_blocks_used it
  /// gives the paged cache's fill (internal fragmentation is only in last blocks).
  std::int64_t peak_kv_tokens = 0;
  /// ceil(max_model_len / block_size): what a contiguous allocator reserves per request.
  std::int64_t contiguous_blocks_per_request = 0;
  /// peak_running * contiguous_blocks_per_request: what contiguous allocation would have
  /// needed to run the same peak concurrency.
  std::int64_t contiguous_blocks_at_peak = 0;
  /// num_blocks / contiguous_blocks_per_request: requests a contiguous allocator could run at
  /// once in the same pool.
  std::int64_t contiguous_max_running = 0;
  // ---- kernel (first step's plan)
  std::string kernel;
  std::string cache_access;
  int tile_tokens = 0;
  int num_splits = 0;
  std::string kernel_reason;
  // ---- verification
  bool verified = false;                 // verify_rows > 0
  std::int64_t rows_checked = 0;
  std::int64_t prefill_rows_checked = 0;
  std::int64_t decode_rows_checked = 0;
  std::int64_t elements_checked = 0;     // out and lse elements compared with the oracle
  std::int64_t elements_failed = 0;
  double max_abs_error = 0;
  /// max |got - ref| / (atol + rtol * |ref|); <= 1 passes.
  double worst_ratio = 0;
  double atol = 0;
  double rtol = 0;
  /// (request, position) pairs whose K and V were compared bit for bit with what write_kv had
  /// to store, at each request's finish (so every token of every request, once).
  std::int64_t cache_tokens_checked = 0;
  std::int64_t cache_mismatches = 0;       // elements that differ
  std::string first_failure;               // empty when pass
  /// Rows with at least one failing element; finished requests whose cache check ran / failed.
  std::int64_t rows_failed = 0;
  std::int64_t requests_cache_checked = 0;
  std::int64_t requests_cache_failed = 0;     // with a mismatch no injection explains
  /// Checks that failed only because of an injected fault (fault_every > 0): rows of output-
  /// fault steps, finished requests whose only mismatches were injected cache faults.
  std::int64_t rows_fault_detected = 0;
  std::int64_t requests_fault_detected = 0;
  // ---- prefix sharing
  bool prefix_sharing = false;
  /// Sum over requests of the prompt tokens whose content is named by the trace's hash_ids.
  std::int64_t prefix_tokens = 0;
  /// Block allocations saved (whole blocks taken from the prefix table by reference).
  std::int64_t prefix_hit_blocks = 0;
  /// Prompt tokens not computed (in shared blocks or copied on write).
  std::int64_t prefix_hit_tokens = 0;
  std::int64_t prefix_copies = 0;          // copies-on-write of a partial last block
  std::int64_t peak_shared_blocks = 0;     // most blocks held by > 1 request at once (sampled)
  // ---- soak
  double duration_s = 0;                   // asked for (0 = no soak)
  std::int64_t trace_passes = 1;           // passes over the trace's records (started)
  std::int64_t requests_not_admitted = 0;  // waiting at the deadline, dropped (duration_s > 0)
  std::int64_t faults_injected = 0;
  std::int64_t faults_detected = 0;
  std::int64_t output_faults_injected = 0;
  std::int64_t cache_faults_injected = 0;
  /// Failures not explained by an injected fault (fault_every > 0 only; else all count).
  std::int64_t unexpected_failures = 0;
  std::vector<SoakSample> samples;
  std::int64_t device_used_min = -1, device_used_max = -1;   // over samples; -1 on the CPU
  std::int64_t blocks_used_min = -1, blocks_used_max = -1;   // over samples
  /// Every check passed (true when verification is off).
  bool pass = true;
};

/// Replay `trace` under `config`: the serving loop described at the top of this file.
/// Q/K/V values are pseudo-random in [-1, 1), a function of (seed, request, position) only, so
/// a request's K/V are the same whichever step writes them. Outputs that fail verification do
/// not stop the replay; they make `pass` false (with the first failure described).
/// Errors: kInvalidArgument / kUnsupported for a bad config (messages name the flag, e.g.
/// "--num-blocks 10 ..."), more requests than the trace has, or a cache the library rejects;
/// kDeviceUnavailable when CUDA is asked for and absent; kInternal for library failures in a
/// step (the message names the step).
Result<ReplayReport> run_replay(const ReplayConfig& config, const Trace& trace,
                                const ProgressFn& progress = {});

/// load_trace(config.trace), then run_replay. Errors: those of load_trace and run_replay.
Result<ReplayReport> run_replay(const ReplayConfig& config, const ProgressFn& progress = {});

}  // namespace pagedattn::serving
