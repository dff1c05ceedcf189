#include "runtime/fault_injection.h"

#include "ir/error.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace ampfuse::runtime {

namespace {

constexpr size_t kKinds = 4;
constexpr std::array<const char*, kKinds> kNames = {"compile", "primitive", "alloc", "cache_write"};

struct Rule {
  bool on = false;
  int64_t nth = 0;   // 0: every time
  int64_t seen = 0;  // checks so far
};

struct Config {
  std::string spec;
  std::array<Rule, kKinds> rules{};
};

Config parse(const std::string& spec) {
  Config c;
  c.spec = spec;
  const auto bad = [&](std::string_view why) -> Config {
    fail("AMPFUSE_FAULT='{}': {} (expected KIND or KIND:N, comma-separated, KIND one of compile, primitive, "
         "alloc, cache_write; N >= 1: only the Nth time)",
         spec, why);
  };
  size_t pos = 0;
  while (pos <= spec.size() && !spec.empty()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view item(spec.data() + pos, comma - pos);
    const size_t colon = item.find(':');
    const std::string_view kind = item.substr(0, colon);
    size_t k = 0;
    while (k < kKinds && kind != kNames[k]) ++k;
    if (k == kKinds) return bad(fmt::format("unknown fault '{}'", kind));
    Rule& r = c.rules[k];
    if (r.on) return bad(fmt::format("'{}' is given twice", kind));
    r.on = true;
    if (colon != std::string_view::npos) {
      const std::string_view n = item.substr(colon + 1);
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), r.nth);
      if (n.empty() || ec != std::errc() || end != n.data() + n.size() || r.nth < 1)
        return bad(fmt::format("'{}' is not a count of at least 1", n));
    }
    pos = comma + 1;
  }
  return c;
}

// The configuration, parsed from the environment on first use. `any` keeps the common case
// (no fault) to one atomic load on hot paths such as tensor allocation.
std::mutex g_mutex;
std::optional<Config> g_config;  // under g_mutex
std::atomic<int> g_state{0};     // 0: not read yet, 1: no fault, 2: some fault

void install(Config c) {
  const bool any = std::any_of(c.rules.begin(), c.rules.end(), [](const Rule& r) { return r.on; });
  g_config = std::move(c);
  g_state.store(any ? 2 : 1, std::memory_order_release);
}

void ensure_read_locked() {
  if (g_config) return;
  const char* env = std::getenv("AMPFUSE_FAULT");
  install(parse(env ? env : ""));
}

}  // namespace

const char* fault_name(Fault f) { return kNames[static_cast<size_t>(f)]; }

bool fault_strikes(Fault f) {
  if (g_state.load(std::memory_order_acquire) == 1) return false;
  std::lock_guard lock(g_mutex);
  ensure_read_locked();
  Rule& r = g_config->rules[static_cast<size_t>(f)];
  if (!r.on) return false;
  ++r.seen;
  return r.nth == 0 || r.seen == r.nth;
}

std::string injected_fault_note() {
  std::lock_guard lock(g_mutex);
  ensure_read_locked();
  return fmt::format("(injected fault: AMPFUSE_FAULT={})", g_config->spec);
}

struct ScopedFault::Saved {
  std::optional<Config> config;
};

ScopedFault::ScopedFault(const std::string& spec) {
  Config c = parse(spec);  // throws before anything changes (or is allocated)
  saved_ = new Saved;
  std::lock_guard lock(g_mutex);
  saved_->config = g_config;
  install(std::move(c));
}

ScopedFault::~ScopedFault() {
  std::lock_guard lock(g_mutex);
  if (saved_->config) {
    install(std::move(*saved_->config));
  } else {
    g_config.reset();
    g_state.store(0, std::memory_order_release);
  }
  delete saved_;
}

}  // namespace ampfuse::runtime
