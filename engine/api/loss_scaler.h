// Loss scaling for mixed-precision training: the scale, its dynamic policy, and one fused
// unscale + non-finite check over every gradient tensor of a step.
//
// A training step with a scaler:
//
//   loss * scaler.scale()  --backward-->  grads (scaled)
//   bool overflow = scaler.unscale_and_check(grads);   // one parallel pass, all tensors
//   overflow |= run_stats.nonfinite;                   // optional: a fused kernel's own flag
//   if (scaler.update(overflow)) optimizer.step(grads); // false: skip this step
//
// Unlike MXNet (multi_all_finite over chunks of 200 arrays of one dtype, one host sync per
// chunk, the decision applied a step late), the check runs in the same pass over memory as
// the unscale, over any number of tensors of mixed dtypes, in a single thread-pool launch,
// and yields one flag for all of them.
#pragma once

#include "runtime/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace ampfuse::runtime {
class ThreadPool;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

struct LossScalerOptions {
  // false: a static scale (init_scale forever); overflowing steps are still reported.
  bool dynamic = true;
  double init_scale = 65536.0;  // 2^16, MXNet's and PyTorch's default
  // Clean (overflow-free) steps in a row after which the scale grows.
  int64_t growth_interval = 2000;
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  double min_scale = 1.0;       // the scale never goes below this (> 0)
  double max_scale = 16777216.0;  // 2^24, MXNet's cap; never above this
};

// What the scaler has seen; part of its saved state.
struct LossScalerCounters {
  int64_t steps = 0;        // update() calls
  int64_t overflows = 0;    // of them with overflow (skipped steps)
  int64_t clean_run = 0;    // clean steps since the last overflow or growth
  int64_t growths = 0;      // times the scale grew (not counted when max_scale held it)
  int64_t backoffs = 0;     // times the scale shrank (not counted when min_scale held it)
  friend bool operator==(const LossScalerCounters&, const LossScalerCounters&) = default;
};

class LossScaler {
 public:
  // Throws ampfuse::Error naming the option that is out of range.
  explicit LossScaler(LossScalerOptions opts = {});

  const LossScalerOptions& options() const { return opts_; }
  const LossScalerCounters& counters() const { return counters_; }

  // The scale the next loss is multiplied by. Public, as MXNet's Trainer.amp_loss_scale.
  double scale() const { return scale_; }
  // Sets the scale (clamped to [min_scale, max_scale]) and restarts the clean-step count.
  void set_scale(double s);

  // Divides every element of every tensor in `grads` by scale() in place and returns true
  // when any result is NaN or +-Inf (in any tensor: one flag for the whole list).
  //
  // Rounding: each element is widened to f32 (exactly), multiplied in f32 by the f32 value
  // of 1/scale (exact when the scale is a power of two, as the dynamic policy keeps it with
  // the default factors), and stored rounded to nearest-even in the tensor's dtype with
  // ir/lowp.h for f16 and bf16. The check looks at the stored value, so a non-finite input
  // and an unscale that overflows the dtype (possible only with scale < 1) are both caught.
  //
  // Tensors may be f32, f16 or bf16, in any mix, of any sizes (empty ones and an empty list
  // included). The work is one launch of generated kernels (engine/training/multi_tensor.h):
  // one parallel_for on `pool` (null: ThreadPool::global()) over the concatenated elements
  // of all tensors, each tensor unscaled in place by the kernel compiled for its dtype (one
  // per dtype, cached; the scale is a run-time parameter, so a new scale compiles nothing),
  // all of them setting one shared flag. Tensors must not share buffers. Throws
  // ampfuse::Error naming the index of a tensor with another dtype or no storage.
  bool unscale_and_check(std::span<runtime::Tensor> grads, runtime::ThreadPool* pool = nullptr) const;

  // The same pass without the multiply: true when any element of any tensor is non-finite.
  // For gradients that are not scaled, and for checking outputs a kernel did not flag.
  static bool any_nonfinite(std::span<const runtime::Tensor> tensors, runtime::ThreadPool* pool = nullptr);

  // Applies the policy to one step's verdict and returns whether the step should be
  // applied (true: no overflow). `overflow` is what unscale_and_check returned, OR-ed with
  // RunStats::nonfinite of the executables that produced the gradients when they were
  // compiled with ExecutorOptions::check_nonfinite. Dynamic: an overflow multiplies the
  // scale by backoff_factor (not below min_scale) and restarts the clean count; the
  // growth_interval-th clean step in a row multiplies it by growth_factor (not above
  // max_scale). Static: only the counters change.
  bool update(bool overflow);

  // The whole state (options, scale, counters) as JSON text, and back. A scaler loaded
  // from a save continues exactly as the saved one would have (MXNet #16858):
  //   {"format": "ampfuse.loss_scaler", "version": 1, "scale": 65536.0,
  //    "options": {...}, "counters": {...}}
  std::string to_json() const;
  // Throws ampfuse::Error naming the missing or bad field.
  static LossScaler from_json(const std::string& text);
  // Writes to_json() to `path` (through a temporary file and a rename, so a crash never
  // leaves half a checkpoint); load reads it back. Errors name the path.
  void save(const std::string& path) const;
  static LossScaler load(const std::string& path);

 private:
  LossScalerOptions opts_;
  double scale_;
  LossScalerCounters counters_;
};

}  // namespace ampfuse::engine
