// Operating errors: Status (ok, or a message a user can act on) and Result<T> (a value, or
// the Status saying why there is none).
//
// Operating errors are expected (a corrupt checkpoint, a bad scenario file) and are returned;
// programmer errors are assertion failures (cowstate/assert.h). A message names where the
// problem is and what was expected and found, e.g.
//   "offset 1234: expected 8 bytes for int64 state, found 3".
// There is no error code: no caller reacts differently to different failures yet.
//
// An ok Status is a null pointer, so passing ok Statuses around on a hot path costs no more
// than a pointer test. `Status::ok()` cannot exist next to `bool ok() const` (C++ does not
// overload a static and a non-static member on the same parameters): an ok Status is
// `Status{}` or `Status::success()`.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cowstate/assert.h"

namespace cowstate {

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(const Status& o)
      : message_(o.message_ ? std::make_unique<std::string>(*o.message_) : nullptr) {}
  Status(Status&&) noexcept = default;
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status success() noexcept { return Status(); }
  // REQUIRES: `message` is not empty.
  static Status error(std::string message) {
    COWSTATE_ASSERT(!message.empty(), "REQUIRES", "an error Status needs a message");
    Status s;
    s.message_ = std::make_unique<std::string>(std::move(message));
    return s;
  }

  bool ok() const noexcept { return message_ == nullptr; }
  // The empty string when ok().
  const std::string& message() const noexcept {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }

 private:
  std::unique_ptr<std::string> message_;  // null when ok
};

// A T, or the error Status explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  // REQUIRES: !status.ok().
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    COWSTATE_ASSERT(!status_.ok(), "REQUIRES", "a Result built from a Status needs an error");
  }

  bool ok() const noexcept { return value_.has_value(); }
  // Status::success() when ok().
  const Status& status() const noexcept { return status_; }

  // REQUIRES: ok().
  T& value() & {
    COWSTATE_ASSERT(ok(), "REQUIRES", "value() of an error Result");
    return *value_;
  }
  const T& value() const& {
    COWSTATE_ASSERT(ok(), "REQUIRES", "value() of an error Result");
    return *value_;
  }
  T&& value() && {
    COWSTATE_ASSERT(ok(), "REQUIRES", "value() of an error Result");
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace cowstate
