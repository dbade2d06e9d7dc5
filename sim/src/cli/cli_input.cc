// Reading the CLI's input files; see cli_input.h.
#include "cli/cli_input.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace cowstate::cli {

namespace {

// The size of a regular file within `max_bytes`, or nullopt after a message.
std::optional<std::size_t> checked_size(const std::string& path, const char* who,
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
  return static_cast<std::size_t>(st.st_size);
}

std::optional<std::ifstream> open_input(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(), std::strerror(errno));
    return std::nullopt;
  }
  return in;
}

// Counts what bounds a scenario's items (scenario_items_max) in chunks, never holding the
// text; nullopt after a message when the file cannot be read or is not `size` bytes.
std::optional<std::size_t> count_items_max(std::ifstream& in, std::size_t size,
                                           const std::string& path, const char* who) {
  std::size_t items = 1, bytes = 0;
  std::string chunk(std::size_t{1} << 16, '\0');
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    const auto n = static_cast<std::size_t>(in.gcount());
    bytes += n;
    items += sim::scenario_items_max(std::string_view(chunk.data(), n)) - 1;
    if (bytes > size) break;
  }
  if (in.bad()) {
    std::fprintf(stderr, "%s: cannot read %s\n", who, path.c_str());
    return std::nullopt;
  }
  if (bytes != size) {
    std::fprintf(stderr, "%s: %s changed while it was read\n", who, path.c_str());
    return std::nullopt;
  }
  in.clear();
  in.seekg(0);
  return items;
}

}  // namespace

std::optional<std::string> read_input_file(const std::string& path, const char* who,
                                           std::size_t max_bytes) {
  const auto checked = checked_size(path, who, max_bytes);
  if (!checked) return std::nullopt;
  auto in = open_input(path, who);
  if (!in) return std::nullopt;
  // One byte more than stat() said: a file that grew since is refused, not read on.
  const std::size_t size = *checked;
  std::string text(size + 1, '\0');
  in->read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in->bad()) {
    std::fprintf(stderr, "%s: cannot read %s\n", who, path.c_str());
    return std::nullopt;
  }
  if (static_cast<std::size_t>(in->gcount()) > size) {
    std::fprintf(stderr, "%s: %s changed while it was read\n", who, path.c_str());
    return std::nullopt;
  }
  text.resize(static_cast<std::size_t>(in->gcount()));
  return text;
}

std::optional<sim::Scenario> load_scenario(const std::string& path, const char* who) {
  // Read twice, never whole: once to size the item array, once to parse line by line.
  const auto size = checked_size(path, who, kScenarioBytesMax);
  if (!size) return std::nullopt;
  auto in = open_input(path, who);
  if (!in) return std::nullopt;
  const auto items_max = count_items_max(*in, *size, path, who);
  if (!items_max) return std::nullopt;
  sim::ParseError error;
  auto s = sim::parse_scenario(*in, *items_max, path, &error);
  if (in->bad()) {
    std::fprintf(stderr, "%s: cannot read %s\n", who, path.c_str());
    return std::nullopt;
  }
  if (!s) std::fprintf(stderr, "%s: %s\n", who, error.to_string().c_str());
  return s;
}

}  // namespace cowstate::cli
