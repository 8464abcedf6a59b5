// pagedattn._C.testing: the shared case list of GoogleTest and `pagedattn verify`
// (src/testing/harness.h) for the Python tests, so that they run the same configurations
// instead of a copy of them. CaseConfig is exposed read-only; run_case runs one case through
// the C++ harness (the Python tests run the Python API on the same configuration).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "python/src/convert.h"
#include "src/testing/harness.h"

namespace pagedattn::python {

namespace {

using testing::CaseConfig;

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) return Device::cuda(std::stoi(s.substr(5)));
  throw StatusError{Status(StatusCode::kInvalidArgument,
                           "device '" + s + "': expected cpu, cuda or cuda:N")};
}

}  // namespace

void bind_testing(nb::module_& m) {
  nb::class_<CaseConfig> c(m, "CaseConfig");
  c.def_prop_ro("name", [](const CaseConfig& x) { return testing::case_name(x); })
      .def_prop_ro("device", [](const CaseConfig& x) { return to_string(x.device); })
      .def_prop_ro("layout", [](const CaseConfig& x) { return std::string(to_string(x.layout)); })
      .def_ro("num_heads", &CaseConfig::num_heads)
      .def_ro("num_kv_heads", &CaseConfig::num_kv_heads)
      .def_ro("head_size", &CaseConfig::head_size)
      .def_ro("block_size", &CaseConfig::block_size)
      .def_prop_ro("dtype", [](const CaseConfig& x) { return std::string(to_string(x.dtype)); })
      .def_prop_ro("kv_dtype", [](const CaseConfig& x) { return std::string(to_string(x.kv_dtype)); })
      .def_ro("seq_lens", &CaseConfig::seq_lens)
      .def_ro("query_lens", &CaseConfig::query_lens)
      .def_ro("planned_seq_lens", &CaseConfig::planned_seq_lens)
      .def_ro("sliding_window", &CaseConfig::sliding_window)
      .def_ro("softcap", &CaseConfig::softcap)
      .def_ro("alibi", &CaseConfig::alibi)
      .def_ro("sinks", &CaseConfig::sinks)
      .def_ro("lse", &CaseConfig::lse)
      .def_ro("page_pad", &CaseConfig::page_pad)
      .def_ro("value_page_pad", &CaseConfig::value_page_pad)
      .def_ro("seed", &CaseConfig::seed)
      .def_ro("extra_blocks", &CaseConfig::extra_blocks)
      .def_prop_ro("num_splits", [](const CaseConfig& x) { return x.plan.num_splits; })
      .def_prop_ro("tile_tokens", [](const CaseConfig& x) { return x.plan.tile_tokens; })
      .def_ro("k_scale", &CaseConfig::k_scale)
      .def_ro("v_scale", &CaseConfig::v_scale)
      .def_prop_ro("scale", [](const CaseConfig& x) { return testing::case_scale(x); })
      .def_ro("token_pad", &CaseConfig::token_pad)
      .def_ro("head_pad", &CaseConfig::head_pad)
      .def_ro("out_token_pad", &CaseConfig::out_token_pad)
      .def_ro("in_place", &CaseConfig::in_place)
      .def_ro("strided_metadata", &CaseConfig::strided_metadata)
      .def_prop_ro("slot_dtype", [](const CaseConfig& x) { return std::string(to_string(x.slot_dtype)); })
      .def_ro("nan_query", &CaseConfig::nan_query)
      .def_ro("neg_inf_keys", &CaseConfig::neg_inf_keys)
      .def_ro("neg_inf_sinks", &CaseConfig::neg_inf_sinks)
      .def("__repr__", [](const CaseConfig& x) { return "<CaseConfig " + testing::case_name(x) + ">"; });

  m.def(
      "matrix_cases",
      [](const std::string& device, bool quick) {
        return testing::matrix_cases(parse_device(device), quick);
      },
      nb::arg("device") = "cpu", nb::arg("quick") = false,
      "The correctness matrix of src/testing/cases.cpp for `device` (the list GoogleTest and "
      "`pagedattn verify` run).");
  m.def(
      "tolerance_for",
      [](const std::string& dtype, const std::string& kv_dtype) {
        const testing::Tolerance t = testing::tolerance_for(value_or_throw(parse_dtype(dtype)),
                                                            value_or_throw(parse_dtype(kv_dtype)));
        return std::make_tuple(t.atol, t.rtol);
      },
      nb::arg("dtype"), nb::arg("kv_dtype"), "(atol, rtol) of the comparison budget (DESIGN.md §4).");
  m.def(
      "run_case",
      [](const CaseConfig& config) {
        testing::CaseResult r;
        {
          nb::gil_scoped_release release;
          r = testing::run_case(config);
        }
        throw_if_error(r.status);
        nb::dict d;
        d["pass"] = r.pass;
        d["max_abs_error"] = r.max_abs_error;
        d["worst_ratio"] = r.worst_ratio;
        d["elements_checked"] = r.elements_checked;
        d["writer_exact"] = r.writer_exact;
        d["detail"] = r.detail;
        d["kernel"] = std::string(to_string(r.choice.kernel));
        return d;
      },
      nb::arg("config"), "The C++ harness on one case (src/testing/harness.h run_case).");
}

}  // namespace pagedattn::python
