// Optimizers (SGD, Adam, AdamW) as generated multi-tensor kernels: one launch updates every
// parameter, with f32 master weights, optional f16/bf16 copies for the forward pass, and the
// overflow check folded into the same pass.
//
// A mixed-precision training step with a loss scaler:
//
//   loss * scaler.scale()  --backward-->  grads (scaled; f32, f16 or bf16)
//   OptimizerStep s = opt.step(grads, 1.0 / scaler.scale(), run_stats.nonfinite);
//   scaler.update(s.overflow);          // the scaler only learns the verdict
//
// No separate unscale pass is needed: the update multiplies each gradient by `rescale` as it
// reads it (MXNet's rescale_grad), and flags every gradient element it reads for NaN/Inf.
// Since that flag is known only after the pass, the update never writes in place: it reads
// the current ("front") master weights, state and low-precision copies and writes the new
// ones to a second set of buffers ("back"), and the optimizer swaps the two only when the flag
// is clear. On overflow nothing visible changes (weights, state, copies, the step count of
// Adam's bias correction), as MXNet's skipped steps. The price is twice the memory of the
// weights and state; the traffic is that of an in-place update (read old, write new), where a
// separate check would read every gradient once more.
//
// The math of each optimizer exists only as a ScalarProgram (optimizer.cpp), compiled once
// per (optimizer, dtype combination) through the KernelCache. Every hyperparameter that may
// change between steps (lr, rescale, wd, momentum, betas, epsilon, the bias-corrected lr, the
// clip bound, clipping on or off) is a run-time kernel parameter: a learning-rate schedule or
// a new loss scale never recompiles.
#pragma once

#include "ir/dtype.h"
#include "runtime/tensor.h"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime {
class KernelCache;
class ThreadPool;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

struct MultiTensorBody;

enum class OptimizerKind { sgd, adam, adamw };

// MXNet's update operators, all in f32 with g the gradient as read (f16/bf16 widened exactly):
//   every kind:  g = rescale * grad, clipped to [-clip_gradient, clip_gradient] when
//                clip_gradient >= 0
//   sgd:         g += wd * w;  momentum != 0: mom = momentum * mom - lr * g; w += mom
//                              momentum == 0: w -= lr * g            (sgd_update, sgd_mom_update)
//   adam:        g += wd * w;  m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//                w -= lr_t * m / (sqrt(v) + epsilon)                  (adam_update)
//   adamw:       m, v as adam (no wd in g);
//                w -= eta * (lr_t * m / (sqrt(v) + epsilon) + wd * w), eta = 1   (_adamw_update)
// with MXNet's Adam optimizer bias correction computed on the host per step, in double:
// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), t the number of the step being applied.
// AdamW's wd is therefore not multiplied by lr (eta = 1): pass lr * wd for PyTorch's AdamW.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.01;        // >= 0
  double momentum = 0;     // sgd, in [0, 1); whether there is a momentum buffer is fixed at construction
  double wd = 0;           // >= 0
  double beta1 = 0.9;      // adam/adamw, in [0, 1)
  double beta2 = 0.999;    // adam/adamw, in [0, 1)
  double epsilon = 1e-8;   // adam/adamw, > 0
  double clip_gradient = -1;  // < 0: no clipping
};

struct OptimizerStep {
  bool applied = false;   // the new values are visible
  bool overflow = false;  // a gradient held NaN/Inf (or already_overflowed): nothing changed
};

class Optimizer {
 public:
  // `pool`, `cache` null: the global ones. Throws ampfuse::Error naming a bad option.
  explicit Optimizer(OptimizerOptions o, runtime::ThreadPool* pool = nullptr, runtime::KernelCache* cache = nullptr);
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;

  // Adds a parameter: its f32 initial value (copied) and optionally the dtype (f16 or bf16)
  // of a low-precision copy the forward pass reads, kept equal to the master rounded to
  // nearest even. State starts at zero. Returns its index. Throws naming the parameter.
  int add_param(std::string name, const runtime::Tensor& initial_f32, std::optional<ir::DType> lowp = {});
  int num_params() const { return static_cast<int>(params_.size()); }
  const std::string& name(int i) const;

  // What the forward pass should bind for parameter i: the low-precision copy if any, else
  // the master. Valid until the next applied step (the buffers swap).
  const runtime::Tensor& forward_value(int i) const;
  const runtime::Tensor& master(int i) const;
  // The low-precision copy, or null without one.
  const runtime::Tensor* lowp(int i) const;
  // Optimizer state k of parameter i, f32: sgd with momentum {mom}; adam, adamw {m, v}.
  int num_states() const { return num_states_; }
  const runtime::Tensor& state(int i, int k) const;

  // One update of every parameter from grads[i] (the shape of parameter i; f32, f16 or bf16,
  // dense), each multiplied by `rescale` (finite, > 0) as it is read: one launch for all
  // parameters. `already_overflowed` (the backward pass's own non-finite flag) skips the
  // launch: nothing changes. Throws ampfuse::Error naming the parameter (index and name) on a
  // wrong count, shape or dtype, or naming the option that options() was set out of range.
  OptimizerStep step(std::span<const runtime::Tensor> grads, double rescale, bool already_overflowed = false);
  int64_t steps_applied() const { return steps_applied_; }

  // The hyperparameters, which may be changed between steps without recompiling (kind and
  // whether SGD has momentum may not: step() throws).
  OptimizerOptions& options() { return opts_; }
  const OptimizerOptions& options() const { return opts_; }

 private:
  struct Param {
    std::string name;
    std::array<runtime::Tensor, 2> master;
    std::vector<std::array<runtime::Tensor, 2>> state;
    std::optional<ir::DType> lowp_dtype;
    std::array<runtime::Tensor, 2> lowp;
  };
  const Param& param(int i) const;

  OptimizerOptions opts_;
  OptimizerKind kind_;
  bool has_momentum_;
  int num_states_;
  runtime::ThreadPool* pool_;
  runtime::KernelCache* cache_;
  std::vector<MultiTensorBody> bodies_;  // [0] without a low-precision copy, [1] with one
  std::vector<Param> params_;
  int front_ = 0;  // which of each pair of buffers holds the current values
  int64_t steps_applied_ = 0;
};

}  // namespace ampfuse::engine
