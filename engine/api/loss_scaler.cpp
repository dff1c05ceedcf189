#include "engine/api/loss_scaler.h"

#include "ir/error.h"
#include "ir/lowp.h"
#include "runtime/thread_pool.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace ampfuse::engine {

namespace {

using ir::DType;
using runtime::Tensor;

// One tensor's place in the concatenation of all of them.
struct Segment {
  void* data;
  DType dtype;
  int64_t begin;  // offset of element 0 in the concatenation
  int64_t size;
};

// The per-dtype loops. Each returns nonzero when a stored (or, without kMul, read) value
// is NaN or +-Inf: exponent field all ones, tested on the bits so the loop stays
// branch-free and vectorizes (an OR reduction).
template <bool kMul>
uint32_t pass_f32(float* p, int64_t n, float inv) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float y = kMul ? p[i] * inv : p[i];
    if constexpr (kMul) p[i] = y;
    bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(y) & 0x7F800000u) == 0x7F800000u);
  }
  return bad;
}

template <bool kMul>
uint32_t pass_bf16(uint16_t* p, int64_t n, float inv) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t r = kMul ? ir::f32_to_bf16_bits(ir::bf16_bits_to_f32(p[i]) * inv) : p[i];
    if constexpr (kMul) p[i] = r;
    bad |= static_cast<uint32_t>((r & 0x7F80u) == 0x7F80u);
  }
  return bad;
}

template <bool kMul>
uint32_t pass_f16(uint16_t* p, int64_t n, float inv) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t r = kMul ? ir::f32_to_f16_bits(ir::f16_bits_to_f32(p[i]) * inv) : p[i];
    if constexpr (kMul) p[i] = r;
    bad |= static_cast<uint32_t>((r & 0x7C00u) == 0x7C00u);
  }
  return bad;
}

template <bool kMul>
uint32_t pass_segment(const Segment& s, int64_t lo, int64_t hi, float inv) {
  switch (s.dtype) {
    case DType::f32: return pass_f32<kMul>(static_cast<float*>(s.data) + lo, hi - lo, inv);
    case DType::bf16: return pass_bf16<kMul>(static_cast<uint16_t*>(s.data) + lo, hi - lo, inv);
    case DType::f16: return pass_f16<kMul>(static_cast<uint16_t*>(s.data) + lo, hi - lo, inv);
    default: return 0;  // rejected by make_segments
  }
}

std::vector<Segment> make_segments(std::span<const Tensor> tensors, const char* what) {
  std::vector<Segment> segs;
  segs.reserve(tensors.size());
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dtype() != DType::f32 && t.dtype() != DType::f16 && t.dtype() != DType::bf16)
      fail("{}: tensor {} is {}, but only f32, f16 and bf16 are supported", what, i, ir::type_str(t.type()));
    const int64_t n = ir::num_elements(t.shape());
    if (n == 0) continue;
    if (t.empty_storage()) fail("{}: tensor {} ({}) has no storage", what, i, ir::type_str(t.type()));
    segs.push_back({const_cast<void*>(t.raw()), t.dtype(), offset, n});
    offset += n;
  }
  return segs;
}

// One parallel_for over the concatenated elements: a thread's range may span many small
// tensors or part of one large one; each thread ORs its own flag and publishes it once.
template <bool kMul>
bool run_pass(const std::vector<Segment>& segs, float inv, runtime::ThreadPool* pool) {
  if (segs.empty()) return false;
  const int64_t total = segs.back().begin + segs.back().size;
  std::atomic<bool> any{false};
  runtime::ThreadPool& tp = pool ? *pool : runtime::ThreadPool::global();
  tp.parallel_for(
      total,
      [&](int64_t b, int64_t e) {
        // The first segment that ends after b.
        auto it = std::upper_bound(segs.begin(), segs.end(), b,
                                   [](int64_t x, const Segment& s) { return x < s.begin + s.size; });
        uint32_t bad = 0;
        for (; it != segs.end() && it->begin < e; ++it) {
          const int64_t lo = std::max(b, it->begin) - it->begin;
          const int64_t hi = std::min(e, it->begin + it->size) - it->begin;
          bad |= pass_segment<kMul>(*it, lo, hi, inv);
        }
        if (bad) any.store(true, std::memory_order_relaxed);
      },
      /*min_chunk=*/int64_t{1} << 15, /*align=*/64);
  return any.load(std::memory_order_relaxed);
}

void check_options(const LossScalerOptions& o) {
  const auto finite_positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!finite_positive(o.min_scale)) fail("LossScalerOptions::min_scale={} must be finite and > 0", o.min_scale);
  if (!finite_positive(o.max_scale) || o.max_scale < o.min_scale)
    fail("LossScalerOptions::max_scale={} must be finite and >= min_scale={}", o.max_scale, o.min_scale);
  if (!std::isfinite(o.init_scale) || o.init_scale < o.min_scale || o.init_scale > o.max_scale)
    fail("LossScalerOptions::init_scale={} must lie in [min_scale={}, max_scale={}]", o.init_scale, o.min_scale,
         o.max_scale);
  if (o.growth_interval < 1) fail("LossScalerOptions::growth_interval={} must be >= 1", o.growth_interval);
  if (!std::isfinite(o.growth_factor) || o.growth_factor <= 1)
    fail("LossScalerOptions::growth_factor={} must be finite and > 1", o.growth_factor);
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    fail("LossScalerOptions::backoff_factor={} must lie in (0, 1)", o.backoff_factor);
}

}  // namespace

LossScaler::LossScaler(LossScalerOptions opts) : opts_(opts), scale_(opts.init_scale) { check_options(opts_); }

void LossScaler::set_scale(double s) {
  if (!std::isfinite(s) || s <= 0) fail("LossScaler::set_scale: scale={} must be finite and > 0", s);
  scale_ = std::clamp(s, opts_.min_scale, opts_.max_scale);
  counters_.clean_run = 0;
}

bool LossScaler::unscale_and_check(std::span<Tensor> grads, runtime::ThreadPool* pool) const {
  const std::vector<Segment> segs = make_segments(grads, "LossScaler::unscale_and_check");
  const float inv = static_cast<float>(1.0 / scale_);
  // A scale of 1 changes no value: the pass only reads.
  return inv == 1.0f ? run_pass<false>(segs, inv, pool) : run_pass<true>(segs, inv, pool);
}

bool LossScaler::any_nonfinite(std::span<const Tensor> tensors, runtime::ThreadPool* pool) {
  return run_pass<false>(make_segments(tensors, "LossScaler::any_nonfinite"), 1.0f, pool);
}

bool LossScaler::update(bool overflow) {
  ++counters_.steps;
  if (overflow) {
    ++counters_.overflows;
    counters_.clean_run = 0;
    if (opts_.dynamic) {
      const double next = std::max(opts_.min_scale, scale_ * opts_.backoff_factor);
      if (next != scale_) ++counters_.backoffs;
      scale_ = next;
    }
    return false;
  }
  if (++counters_.clean_run >= opts_.growth_interval) {
    counters_.clean_run = 0;
    if (opts_.dynamic) {
      const double next = std::min(opts_.max_scale, scale_ * opts_.growth_factor);
      if (next != scale_) ++counters_.growths;
      scale_ = next;
    }
  }
  return true;
}

namespace {

constexpr const char* kFormat = "ampfuse.loss_scaler";
constexpr int kVersion = 1;

// j[key] as T, or an Error naming "where.key".
template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  const std::string name = where.empty() ? key : where + "." + key;
  if (!j.is_object() || !j.contains(key)) fail("missing field '{}'", name);
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) fail("field '{}' must be a boolean, not {}", name, v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) fail("field '{}' must be an integer, not {}", name, v.dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) fail("field '{}' must be a number, not {}", name, v.dump());
  } else {
    if (!v.is_string()) fail("field '{}' must be a string, not {}", name, v.dump());
  }
  return v.get<T>();
}

}  // namespace

std::string LossScaler::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["scale"] = scale_;
  j["options"] = {{"dynamic", opts_.dynamic},
                  {"init_scale", opts_.init_scale},
                  {"growth_interval", opts_.growth_interval},
                  {"growth_factor", opts_.growth_factor},
                  {"backoff_factor", opts_.backoff_factor},
                  {"min_scale", opts_.min_scale},
                  {"max_scale", opts_.max_scale}};
  j["counters"] = {{"steps", counters_.steps},         {"overflows", counters_.overflows},
                   {"clean_run", counters_.clean_run}, {"growths", counters_.growths},
                   {"backoffs", counters_.backoffs}};
  return j.dump(2) + "\n";
}

LossScaler LossScaler::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("not valid JSON: {}", e.what());
  }
  if (field<std::string>(j, "format", "") != kFormat)
    fail("field 'format' is '{}', not '{}'", j["format"].get<std::string>(), kFormat);
  if (const int v = field<int>(j, "version", ""); v != kVersion) fail("field 'version' is {}, only {} is known", v, kVersion);
  const nlohmann::json& o = j.contains("options") ? j["options"] : nlohmann::json();
  LossScalerOptions opts;
  opts.dynamic = field<bool>(o, "dynamic", "options");
  opts.init_scale = field<double>(o, "init_scale", "options");
  opts.growth_interval = field<int64_t>(o, "growth_interval", "options");
  opts.growth_factor = field<double>(o, "growth_factor", "options");
  opts.backoff_factor = field<double>(o, "backoff_factor", "options");
  opts.min_scale = field<double>(o, "min_scale", "options");
  opts.max_scale = field<double>(o, "max_scale", "options");
  LossScaler s(opts);
  const double scale = field<double>(j, "scale", "");
  if (!std::isfinite(scale) || scale < opts.min_scale || scale > opts.max_scale)
    fail("field 'scale'={} must lie in [min_scale={}, max_scale={}]", scale, opts.min_scale, opts.max_scale);
  s.scale_ = scale;
  const nlohmann::json& c = j.contains("counters") ? j["counters"] : nlohmann::json();
  LossScalerCounters& k = s.counters_;
  k.steps = field<int64_t>(c, "steps", "counters");
  k.overflows = field<int64_t>(c, "overflows", "counters");
  k.clean_run = field<int64_t>(c, "clean_run", "counters");
  k.growths = field<int64_t>(c, "growths", "counters");
  k.backoffs = field<int64_t>(c, "backoffs", "counters");
  if (k.steps < 0 || k.overflows < 0 || k.overflows > k.steps || k.growths < 0 || k.backoffs < 0)
    fail("field 'counters' is inconsistent: steps={}, overflows={}, growths={}, backoffs={}", k.steps, k.overflows,
         k.growths, k.backoffs);
  if (k.clean_run < 0 || k.clean_run >= opts.growth_interval)
    fail("field 'counters.clean_run'={} must lie in [0, growth_interval={})", k.clean_run, opts.growth_interval);
  return s;
}

void LossScaler::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot open for writing", tmp);
    out << to_json();
    out.flush();
    if (!out) fail("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} over it", path, tmp);
  }
}

LossScaler LossScaler::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return with_context(path, [&] { return from_json(ss.str()); });
}

}  // namespace ampfuse::engine
