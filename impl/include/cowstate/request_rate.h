// RequestRate: a decayed count of accesses, the "request rate" FLIP-50's spill/load manager
// weighs against size (spill_load_manager.h).
//
// An access only bumps a plain counter (hits); fold(now) adds the hits to the rate after
// decaying it by the time since the last fold, with half-life `half_life_ms`: a rate is
// halved for every whole half-life elapsed, and within one the decay is the linear
// interpolation of 2^-x between x = 0 and 1 (1 - x/2), in integer arithmetic. So the rate is
// deterministic for a given sequence of (hits, now) in every build, which the simulator needs
// (its clock is logical), and monotone in both. Times come from the backend's injected
// clock (TtlTimeProvider); a clock that goes backwards decays nothing.
//
// The rate is kept in 1/1024ths of an access; value() reports accesses (per half-life, in
// steady state: a constant r hits per half-life converges to about 2r).
//
// Thread safety: the writer thread only.
//
// Invariants
//  R1  fold() never increases the rate by more than the hits folded, and with no hits never
//      increases it at all.
#pragma once

#include <cstdint>

#include "cowstate/assert.h"

namespace cowstate {

class RequestRate {
 public:
  static constexpr std::uint64_t kOne = 1024;  // one access, in fixed point

  void hit() noexcept { ++hits_; }
  std::uint64_t pending_hits() const noexcept { return hits_; }
  // Decays the rate to `now_ms` and adds the hits since the last fold.
  // REQUIRES: 0 < half_life_ms < 2^31.
  void fold(std::int64_t now_ms, std::int64_t half_life_ms) noexcept {
    COWSTATE_ASSERT(half_life_ms > 0 && half_life_ms < (std::int64_t{1} << 31), "R1",
                    "a request-rate half-life out of (0, 2^31) ms");
    const std::uint64_t before = rate_;
    if (now_ms > last_ms_) {
      const std::int64_t elapsed = now_ms - last_ms_;
      const std::int64_t halvings = elapsed / half_life_ms;
      rate_ = halvings >= 64 ? 0 : rate_ >> halvings;
      const auto frac = static_cast<std::uint64_t>(elapsed % half_life_ms);
      const std::uint64_t two_h = 2 * static_cast<std::uint64_t>(half_life_ms);
      // rate * (1 - frac / (2 * half_life)) in two parts, each product below 2^63 for a
      // half-life below 2^31 ms.
      rate_ -= rate_ / two_h * frac + rate_ % two_h * frac / two_h;
      last_ms_ = now_ms;
    }
    COWSTATE_ASSERT(rate_ <= before, "R1", "decay increased a request rate");
    rate_ += hits_ * kOne;
    hits_ = 0;
  }
  // Accesses, decayed (as of the last fold).
  double value() const noexcept { return static_cast<double>(rate_) / kOne; }
  std::uint64_t fixed() const noexcept { return rate_; }

 private:
  std::uint64_t hits_ = 0;
  std::uint64_t rate_ = 0;
  std::int64_t last_ms_ = 0;
};

}  // namespace cowstate
