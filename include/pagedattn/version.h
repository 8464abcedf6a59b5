#pragma once

namespace pagedattn {
/// Library version "MAJOR.MINOR.PATCH".
const char* version();
/// True if this build contains the CUDA backend (a GPU may still be absent at run time).
bool built_with_cuda();
}  // namespace pagedattn
