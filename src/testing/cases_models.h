// Matrix cases with the head shapes of real models (cases_models.cpp), appended to
// matrix_cases by cases.cpp.
#pragma once

#include <vector>

#include "src/testing/harness.h"

namespace pagedattn::testing {

/// Appends the SmolLM2-135M-shaped cases (9 query / 3 KV heads of 64: GQA 3, odd KV heads) for
/// `dev` to `out`; none when `quick` (the compute-sanitizer subset is full). Names and seeds as
/// the other matrix cases (case_name, seed from the name).
void add_model_cases(Device dev, bool quick, std::vector<CaseConfig>* out);

}  // namespace pagedattn::testing
