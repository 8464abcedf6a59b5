// Error model of the public API: every public function returns a Status or a Result<T>;
// nothing on a user-reachable path throws across the API, exits or aborts.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace pagedattn {

/// Category of a failure. The numeric values are stable (they appear in JSON output).
enum class StatusCode : int {
  kOk = 0,
  /// An argument is malformed: wrong shape, dtype, stride, value or inconsistent metadata.
  kInvalidArgument = 1,
  /// The arguments are well formed but this build / device / path cannot run them
  /// (for example an fp8 `split` cache whose head_size is not a multiple of 16).
  kUnsupported = 2,
  /// The requested device is not available (no CUDA in this build, or no GPU present).
  kDeviceUnavailable = 3,
  /// A CUDA runtime call or another internal step failed.
  kInternal = 4,
};

/// Short stable name of a code ("ok", "invalid_argument", ...).
const char* to_string(StatusCode code);

/// Outcome of a call: a code and, on failure, a message that names the argument, what was
/// expected and what was found (e.g. "slot_mapping[3] = 99: expected < 64 slots").
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid_argument: <message>" or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value or the Status explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit on purpose

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  /// Precondition: ok(). Accessing the value of a failed Result is a programming error.
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace pagedattn

/// Early return of a failed Status from a function returning Status or Result<T>.
#define PAGEDATTN_RETURN_IF_ERROR(expr)            \
  do {                                             \
    ::pagedattn::Status pagedattn_st_ = (expr);    \
    if (!pagedattn_st_.ok()) return pagedattn_st_; \
  } while (0)
