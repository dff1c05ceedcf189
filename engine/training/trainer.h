// Trainer: a classifier graph (MXNet symbol with a SoftmaxOutput head) trained with AMP,
// loss scaling and a generated optimizer, on the single executor.
//
//   compile (once):  the f32 graph --AMP (cast_params_offline)--> training form
//                    --autodiff (loss scale as an input)--> one executable: forward,
//                    moving statistics, gradients; every fused kernel flags NaN/Inf
//                    (ExecutorOptions::check_nonfinite) -- the overflow check costs no pass
//   step(data, labels):
//     bind data, labels, the optimizer's forward values (the lp16 copies where AMP reads a
//       weight in low precision), the BatchNorm moving statistics, the loss scale, the
//       step count (Dropout's masks change with it; nothing recompiles)
//     run                                 -> probabilities, new moving stats, scaled grads,
//                                            the kernels' overflow flag
//     optimizer.step(grads, rescale = grad_rescale / scale, already_overflowed = flag)
//                                         -> one launch: unscale, check what no kernel
//                                            checked (oneDNN's gradients), update f32
//                                            masters and state, write the lp16 copies;
//                                            nothing changes on overflow
//     scaler.update(overflow)             -> halve on overflow, grow after clean steps
//     moving statistics written back when the step applied
//
// MXNet's equivalent is amp.init_trainer + Trainer.step: a separate multi_all_finite pass
// over every gradient, a host sync per 200 arrays, then the update kernels, and the weight
// casts of the next forward as kernels of their own.
#pragma once

#include "engine/api/loss_scaler.h"
#include "engine/execution/executor.h"
#include "engine/passes/amp_options.h"
#include "engine/training/optimizer.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::engine {

// Where the overflow (NaN/Inf) check of a step runs.
enum class OverflowCheck : uint8_t {
  folded,         // in the kernels that run anyway: every fused kernel of the step flags
                  // what it reads and writes, the update kernel the gradients (the default)
  separate_pass,  // MXNet's way, for comparison: a pass over every gradient before the update
  update_only,    // only the update kernel's flag over the gradients it reads (no NaN/Inf
                  // check in the forward and backward kernels), for comparison
};

struct TrainerOptions {
  std::optional<AmpOptions> amp{};  // unset: f32 training
  OptimizerOptions optimizer{};
  // Unset: no loss scaling (the graph has no scale input).
  std::optional<LossScalerOptions> loss_scaling{};
  bool fuse = true;  // false: the unfused path (one kernel per op), for comparisons
  OverflowCheck overflow_check = OverflowCheck::folded;
  uint64_t seed = 0;  // initial weights (and Dropout masks)
  // What the summed gradient is multiplied by before the update (besides 1/scale).
  // 0: 1/batch when the loss head sums over the batch (SoftmaxOutput normalization
  // 'null', MXNet's default, which Gluon's Trainer.step(batch_size) divides), else 1.
  double grad_rescale = 0;
  runtime::ThreadPool* pool = nullptr;  // null: ThreadPool::global()
};

struct StepResult {
  bool applied = false;   // false: an overflow skipped the step (nothing changed)
  bool overflow = false;
  double loss = 0;        // mean cross-entropy of the batch (from the forward's probabilities)
  int64_t correct = 0;    // rows whose arg-max is the label
  double scale = 1;       // the loss scale this step ran with
};

struct Evaluation {
  double loss = 0;  // mean cross-entropy
  double accuracy = 0;
  int64_t rows = 0;
};

class Trainer {
 public:
  // `model`: a typed graph with one data input and one SoftmaxOutput head whose label is
  // the other input (a graph whose first output is something else, a Gluon export's
  // logits, gets one: add_softmax_head); the data input's first extent is the batch. Initial weights are
  // seeded random (runtime::random_bindings' fan-in scaling) except what training starts
  // from constants: biases and BatchNorm beta and moving mean 0, gamma and moving variance
  // 1. Throws ampfuse::Error naming what is missing (a head, a label, an op without a
  // gradient rule...).
  Trainer(ir::Graph model, TrainerOptions opts);
  ~Trainer();
  Trainer(Trainer&&) noexcept;

  const std::string& data_name() const;
  const std::string& label_name() const;
  int64_t batch() const;
  int num_classes() const;

  // One training step on one batch (`data` of the data input's type; `labels` f32 class
  // ids of shape (batch,) or the label input's type). `inject_overflow` binds an infinite
  // loss scale for this step, as a test of the skip path.
  StepResult step(const runtime::Tensor& data, const runtime::Tensor& labels, bool inject_overflow = false);

  // The inference form (BatchNorm with moving statistics, no Dropout, same AMP) over every
  // row of `data` (any row count; the last batch is padded and its padding ignored).
  Evaluation evaluate(const runtime::Tensor& data, const runtime::Tensor& labels);

  const LossScaler* scaler() const;  // null without loss scaling
  // The optimizer's hyperparameters: a schedule may change them between steps (they are
  // kernel parameters, so nothing recompiles).
  OptimizerOptions& optimizer_options();
  int64_t skipped_steps() const;
  // Steps run so far, skipped ones included. Step s binds s as the Dropout step input
  // (engine/passes/training_mode.h), so each step draws fresh Dropout masks from the one
  // compiled executable; a step beyond 2^24 (no longer exact in f32) throws.
  int64_t steps() const;
  // The f32 weights and the auxiliary states (moving statistics), by variable name.
  std::map<std::string, runtime::Tensor> arg_params() const;
  std::map<std::string, runtime::Tensor> aux_params() const;
  // Writes them as MXNet's HybridBlock.export does ("arg:NAME", "aux:NAME").
  void save_params(const std::string& path) const;
  const Executable& training_executable() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Appends a SoftmaxOutput head (MXNet's softmax cross-entropy, default attributes) over
// the first output of `g` (typed, shape (batch, classes)), reading a new input
// "softmax_label" of shape (batch,): what a Gluon export, whose loss lives outside the
// graph, is trained with. Throws when the output is not 2-d or the name is taken.
void add_softmax_head(ir::Graph& g);

// The rows `rows` of `t` (along its first axis, repeats allowed), as a new tensor.
runtime::Tensor take_rows(const runtime::Tensor& t, const std::vector<int64_t>& rows);

}  // namespace ampfuse::engine
