// pagedattn._C: the C++ API (include/pagedattn/*.h) for the Python package. Every function here
// converts its arguments (convert.h), calls the library with the GIL released and turns a failed
// Status into an exception; the math, the validation and the selection stay in the library.
// The Python layer (python/pagedattn/) allocates outputs in the caller's framework and passes
// the current CUDA stream as an integer.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/src/convert.h"
#include "src/dispatch/row_kernels.h"

namespace pagedattn::python {

namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;

Stream as_stream(std::uintptr_t s) { return reinterpret_cast<Stream>(s); }

/// A validated KV cache over caller-owned K and V arrays and, optionally, the fp8 scale
/// tensors (KVCache::k_scales / v_scales, read by the kernels at run time); the arrays are
/// kept alive here.
struct Cache {
  OutArray key_owner, value_owner;
  std::optional<InArray> k_scales_owner, v_scales_owner;
  KVCache cache;
  KVCacheGeometry geometry;
};

Cache make_cache(OutArray key, OutArray value, const std::string& layout, float k_scale,
                 float v_scale, std::optional<InArray> k_scales, std::optional<InArray> v_scales) {
  Cache c;
  c.cache.layout = value_or_throw(parse_layout(layout));
  c.cache.key = to_view(key, "k_cache");
  c.cache.value = to_view(value, "v_cache");
  c.cache.k_scale = k_scale;
  c.cache.v_scale = v_scale;
  c.cache.k_scales = to_view(k_scales, "k_scales");
  c.cache.v_scales = to_view(v_scales, "v_scales");
  c.geometry = value_or_throw(describe_kv_cache(c.cache));
  c.key_owner = std::move(key);
  c.value_owner = std::move(value);
  c.k_scales_owner = std::move(k_scales);
  c.v_scales_owner = std::move(v_scales);
  return c;
}

KVCache cache_of(const OutArray& key, const OutArray& value, const std::string& layout,
                 float k_scale, float v_scale,
                 const std::optional<InArray>& k_scales = std::nullopt,
                 const std::optional<InArray>& v_scales = std::nullopt) {
  KVCache c;
  c.layout = value_or_throw(parse_layout(layout));
  c.key = to_view(key, "k_cache");
  c.value = to_view(value, "v_cache");
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  c.k_scales = to_view(k_scales, "k_scales");
  c.v_scales = to_view(v_scales, "v_scales");
  return c;
}

/// One plan_attention result with everything run() needs besides the per-layer tensors:
/// the scalar parameters, the metadata on the run device, ALiBi slopes and sinks, and the
/// wrapper's workspace (set by set_workspace; the arrays are kept alive here).
struct Plan {
  AttentionPlan plan;
  AttentionParams params;
  TensorView block_table, seq_lens, query_start_loc;
  std::vector<InArray> owners;
  void* workspace = nullptr;
  std::size_t workspace_capacity = 0;
  OutArray workspace_owner;
  bool batch_invariant = false;  // PlanOptions::batch_invariant, for explain
};

/// plan_attention from shapes: query and out are described (no data) as
/// [num_tokens, num_heads, cache head_size] of `q_dtype`, lse as [num_tokens, num_heads] fp32.
Plan make_plan(const Cache& cache, const std::string& q_dtype, std::int64_t num_tokens,
               std::int64_t num_heads, bool lse, InArray block_table, InArray seq_lens,
               InArray query_start_loc, InArray host_block_table, InArray host_seq_lens,
               InArray host_query_start_loc, float scale, float softcap,
               std::int32_t sliding_window, std::optional<InArray> alibi_slopes,
               std::optional<InArray> sinks, int num_splits, int tile_tokens, int num_threads,
               bool batch_invariant) {
  Plan p;
  AttentionArgs args;
  const DType dt = value_or_throw(parse_dtype(q_dtype));
  const Device dev = cache.cache.key.device;
  const std::int64_t D = cache.geometry.head_size;
  args.query = TensorView::contiguous(nullptr, dt, {num_tokens, num_heads, D}, dev);
  args.out = args.query;
  if (lse) args.lse = TensorView::contiguous(nullptr, DType::kFloat32, {num_tokens, num_heads}, dev);
  args.cache = cache.cache;
  p.block_table = args.block_table = to_view(block_table, "block_table");
  p.seq_lens = args.seq_lens = to_view(seq_lens, "seq_lens");
  p.query_start_loc = args.query_start_loc = to_view(query_start_loc, "query_start_loc");
  args.params.scale = scale;
  args.params.softcap = softcap;
  args.params.sliding_window = sliding_window;
  args.params.alibi_slopes = to_view(alibi_slopes, "alibi_slopes");
  args.params.sinks = to_view(sinks, "sinks");
  p.params = args.params;
  HostMetadata host;
  host.block_table = to_view(host_block_table, "block_table (host)");
  host.seq_lens = to_view(host_seq_lens, "seq_lens (host)");
  host.query_start_loc = to_view(host_query_start_loc, "query_start_loc (host)");
  PlanOptions opts;
  opts.num_splits = num_splits;
  opts.tile_tokens = tile_tokens;
  opts.num_threads = num_threads;
  opts.batch_invariant = batch_invariant;
  p.batch_invariant = batch_invariant;
  {
    nb::gil_scoped_release release;
    p.plan = value_or_throw(plan_attention(args, host, opts));
  }
  p.owners = {block_table, seq_lens, query_start_loc};
  if (alibi_slopes) p.owners.push_back(*alibi_slopes);
  if (sinks) p.owners.push_back(*sinks);
  return p;
}

void set_workspace(Plan& p, std::optional<OutArray> ws) {
  if (!ws) {
    p.workspace = nullptr;
    p.workspace_capacity = 0;
    p.workspace_owner = OutArray();
    return;
  }
  p.workspace = ws->data();
  p.workspace_capacity = ws->nbytes();
  p.workspace_owner = *ws;
}

/// The per-layer arguments of a planned run.
AttentionArgs planned_args(const Plan& p, const TensorView& query, const KVCache& cache,
                           const TensorView& out, const TensorView& lse) {
  AttentionArgs args;
  args.query = query;
  args.cache = cache;
  args.out = out;
  args.lse = lse;
  args.block_table = p.block_table;
  args.seq_lens = p.seq_lens;
  args.query_start_loc = p.query_start_loc;
  args.params = p.params;
  return args;
}

/// The eager fast path: metadata, parameters and workspace from the plan, K/V from the cache.
void run_planned(const Plan& p, const InArray& query, const Cache& cache, const OutArray& out,
                 const std::optional<OutArray>& lse, std::uintptr_t stream) {
  const AttentionArgs args = planned_args(p, to_view(query, "query"), cache.cache,
                                          to_view(out, "out"), to_view(lse, "lse"));
  nb::gil_scoped_release release;
  throw_if_error(run_attention(p.plan, args, p.workspace, p.workspace_capacity, as_stream(stream)));
}

/// The torch-op path: every tensor the kernels touch comes in as an argument (what a traced
/// graph passes, possibly other tensors than the planned ones); the plan supplies the kernel
/// choice and the scalar parameters.
void run_tensors(const Plan& p, const InArray& query, const OutArray& k_cache,
                 const OutArray& v_cache, const std::string& layout, float k_scale, float v_scale,
                 const InArray& block_table, const InArray& seq_lens,
                 const InArray& query_start_loc, const OutArray& out,
                 const std::optional<OutArray>& lse, const std::optional<OutArray>& workspace,
                 const std::optional<InArray>& alibi_slopes, const std::optional<InArray>& sinks,
                 std::uintptr_t stream) {
  AttentionArgs args = planned_args(p, to_view(query, "query"),
                                    cache_of(k_cache, v_cache, layout, k_scale, v_scale),
                                    to_view(out, "out"), to_view(lse, "lse"));
  args.block_table = to_view(block_table, "block_table");
  args.seq_lens = to_view(seq_lens, "seq_lens");
  args.query_start_loc = to_view(query_start_loc, "query_start_loc");
  args.params.alibi_slopes = to_view(alibi_slopes, "alibi_slopes");
  args.params.sinks = to_view(sinks, "sinks");
  void* ws = workspace ? workspace->data() : nullptr;
  const std::size_t ws_bytes = workspace ? workspace->nbytes() : 0;
  nb::gil_scoped_release release;
  throw_if_error(run_attention(p.plan, args, ws, ws_bytes, as_stream(stream)));
}

/// Seconds per run_attention call over `iters` calls of one planned problem, the arguments
/// built once: the C++ side of the host-overhead bench (bench/python_overhead.py).
double time_run_planned(const Plan& p, const InArray& query, const Cache& cache,
                        const OutArray& out, int iters) {
  const AttentionArgs args =
      planned_args(p, to_view(query, "query"), cache.cache, to_view(out, "out"), TensorView{});
  nb::gil_scoped_release release;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    throw_if_error(run_attention(p.plan, args, p.workspace, p.workspace_capacity, nullptr));
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / (iters > 0 ? iters : 1);
}

void write_kv_cache(const InArray& key, const InArray& value, const InArray& slot_mapping,
                    const Cache& cache, const std::optional<InArray>& host_slot_mapping,
                    std::uintptr_t stream) {
  const TensorView k = to_view(key, "key"), v = to_view(value, "value");
  const TensorView s = to_view(slot_mapping, "slot_mapping");
  WriteKVOptions opts;
  opts.host_slot_mapping = to_view(host_slot_mapping, "slot_mapping (host)");
  nb::gil_scoped_release release;
  throw_if_error(write_kv(k, v, s, cache.cache, as_stream(stream), opts));
}

void write_kv_tensors(const InArray& key, const InArray& value, const InArray& slot_mapping,
                      const OutArray& k_cache, const OutArray& v_cache, const std::string& layout,
                      float k_scale, float v_scale,
                      const std::optional<InArray>& host_slot_mapping, std::uintptr_t stream) {
  const TensorView k = to_view(key, "key"), v = to_view(value, "value");
  const TensorView s = to_view(slot_mapping, "slot_mapping");
  const KVCache cache = cache_of(k_cache, v_cache, layout, k_scale, v_scale);
  WriteKVOptions opts;
  opts.host_slot_mapping = to_view(host_slot_mapping, "slot_mapping (host)");
  nb::gil_scoped_release release;
  throw_if_error(write_kv(k, v, s, cache, as_stream(stream), opts));
}

void reference_write_kv_tensors(const InArray& key, const InArray& value,
                                const InArray& slot_mapping, const OutArray& k_cache,
                                const OutArray& v_cache, const std::string& layout,
                                float k_scale, float v_scale,
                                const std::optional<InArray>& k_scales,
                                const std::optional<InArray>& v_scales) {
  const TensorView k = to_view(key, "key"), v = to_view(value, "value");
  const TensorView s = to_view(slot_mapping, "slot_mapping");
  const KVCache cache = cache_of(k_cache, v_cache, layout, k_scale, v_scale, k_scales, v_scales);
  nb::gil_scoped_release release;
  throw_if_error(reference_write_kv(k, v, s, cache));
}

void merge_states(const InArray& out_a, const InArray& lse_a, const InArray& out_b,
                  const InArray& lse_b, const OutArray& out, const std::optional<OutArray>& lse,
                  std::uintptr_t stream) {
  const TensorView oa = to_view(out_a, "out_a"), la = to_view(lse_a, "lse_a");
  const TensorView ob = to_view(out_b, "out_b"), lb = to_view(lse_b, "lse_b");
  const TensorView o = to_view(out, "out"), l = to_view(lse, "lse");
  nb::gil_scoped_release release;
  throw_if_error(merge_attention_states(oa, la, ob, lb, o, l, as_stream(stream)));
}

void reference(const InArray& query, const OutArray& k_cache, const OutArray& v_cache,
               const std::string& layout, float k_scale, float v_scale,
               const InArray& block_table, const InArray& seq_lens,
               const InArray& query_start_loc, const OutArray& out,
               const std::optional<OutArray>& lse, float scale, float softcap,
               std::int32_t sliding_window, const std::optional<InArray>& alibi_slopes,
               const std::optional<InArray>& sinks, const std::optional<InArray>& k_scales,
               const std::optional<InArray>& v_scales) {
  AttentionArgs args;
  args.query = to_view(query, "query");
  args.cache = cache_of(k_cache, v_cache, layout, k_scale, v_scale, k_scales, v_scales);
  args.block_table = to_view(block_table, "block_table");
  args.seq_lens = to_view(seq_lens, "seq_lens");
  args.query_start_loc = to_view(query_start_loc, "query_start_loc");
  args.out = to_view(out, "out");
  args.lse = to_view(lse, "lse");
  args.params.scale = scale;
  args.params.softcap = softcap;
  args.params.sliding_window = sliding_window;
  args.params.alibi_slopes = to_view(alibi_slopes, "alibi_slopes");
  args.params.sinks = to_view(sinks, "sinks");
  nb::gil_scoped_release release;
  throw_if_error(reference_attention(args));
}

const char* access_name(CacheAccess a) { return a == CacheAccess::kNative ? "native" : "strided"; }

/// Elements after each block of `t` (its stride(0) past one block's elements): the CLI's
/// page_pad.
std::int64_t block_pad(const TensorView& t) {
  std::int64_t elems = 1;
  for (int i = 1; i < t.ndim; ++i) elems *= t.shape[i];
  return t.strides[0] - elems;
}

/// The selection a plan made, and the writer the same cache gets (DESIGN.md §3), as a dict:
/// the keys of `pagedattn explain --json` under the same names ("problem", "attention",
/// "cache_access", "writer", "device"), plus the package's own flat keys from before, which
/// stay for existing callers (python/pagedattn/_api.py's explain documents both).
nb::dict explain_plan(const Plan& p, const Cache& cache) {
  const KernelChoice& c = p.plan.choice();
  const ProblemDesc& pr = p.plan.problem();
  const RowKernels rows = row_kernels(c);
  const bool any_decode = pr.batch.num_decode_seqs > 0;
  const bool any_prefill = pr.batch.num_prefill_seqs > 0;
  nb::dict d;
  d["device"] = to_string(pr.device);
  nb::dict attention;
  attention["kernel"] = to_string(c.kernel);
  attention["cache_access"] = access_name(c.access);
  attention["tile_tokens"] = c.tile_tokens;
  attention["num_splits"] = c.num_splits;
  attention["shared_memory_bytes"] = c.shared_memory_bytes;
  attention["threads_per_block"] = c.threads_per_block;
  attention["workspace_bytes"] = p.plan.workspace_bytes();
  attention["decode_rows_fast_path"] = c.decode_rows_fast_path;
  attention["prefill_rows_mma"] = c.prefill_rows_mma;
  attention["batch_invariant"] = p.batch_invariant;
  attention["prefill_rows_wgmma"] = c.prefill_rows_wgmma;
  // The package's flat keys from before the CLI's names: the same values.
  for (const char* key : {"kernel", "tile_tokens", "num_splits", "shared_memory_bytes",
                          "threads_per_block", "decode_rows_fast_path", "prefill_rows_mma",
                          "batch_invariant", "prefill_rows_wgmma", "workspace_bytes"})
    d[key] = attention[key];
  d["access"] = attention["cache_access"];
  d["reason"] = c.reason;
  nb::dict row_kernel;
  row_kernel["decode"] = any_decode ? nb::object(nb::str(rows.decode.c_str())) : nb::none();
  row_kernel["prefill"] = any_prefill ? nb::object(nb::str(rows.prefill.c_str())) : nb::none();
  attention["row_kernels"] = row_kernel;
  attention["runs"] = runs_line(c, pr.batch);
  attention["prefill_rows_wgmma_ws"] = c.prefill_rows_wgmma_ws;
  attention["reason"] = c.reason;
  d["attention"] = attention;
  nb::dict batch;
  batch["num_seqs"] = pr.batch.num_seqs;
  batch["num_tokens"] = pr.batch.num_tokens;
  batch["num_decode_seqs"] = pr.batch.num_decode_seqs;
  batch["num_prefill_seqs"] = pr.batch.num_prefill_seqs;
  batch["num_empty_seqs"] = pr.batch.num_empty_seqs;
  batch["max_seq_len"] = pr.batch.max_seq_len;
  batch["max_query_len"] = pr.batch.max_query_len;
  batch["total_kv_tokens"] = pr.batch.total_kv_tokens;
  d["batch"] = batch;
  nb::dict problem;
  problem["num_heads"] = pr.num_heads;
  problem["num_kv_heads"] = pr.num_kv_heads;
  problem["gqa_ratio"] = pr.gqa_ratio();
  problem["head_size"] = pr.head_size;
  problem["dtype"] = to_string(pr.q_dtype);
  problem["q_dtype"] = to_string(pr.q_dtype);
  problem["cache_dtype"] = to_string(pr.cache_dtype);
  problem["layout"] = to_string(pr.layout);
  problem["block_size"] = pr.block_size;
  problem["num_blocks"] = pr.num_blocks;
  // The CLI pads K and V alike; caller-made caches can differ, and then there is no one value.
  const std::int64_t k_pad = block_pad(cache.cache.key), v_pad = block_pad(cache.cache.value);
  problem["page_pad"] = k_pad == v_pad ? nb::object(nb::int_(k_pad)) : nb::none();
  problem["softcap"] = pr.softcap;
  problem["sliding_window"] = pr.sliding_window;
  problem["alibi"] = pr.alibi;
  problem["sinks"] = pr.sinks;
  problem["lse"] = pr.lse;
  for (auto [key, value] : batch) problem[key] = value;
  d["problem"] = problem;
  const CacheAccessDecision access = decide_cache_access(cache.cache);
  nb::dict cache_access;
  cache_access["access"] = access_name(access.access);
  cache_access["reason"] = access.reason;
  d["cache_access"] = cache_access;
  const WriterChoice w = select_writer(cache.cache, cache.cache.key.device);
  nb::dict writer;
  writer["kernel"] = w.kernel;
  writer["access"] = access_name(w.access);
  writer["cache_access"] = access_name(w.access);
  writer["reason"] = w.reason;
  d["writer"] = writer;
  return d;
}

}  // namespace

void bind_testing(nb::module_& m);  // testing_module.cpp

namespace {

// The C++ API calls the cache tensors key_cache / value_cache; Python's arguments and
// attributes are k_cache / v_cache (KVCache, the torch ops), so messages use those names.
std::string python_names(std::string msg) {
  auto is_ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"key_cache", "k_cache"},
                                 std::pair<std::string, std::string>{"value_cache", "v_cache"}}) {
    for (std::size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at)) {
      const bool whole = (at == 0 || !is_ident(msg[at - 1])) &&
                         (at + from.size() == msg.size() || !is_ident(msg[at + from.size()]));
      if (whole) {
        msg.replace(at, from.size(), to);
        at += to.size();
      } else {
        at += from.size();
      }
    }
  }
  return msg;
}

}  // namespace

void init_module(nb::module_& m) {
  m.doc() = "pagedattn C++ API (use the `pagedattn` package, not this module)";
  // Objects that pytest parametrisations or torch caches still hold at interpreter exit are
  // not leaks of this module.
  nb::set_leak_warnings(false);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = PyExc_RuntimeError;
      if (e.status.code() == StatusCode::kInvalidArgument) type = PyExc_ValueError;
      if (e.status.code() == StatusCode::kUnsupported) type = PyExc_NotImplementedError;
      PyErr_SetString(type, python_names(e.status.message()).c_str());
    }
  });

  m.def("version", &version);
  m.def("built_with_cuda", &built_with_cuda);
  m.def("default_scale", &default_scale);
  m.def("cuda_device_available", [](int index) { return query_device(Device::cuda(index)).ok(); });

  nb::class_<Cache>(m, "Cache")
      .def_prop_ro("layout", [](const Cache& c) { return std::string(to_string(c.cache.layout)); })
      .def_prop_ro("dtype", [](const Cache& c) { return std::string(to_string(c.geometry.dtype)); })
      .def_prop_ro("device", [](const Cache& c) { return to_string(c.cache.key.device); })
      .def_prop_ro("num_blocks", [](const Cache& c) { return c.geometry.num_blocks; })
      .def_prop_ro("block_size", [](const Cache& c) { return c.geometry.block_size; })
      .def_prop_ro("num_kv_heads", [](const Cache& c) { return c.geometry.num_kv_heads; })
      .def_prop_ro("head_size", [](const Cache& c) { return c.geometry.head_size; })
      .def_prop_ro("k_scale", [](const Cache& c) { return c.cache.k_scale; })
      .def_prop_ro("v_scale", [](const Cache& c) { return c.cache.v_scale; })
      .def_prop_ro("has_scale_tensors", [](const Cache& c) { return c.cache.k_scales.defined(); })
      .def_prop_ro("access", [](const Cache& c) {
        return std::string(access_name(decide_cache_access(c.cache).access));
      });
  m.def("make_cache", &make_cache, nb::arg("key"), nb::arg("value"), nb::arg("layout"),
        nb::arg("k_scale"), nb::arg("v_scale"), nb::arg("k_scales").none() = nb::none(),
        nb::arg("v_scales").none() = nb::none());

  nb::class_<Plan>(m, "Plan")
      .def_prop_ro("workspace_bytes", [](const Plan& p) { return p.plan.workspace_bytes(); })
      .def_prop_ro("num_tokens", [](const Plan& p) { return p.plan.problem().batch.num_tokens; })
      .def_prop_ro("kernel", [](const Plan& p) { return std::string(to_string(p.plan.choice().kernel)); })
      .def("set_workspace", &set_workspace, nb::arg("workspace").none());
  m.def("plan", &make_plan, nb::arg("cache"), nb::arg("q_dtype"), nb::arg("num_tokens"),
        nb::arg("num_heads"), nb::arg("lse"), nb::arg("block_table"), nb::arg("seq_lens"),
        nb::arg("query_start_loc"), nb::arg("host_block_table"), nb::arg("host_seq_lens"),
        nb::arg("host_query_start_loc"), nb::arg("scale"), nb::arg("softcap"),
        nb::arg("sliding_window"), nb::arg("alibi_slopes").none(), nb::arg("sinks").none(),
        nb::arg("num_splits"), nb::arg("tile_tokens"), nb::arg("num_threads"),
        nb::arg("batch_invariant") = false);
  m.def("run_planned", &run_planned, nb::arg("plan"), nb::arg("query"), nb::arg("cache"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("stream"));
  m.def("run_tensors", &run_tensors, nb::arg("plan"), nb::arg("query"), nb::arg("k_cache"),
        nb::arg("v_cache"), nb::arg("layout"), nb::arg("k_scale"), nb::arg("v_scale"),
        nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("query_start_loc"), nb::arg("out"),
        nb::arg("lse").none(), nb::arg("workspace").none(), nb::arg("alibi_slopes").none(),
        nb::arg("sinks").none(), nb::arg("stream"));
  m.def("time_run_planned", &time_run_planned, nb::arg("plan"), nb::arg("query"),
        nb::arg("cache"), nb::arg("out"), nb::arg("iters"));
  m.def("write_kv", &write_kv_cache, nb::arg("key"), nb::arg("value"), nb::arg("slot_mapping"),
        nb::arg("cache"), nb::arg("host_slot_mapping").none(), nb::arg("stream"));
  m.def("write_kv_tensors", &write_kv_tensors, nb::arg("key"), nb::arg("value"),
        nb::arg("slot_mapping"), nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("layout"),
        nb::arg("k_scale"), nb::arg("v_scale"), nb::arg("host_slot_mapping").none(),
        nb::arg("stream"));
  m.def("reference_write_kv", &reference_write_kv_tensors, nb::arg("key"), nb::arg("value"),
        nb::arg("slot_mapping"), nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("layout"),
        nb::arg("k_scale"), nb::arg("v_scale"), nb::arg("k_scales").none() = nb::none(),
        nb::arg("v_scales").none() = nb::none());
  m.def("merge_states", &merge_states, nb::arg("out_a"), nb::arg("lse_a"), nb::arg("out_b"),
        nb::arg("lse_b"), nb::arg("out"), nb::arg("lse").none(), nb::arg("stream"));
  m.def("reference_attention", &reference, nb::arg("query"), nb::arg("k_cache"),
        nb::arg("v_cache"), nb::arg("layout"), nb::arg("k_scale"), nb::arg("v_scale"),
        nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("query_start_loc"), nb::arg("out"),
        nb::arg("lse").none(), nb::arg("scale"), nb::arg("softcap"), nb::arg("sliding_window"),
        nb::arg("alibi_slopes").none(), nb::arg("sinks").none(),
        nb::arg("k_scales").none() = nb::none(), nb::arg("v_scales").none() = nb::none());
  m.def("explain", &explain_plan, nb::arg("plan"), nb::arg("cache"));

#ifdef PAGEDATTN_PY_TESTING
  nb::module_ t = m.def_submodule("testing", "The shared test-case list (src/testing/harness.h)");
  bind_testing(t);
#endif
}

}  // namespace pagedattn::python

NB_MODULE(_C, m) { pagedattn::python::init_module(m); }
