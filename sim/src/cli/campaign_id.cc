// Campaign ids; see campaign_id.h.
#include "cli/campaign_id.h"

#include "cowstate/sim/campaign.h"

namespace cowstate::cli {

std::uint64_t fnv1a(std::string_view text, std::uint64_t h) {
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string campaign_id(const nlohmann::json& campaign) {
  return sim::trace_hash_text(fnv1a(campaign.dump()));
}

}  // namespace cowstate::cli
