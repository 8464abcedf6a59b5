#include "pagedattn/status.h"

#include "pagedattn/version.h"

namespace pagedattn {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kDeviceUnavailable: return "device_unavailable";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(pagedattn::to_string(code_)) + ": " + message_;
}

const char* version() { return PAGEDATTN_VERSION; }

bool built_with_cuda() {
#if defined(PAGEDATTN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace pagedattn
