#include "engine/api/amp_scope.h"

#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace ampfuse::amp {

namespace {

using engine::AmpOptions;

struct GlobalState {
  std::mutex mutex;
  std::optional<AmpOptions> init;  // set by init()
};

GlobalState& global() {
  static GlobalState s;
  return s;
}

struct ScopeEntry {
  uint64_t id;
  bool enabled;
  std::optional<ir::DType> target;
};

// This thread's open scopes, outermost first.
thread_local std::vector<ScopeEntry> t_scopes;

std::atomic<uint64_t> g_next_scope_id{1};

void check_target(ir::DType t, const char* where) {
  if (t != ir::DType::bf16 && t != ir::DType::f16)
    fail("{}: the AMP target must be f16 or bf16, not {}", where, ir::dtype_name(t));
}

void join(std::string& out, const char* key, const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::vector<std::string> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  out += fmt::format(";{}={}", key, fmt::join(sorted, ","));
}

}  // namespace

void init(ir::DType target, Overrides overrides) {
  check_target(target, "amp::init");
  AmpOptions o;
  o.target = target;
  o.lp16_ops = std::move(overrides.lp16_ops);
  o.fp32_ops = std::move(overrides.fp32_ops);
  o.widest_ops = std::move(overrides.widest_ops);
  o.neutral_ops = std::move(overrides.neutral_ops);
  o.conditional_fp32_ops = std::move(overrides.conditional_fp32_ops);
  o.excluded_nodes = std::move(overrides.excluded_nodes);
  o.cast_narrow = overrides.cast_narrow;
  o.layout = std::move(overrides.layout);
  with_context("amp::init", [&] { engine::AmpPolicy check(o); });
  if (!o.layout.empty() && o.layout != "nhwc") fail("amp::init: layout must be \"\" or \"nhwc\", not \"{}\"", o.layout);
  std::lock_guard lock(global().mutex);
  global().init = std::move(o);
}

void reset() {
  std::lock_guard lock(global().mutex);
  global().init.reset();
}

bool initialized() {
  std::lock_guard lock(global().mutex);
  return global().init.has_value();
}

EnvSwitches read_env() {
  EnvSwitches e;
  if (const char* v = std::getenv("MXNET_AMP_FUSE")) {
    const std::string_view s(v);
    if (s == "1")
      e.amp_fuse = true;
    else if (!s.empty() && s != "0")
      fail("MXNET_AMP_FUSE='{}': expected 1 (on) or 0 (off)", s);
  }
  if (const char* v = std::getenv("AMPFUSE_AMP_DTYPE")) {
    const std::string_view s(v);
    if (s == "bf16" || s == "bfloat16")
      e.dtype = ir::DType::bf16;
    else if (s == "fp16" || s == "float16" || s == "f16")
      e.dtype = ir::DType::f16;
    else if (!s.empty())
      fail("AMPFUSE_AMP_DTYPE='{}': expected bf16 or fp16", s);
  }
  return e;
}

Scope::Scope(bool enabled) : id_(g_next_scope_id++) { t_scopes.push_back({id_, enabled, std::nullopt}); }

Scope::Scope(ir::DType target) : id_(g_next_scope_id++) {
  check_target(target, "amp::Scope");
  t_scopes.push_back({id_, true, target});
}

Scope::~Scope() {
  // Normally the last entry; an out-of-order destruction removes just this one.
  for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it)
    if (it->id == id_) {
      t_scopes.erase(std::next(it).base());
      return;
    }
}

std::optional<AmpOptions> effective_options() {
  const EnvSwitches env = read_env();  // read (and validated) every time: tests and users set it late
  std::optional<AmpOptions> init;
  {
    std::lock_guard lock(global().mutex);
    init = global().init;
  }
  bool enabled = init.has_value() || env.amp_fuse;
  if (!t_scopes.empty()) enabled = t_scopes.back().enabled;
  if (!enabled) return std::nullopt;

  AmpOptions o = init.value_or(AmpOptions{});
  if (!init) o.target = env.dtype.value_or(ir::DType::bf16);
  for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it)
    if (it->target) {
      o.target = *it->target;
      break;
    }
  return o;
}

std::string fingerprint(const std::optional<AmpOptions>& opts) {
  if (!opts) return "";
  const AmpOptions& o = *opts;
  std::string s = fmt::format("amp:{}", ir::dtype_name(o.target));
  join(s, "lp16", o.lp16_ops);
  join(s, "fp32", o.fp32_ops);
  join(s, "widest", o.widest_ops);
  join(s, "neutral", o.neutral_ops);
  join(s, "excluded", o.excluded_nodes);
  std::vector<std::string> conds;
  for (const engine::CondFp32Entry& e : o.conditional_fp32_ops)
    conds.push_back(fmt::format("{}.{}:{}", e.op, e.attr, fmt::join(e.values, "|")));
  join(s, "cond", conds);
  if (o.cast_params_offline) s += ";offline";
  if (o.cast_narrow) s += ";narrow";
  if (!o.layout.empty()) s += ";layout=" + o.layout;
  return s;
}

}  // namespace ampfuse::amp
