// Reading the CLI's input files; see cli_input.h.
#include "cli/cli_input.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace cowstate::cli {

std::optional<std::string> read_input_file(const std::string& path, const char* who,
                                           std::size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(), std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    std::fprintf(stderr, "%s: %s is not a regular file (%s); expected a text file\n", who,
                 path.c_str(),
                 S_ISDIR(st.st_mode)                          ? "a directory"
                 : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                 : S_ISFIFO(st.st_mode)                       ? "a pipe"
                                                              : "not a file");
    return std::nullopt;
  }
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    std::fprintf(stderr, "%s: %s is %lld bytes; expected at most %zu (%zu MiB)\n", who,
                 path.c_str(), static_cast<long long>(st.st_size), max_bytes, max_bytes >> 20);
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(), std::strerror(errno));
    return std::nullopt;
  }
  // One byte more than stat() said: a file that grew since is refused, not read on.
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  std::string text(size + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    std::fprintf(stderr, "%s: cannot read %s\n", who, path.c_str());
    return std::nullopt;
  }
  if (static_cast<std::size_t>(in.gcount()) > size) {
    std::fprintf(stderr, "%s: %s changed while it was read\n", who, path.c_str());
    return std::nullopt;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

std::optional<sim::Scenario> load_scenario(const std::string& path, const char* who) {
  auto text = read_input_file(path, who, kScenarioBytesMax);
  if (!text) return std::nullopt;
  sim::ParseError error;
  auto s = sim::parse_scenario(*text, path, &error);
  if (!s) std::fprintf(stderr, "%s: %s\n", who, error.to_string().c_str());
  return s;
}

}  // namespace cowstate::cli
