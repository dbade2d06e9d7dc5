// The id that names a campaign in every JSON line of its shards (`fuzz --json`, `explore
// --json`): the FNV-1a of its campaign object's text (nlohmann's dump, keys sorted), as
// 16 hex digits, so that `cowstate merge` can tell shards of one campaign from others and
// a campaign object edited after the fact from its id.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cowstate::cli {

// FNV-1a over the bytes of `text`, from `h`: campaign ids, run digests, scenario hashes.
std::uint64_t fnv1a(std::string_view text, std::uint64_t h = 0xcbf29ce484222325ULL);

std::string campaign_id(const nlohmann::json& campaign);

}  // namespace cowstate::cli
