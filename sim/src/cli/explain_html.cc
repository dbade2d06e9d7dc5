// The HTML step viewer page; see explain_html.h.
#include "cli/explain_html.h"

#include "cowstate/assert.h"

extern const char cowstate_explain_viewer_html[];  // generated/explain_viewer.cc

namespace cowstate::cli {

std::string explain_html(const std::string& model_json) {
  static const std::string kPlaceholder = "@COWSTATE_EXPLAIN_MODEL@";
  std::string page = cowstate_explain_viewer_html;
  const std::size_t at = page.find(kPlaceholder);
  COWSTATE_ASSERT(at != std::string::npos, "REQUIRES", "the viewer has a place for the model");
  // Inside <script type="application/json"> only "</" could end the element early: '<'
  // occurs in JSON only inside strings, where \u003c means the same character.
  std::string safe;
  safe.reserve(model_json.size());
  for (char c : model_json) {
    if (c == '<') {
      safe += "\\u003c";
    } else {
      safe += c;
    }
  }
  page.replace(at, kPlaceholder.size(), safe);
  COWSTATE_ASSERT(page.find(kPlaceholder) == std::string::npos, "REQUIRES", "one placeholder");
  return page;
}

}  // namespace cowstate::cli
