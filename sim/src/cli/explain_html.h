// `cowstate explain FILE --format html`: the step viewer (sim/src/cli/explain_viewer.html,
// embedded at configure time) with one explain model (cowstate/sim/explain.h) inside it:
// one self-contained page, no network, no external script.
#pragma once

#include <string>

namespace cowstate::cli {

// The viewer page holding `model_json`.
std::string explain_html(const std::string& model_json);

}  // namespace cowstate::cli
