#include "engine/training/optimizer.h"

#include "engine/training/multi_tensor.h"
#include "ir/error.h"
#include "ir/scalar_program.h"

#include <cmath>
#include <utility>

namespace ampfuse::engine {

namespace {

using ir::DType;
using ir::ScalarBuilder;
using runtime::Tensor;
using Val = ScalarBuilder::Val;

const char* kind_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

// The run-time parameters, in kernel order. Every value that may change between steps is one
// of them, so nothing about a step's numbers is compiled into the kernel.
constexpr int kSgdLr = 0, kSgdRescale = 1, kSgdClip = 2, kSgdWd = 3, kSgdMomentum = 4, kSgdParams = 5;
constexpr int kAdamLrT = 0, kAdamRescale = 1, kAdamClip = 2, kAdamWd = 3, kAdamBeta1 = 4, kAdamBeta2 = 5, kAdamEps = 6,
              kAdamParams = 7;

// g = rescale * grad, clipped to [-clip, clip] when clip >= 0. Clipping is a select on the
// run-time bound rather than a second compiled variant: turning it on or off never compiles,
// and a compare and two min/max per element cost nothing in a pass bound by memory. The clip
// of a NaN is NaN (min/max propagate it), but a NaN gradient has already set the flag.
Val scaled_clipped_grad(ScalarBuilder& b, Val grad, Val rescale, Val clip) {
  const Val g = b.mul(grad, rescale);
  const Val clipped = b.min(b.max(g, b.unary(ir::ScalarOp::neg, clip)), clip);
  return b.select(b.binary(ir::ScalarOp::ge, clip, b.constant(0)), clipped, g);
}

// Body inputs: grad, weight, states..., then the parameters. Results: the new weight, the
// new states, and with `lowp` the new weight once more, stored rounded to the copy's dtype
// by the kernel (round to nearest even, ir/lowp.h): MXNet's mp_*_update, fused.
MultiTensorBody make_body(OptimizerKind kind, bool momentum, bool lowp) {
  const int states = kind == OptimizerKind::sgd ? (momentum ? 1 : 0) : 2;
  const int inputs = 2 + states;
  const int nparams = kind == OptimizerKind::sgd ? kSgdParams : kAdamParams;
  ScalarBuilder b(inputs + nparams);
  const auto p = [&](int k) { return b.input(inputs + k); };
  const Val grad = b.input(0), w = b.input(1);
  std::vector<Val> results;
  if (kind == OptimizerKind::sgd) {
    const Val g = b.add(scaled_clipped_grad(b, grad, p(kSgdRescale), p(kSgdClip)), b.mul(p(kSgdWd), w));
    const Val step = b.mul(p(kSgdLr), g);
    if (momentum) {
      const Val mom = b.sub(b.mul(p(kSgdMomentum), b.input(2)), step);
      results = {b.add(w, mom), mom};
    } else {
      results = {b.sub(w, step)};
    }
  } else {
    Val g = scaled_clipped_grad(b, grad, p(kAdamRescale), p(kAdamClip));
    if (kind == OptimizerKind::adam) g = b.add(g, b.mul(p(kAdamWd), w));
    const Val one = b.constant(1);
    const Val beta1 = p(kAdamBeta1), beta2 = p(kAdamBeta2);
    const Val m = b.add(b.mul(beta1, b.input(2)), b.mul(b.sub(one, beta1), g));
    const Val v = b.add(b.mul(beta2, b.input(3)), b.mul(b.mul(b.sub(one, beta2), g), g));
    const Val denom = b.add(b.unary(ir::ScalarOp::sqrt, v), p(kAdamEps));
    Val delta = b.div(b.mul(p(kAdamLrT), m), denom);
    if (kind == OptimizerKind::adamw) delta = b.add(delta, b.mul(p(kAdamWd), w));  // eta = 1
    results = {b.sub(w, delta), m, v};
  }
  if (lowp) results.push_back(results[0]);
  return {.name = std::string("optimizer_") + kind_name(kind) + (momentum ? "_mom" : "") + (lowp ? "_lowp" : ""),
          .num_inputs = inputs,
          .num_outputs = static_cast<int>(results.size()),
          .num_params = nparams,
          .body = b.finish(std::move(results)),
          // The overflow check, folded into the update: every gradient element read.
          .flags = {{"nonfinite_grad", {0}}}};
}

void check_options(const OptimizerOptions& o) {
  const auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(o.lr) || o.lr < 0) fail("OptimizerOptions::lr={} must be finite and >= 0", o.lr);
  if (!finite(o.wd) || o.wd < 0) fail("OptimizerOptions::wd={} must be finite and >= 0", o.wd);
  if (!(o.clip_gradient < 0 || finite(o.clip_gradient)))
    fail("OptimizerOptions::clip_gradient={} must be finite (or < 0: no clipping)", o.clip_gradient);
  if (o.kind == OptimizerKind::sgd) {
    if (!(o.momentum >= 0 && o.momentum < 1)) fail("OptimizerOptions::momentum={} must lie in [0, 1)", o.momentum);
  } else {
    if (!(o.beta1 >= 0 && o.beta1 < 1)) fail("OptimizerOptions::beta1={} must lie in [0, 1)", o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1)) fail("OptimizerOptions::beta2={} must lie in [0, 1)", o.beta2);
    if (!finite(o.epsilon) || o.epsilon <= 0) fail("OptimizerOptions::epsilon={} must be finite and > 0", o.epsilon);
  }
}

}  // namespace

Optimizer::Optimizer(OptimizerOptions o, runtime::ThreadPool* pool, runtime::KernelCache* cache)
    : opts_(o), kind_(o.kind), has_momentum_(o.kind == OptimizerKind::sgd && o.momentum != 0), pool_(pool), cache_(cache) {
  if (o.kind != OptimizerKind::sgd && o.kind != OptimizerKind::adam && o.kind != OptimizerKind::adamw)
    fail("OptimizerOptions::kind={} is not sgd, adam or adamw", static_cast<int>(o.kind));
  check_options(opts_);
  num_states_ = kind_ == OptimizerKind::sgd ? (has_momentum_ ? 1 : 0) : 2;
  bodies_.push_back(make_body(kind_, has_momentum_, false));
  bodies_.push_back(make_body(kind_, has_momentum_, true));
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

int Optimizer::add_param(std::string name, const Tensor& initial_f32, std::optional<DType> lowp) {
  const int index = num_params();
  const auto where = [&] { return fmt::format("Optimizer::add_param: param {} '{}'", index, name); };
  if (initial_f32.dtype() != DType::f32)
    fail("{}: the initial value is {}, not f32", where(), ir::type_str(initial_f32.type()));
  if (initial_f32.size() > 0 && initial_f32.empty_storage()) fail("{}: the initial value has no storage", where());
  if (lowp && *lowp != DType::f16 && *lowp != DType::bf16)
    fail("{}: a low-precision copy must be f16 or bf16, not {}", where(), ir::dtype_name(*lowp));
  Param p;
  p.name = std::move(name);
  const ir::TensorType t{DType::f32, initial_f32.shape()};
  // The back buffers are zeroed, not left uninitialized: that touches their pages now rather
  // than inside the first step.
  p.master[front_] = initial_f32.contiguous().clone();
  p.master[1 - front_] = Tensor::zeros(t);
  for (int k = 0; k < num_states_; ++k) p.state.push_back({Tensor::zeros(t), Tensor::zeros(t)});
  if (lowp) {
    p.lowp_dtype = lowp;
    p.lowp[front_] = runtime::cast(p.master[front_], *lowp);  // round to nearest even, as the kernel
    p.lowp[1 - front_] = Tensor::zeros({*lowp, t.shape});
  }
  params_.push_back(std::move(p));
  return index;
}

const Optimizer::Param& Optimizer::param(int i) const {
  if (i < 0 || i >= num_params()) fail("Optimizer: param {} does not exist ({} params)", i, num_params());
  return params_[static_cast<size_t>(i)];
}

const std::string& Optimizer::name(int i) const { return param(i).name; }

const Tensor& Optimizer::forward_value(int i) const {
  const Param& p = param(i);
  return p.lowp_dtype ? p.lowp[front_] : p.master[front_];
}

const Tensor& Optimizer::master(int i) const { return param(i).master[front_]; }

const Tensor* Optimizer::lowp(int i) const {
  const Param& p = param(i);
  return p.lowp_dtype ? &p.lowp[front_] : nullptr;
}

const Tensor& Optimizer::state(int i, int k) const {
  const Param& p = param(i);
  if (k < 0 || k >= num_states_) fail("Optimizer: param {} has no state {} ({} states)", i, k, num_states_);
  return p.state[static_cast<size_t>(k)][front_];
}

OptimizerStep Optimizer::step(std::span<const Tensor> grads, double rescale, bool already_overflowed) {
  if (grads.size() != params_.size())
    fail("Optimizer::step: {} gradients given for {} params", grads.size(), params_.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const Param& p = params_[i];
    if (g.shape() != p.master[front_].shape())
      fail("Optimizer::step: the gradient of param {} '{}' is {}, the param is {}", i, p.name, ir::type_str(g.type()),
           ir::type_str(p.master[front_].type()));
    if (g.dtype() != DType::f32 && g.dtype() != DType::f16 && g.dtype() != DType::bf16)
      fail("Optimizer::step: the gradient of param {} '{}' is {}; only f32, f16 and bf16 are supported", i, p.name,
           ir::type_str(g.type()));
    if (g.size() > 0 && (g.empty_storage() || !g.is_contiguous()))
      fail("Optimizer::step: the gradient of param {} '{}' ({}) has no dense storage", i, p.name, ir::type_str(g.type()));
  }
  if (opts_.kind != kind_)
    fail("Optimizer::step: OptimizerOptions::kind changed from {} to {}; the kind is fixed at construction",
         kind_name(kind_), kind_name(opts_.kind));
  check_options(opts_);
  if (kind_ == OptimizerKind::sgd && !has_momentum_ && opts_.momentum != 0)
    fail("Optimizer::step: OptimizerOptions::momentum={}, but this SGD was built without momentum (momentum = 0 at "
         "construction) and keeps no momentum buffer",
         opts_.momentum);
  if (!std::isfinite(rescale) || rescale <= 0) fail("Optimizer::step: rescale={} must be finite and > 0", rescale);
  if (already_overflowed) return {.applied = false, .overflow = true};

  const double clip = opts_.clip_gradient < 0 ? -1.0 : opts_.clip_gradient;
  std::vector<double> params;
  if (kind_ == OptimizerKind::sgd) {
    params.resize(kSgdParams);
    params[kSgdLr] = opts_.lr;
    params[kSgdRescale] = rescale;
    params[kSgdClip] = clip;
    params[kSgdWd] = opts_.wd;
    params[kSgdMomentum] = opts_.momentum;
  } else {
    // MXNet's Adam optimizer: the bias correction folded into the learning rate on the host,
    // for t = the step being applied (a skipped step does not count).
    const double t = static_cast<double>(steps_applied_ + 1);
    params.resize(kAdamParams);
    params[kAdamLrT] = opts_.lr * std::sqrt(1 - std::pow(opts_.beta2, t)) / (1 - std::pow(opts_.beta1, t));
    params[kAdamRescale] = rescale;
    params[kAdamClip] = clip;
    params[kAdamWd] = opts_.wd;
    params[kAdamBeta1] = opts_.beta1;
    params[kAdamBeta2] = opts_.beta2;
    params[kAdamEps] = opts_.epsilon;
  }

  const int front = front_, back = 1 - front_;
  std::vector<MultiTensorGroup> groups;
  groups.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    MultiTensorGroup g;
    g.body = p.lowp_dtype ? 1 : 0;
    g.size = p.master[front].size();
    if (g.size == 0) continue;
    g.dtypes.push_back(grads[i].dtype());
    g.data.push_back(const_cast<void*>(grads[i].raw()));
    g.dtypes.push_back(DType::f32);
    g.data.push_back(p.master[front].raw());
    for (auto& s : p.state) g.dtypes.push_back(DType::f32), g.data.push_back(s[front].raw());
    g.dtypes.push_back(DType::f32);
    g.data.push_back(p.master[back].raw());
    for (auto& s : p.state) g.dtypes.push_back(DType::f32), g.data.push_back(s[back].raw());
    if (p.lowp_dtype) g.dtypes.push_back(*p.lowp_dtype), g.data.push_back(p.lowp[back].raw());
    groups.push_back(std::move(g));
  }
  int32_t flag = 0;
  run_multi_tensor(bodies_, groups, params, {&flag, 1}, pool_, cache_);
  if (flag != 0) return {.applied = false, .overflow = true};
  front_ = back;
  ++steps_applied_;
  return {.applied = true, .overflow = false};
}

}  // namespace ampfuse::engine
