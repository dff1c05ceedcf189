#include "engine/api/loss_scaler.h"

#include "engine/training/multi_tensor.h"
#include "ir/error.h"
#include "ir/input_file.h"
#include "ir/scalar_program.h"
#include "runtime/thread_pool.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace ampfuse::engine {

namespace {

using ir::DType;
using runtime::Tensor;

// The generated bodies (engine/training/multi_tensor.h). unscale: out = in * p0, in place,
// flagged on the stored output, so a non-finite input and an unscale that overflows the
// dtype are both caught; the kernel widens f16/bf16 exactly, multiplies in f32 by p0 rounded
// to f32, and stores with round-to-nearest-even, the documented semantics. check: no output,
// a flag over the input.
MultiTensorBody unscale_body() {
  ir::ScalarBuilder b(2);
  return {.name = "loss_scaler_unscale",
          .num_inputs = 1,
          .num_outputs = 1,
          .num_params = 1,
          .body = b.finish({b.mul(b.input(0), b.input(1))}),
          .flags = {{"nonfinite", {1}}}};
}

MultiTensorBody check_body() {
  ir::ScalarBuilder b(1);
  return {.name = "loss_scaler_check",
          .num_inputs = 1,
          .num_outputs = 0,
          .num_params = 0,
          .body = b.finish({}),
          .flags = {{"nonfinite", {0}}}};
}

// One group per tensor: the unscale reads and writes it in place (each element is read
// before it is overwritten, by the same thread); the check only reads it.
std::vector<MultiTensorGroup> make_groups(std::span<const Tensor> tensors, bool in_place, const char* what) {
  std::vector<MultiTensorGroup> groups;
  groups.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dtype() != DType::f32 && t.dtype() != DType::f16 && t.dtype() != DType::bf16)
      fail("{}: tensor {} is {}, but only f32, f16 and bf16 are supported", what, i, ir::type_str(t.type()));
    const int64_t n = ir::num_elements(t.shape());
    if (n == 0) continue;
    if (t.empty_storage()) fail("{}: tensor {} ({}) has no storage", what, i, ir::type_str(t.type()));
    void* p = const_cast<void*>(t.raw());
    if (in_place)
      groups.push_back({.body = 0, .size = n, .dtypes = {t.dtype(), t.dtype()}, .data = {p, p}});
    else
      groups.push_back({.body = 0, .size = n, .dtypes = {t.dtype()}, .data = {p}});
  }
  return groups;
}

bool run_check(std::span<const Tensor> tensors, const char* what, runtime::ThreadPool* pool) {
  static const MultiTensorBody body = check_body();
  const std::vector<MultiTensorGroup> groups = make_groups(tensors, false, what);
  int32_t flag = 0;
  run_multi_tensor({&body, 1}, groups, {}, {&flag, 1}, pool);
  return flag != 0;
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
  const char* what = "LossScaler::unscale_and_check";
  const double inv = 1.0 / scale_;
  // A scale of 1 (in f32, the kernel's compute type) changes no value: the pass only reads.
  if (static_cast<float>(inv) == 1.0f) return run_check(grads, what, pool);
  static const MultiTensorBody body = unscale_body();
  const std::vector<MultiTensorGroup> groups = make_groups(grads, true, what);
  int32_t flag = 0;
  run_multi_tensor({&body, 1}, groups, {&inv, 1}, {&flag, 1}, pool);
  return flag != 0;
}

bool LossScaler::any_nonfinite(std::span<const Tensor> tensors, runtime::ThreadPool* pool) {
  return run_check(tensors, "LossScaler::any_nonfinite", pool);
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
  const std::string text = ir::read_regular_file(path);
  return with_context(path, [&] { return from_json(text); });
}

}  // namespace ampfuse::engine
