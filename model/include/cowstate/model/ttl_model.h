#ifndef COWSTATE_MODEL_TTL_MODEL_H_
#define COWSTATE_MODEL_TTL_MODEL_H_

// TtlModel is the reference semantics of state time-to-live at logical time: the oracle
// the backend simulation judges TTL states by. Written from the definition (Flink's
// TtlUtils.expired, TtlStateFactory's update types and visibilities), with no code shared
// with impl/ttl.h, so a planted bug in impl's expiry rule cannot hide from it.
//
// Values. A TTL state's value is a flat vector of int64 made of elements of `stride`
// numbers each, the last number of an element being its last-access time: a value state
// [v, t] (stride 2), a list [e1, t1, e2, t2, ...] (stride 2), a map [k1, v1, t1, ...]
// (stride 3, sorted by user key).
//
// Rules.
//   expiry    an element is expired at `now` iff last_access + ttl <= now, the sum
//             saturating at INT64_MAX: the boundary instant is expired.
//   read      a live element is returned (and, under OnReadAndWrite, its last access
//             becomes now); an expired one is removed and returned only under
//             ReturnExpiredIfNotCleanedUp, and only if cleanup has not removed it first.
//   cleanup   (incremental, lazy, on key switch) may remove elements expired now, nothing
//             else: no live element, no changed value or timestamp, and an entry with no
//             element left is removed, never stored empty (is_cleanup).
//   full-snapshot cleanup
//             a checkpoint leaves out the elements expired when each entry is written; for
//             an entry written somewhere in [lo, hi] the elements expired at lo are left
//             out, those live at hi kept (is_full_snapshot_write), exactly when lo == hi.
//
// Thread safety: a value; const methods only.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cowstate/model/versioned_map.h"

namespace cowstate::model {

class TtlModel {
 public:
  using Value = std::vector<std::int64_t>;

  // REQUIRES: ttl >= 1.
  TtlModel(std::int64_t ttl, bool refresh_on_read, bool return_expired)
      : ttl_(ttl), refresh_on_read_(refresh_on_read), return_expired_(return_expired) {
    detail::require(ttl >= 1, "a TTL is positive");
  }

  std::int64_t ttl() const { return ttl_; }
  bool refresh_on_read() const { return refresh_on_read_; }
  bool return_expired() const { return return_expired_; }

  // last_access + ttl <= at, saturating.
  bool expired_at(std::int64_t last_access, std::int64_t at) const {
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    return (last_access > max - ttl_ ? max : last_access + ttl_) <= at;
  }

  // The elements of `v` live at `at`; with `refresh`, their last access becomes `at`.
  Value live_part(std::size_t stride, const Value& v, std::int64_t at, bool refresh) const {
    Value out;
    for (std::size_t i = 0; i + stride <= v.size(); i += stride) {
      if (expired_at(v[i + stride - 1], at)) continue;
      out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(i),
                 v.begin() + static_cast<std::ptrdiff_t>(i + stride));
      if (refresh) out.back() = at;
    }
    return out;
  }

  // What a read at `at` leaves stored of `v` (empty: the entry is removed).
  Value after_read(std::size_t stride, const Value& v, std::int64_t at) const {
    return live_part(stride, v, at, refresh_on_read_);
  }

  // Whether `got` (empty: no entry) is what cleanup at `at` may make of `had`.
  bool is_cleanup(std::size_t stride, const Value& had, const Value& got, std::int64_t at) const {
    return is_thinned(
        stride, had, got, [](std::int64_t) { return true; },
        [&](std::int64_t last) { return expired_at(last, at); });
  }

  // Whether `got` (empty: left out) is what full-snapshot cleanup may write of `had` when
  // writing it somewhere in [lo, hi].
  bool is_full_snapshot_write(std::size_t stride, const Value& had, const Value& got,
                              std::int64_t lo, std::int64_t hi) const {
    return is_thinned(
        stride, had, got, [&](std::int64_t last) { return !expired_at(last, lo); },
        [&](std::int64_t last) { return expired_at(last, hi); });
  }

  // Whether `got` is `had` less some elements, in order: each kept one unchanged and
  // keep_ok(its time), each dropped one drop_ok(its time). Equal elements have equal
  // times, so matching greedily from the left decides it.
  template <class Keep, class Drop>
  static bool is_thinned(std::size_t stride, const Value& had, const Value& got, Keep&& keep_ok,
                         Drop&& drop_ok) {
    if (stride == 0 || had.size() % stride != 0 || got.size() % stride != 0) return false;
    std::size_t j = 0;  // next element of `got`
    for (std::size_t i = 0; i < had.size(); i += stride) {
      const std::int64_t t = had[i + stride - 1];
      const auto at = had.begin() + static_cast<std::ptrdiff_t>(i);
      const bool same = j < got.size() &&
                        std::equal(at, at + static_cast<std::ptrdiff_t>(stride),
                                   got.begin() + static_cast<std::ptrdiff_t>(j));
      if (same && keep_ok(t)) {
        j += stride;
      } else if (!drop_ok(t)) {
        return false;
      }
    }
    return j == got.size();
  }

 private:
  std::int64_t ttl_;
  bool refresh_on_read_;
  bool return_expired_;
};

}  // namespace cowstate::model

#endif  // COWSTATE_MODEL_TTL_MODEL_H_
