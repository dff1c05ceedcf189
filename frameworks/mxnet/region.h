// One partitioned region of an MXNet graph, run by ampfuse: the state of the subgraph
// operator `_ampfuse_subgraph` (ampfuse_mxnet.cpp). It knows nothing of lib_api.h, so that
// it can be read (and built) as plain ampfuse code: MXNet's tensors come in as Tensors that
// wrap MXNet's memory.
//
//   MXNet subgraph JSON --import_mxnet_json (shapes, dtypes of this call)--> ir::Graph
//        --Executable::compile (AMP inside the region, constant params)--> one per signature
//
// A signature is the shapes and dtypes of every input: the first call with a new one
// compiles (the kernel cache makes a second batch size cheap: kernels are keyed without
// sizes), later calls find it. Weights (variables in param and aux slots) are constants to
// the executable: what is computed from them alone (their casts to bf16/fp16, folded or
// reordered convolution weights) is computed once and kept while each weight keeps both its
// buffer and its version (MXNet's NDArray version, bumped by every write, as by an
// optimizer step), so an in-place update is seen without comparing any bytes. The aux
// inputs' versions also grow by one at every call of the region itself (MXNet counts the
// operator as their writer); that step is expected, not taken for a write.
//
// Training (MXNet's is_train): lib_api tells the operator nothing of it (neither Forward's
// arguments, its OpResource nor its attributes carry MXNet's OpContext::is_train), so the
// form is fixed when the graph is partitioned: the partitioner option training=0|1 writes
// it into the subgraph node (ampfuse.mxnet partitions a Gluon block once per form and picks
// by autograd.is_training() at each call). The training form (engine/passes/training_mode.h)
// normalizes with batch statistics and writes the new moving mean and variance into
// MXNet's aux arrays (inputs MXNet declares mutable for a subgraph operator), and Dropout
// drops with Philox masks keyed by a step the caller draws per forward and hands to the
// matching backward, so that a backward that computes the forward again uses the masks the
// forward used. A training forward normally keeps its values for backward instead: it runs
// as the first half of the backward executable (Executable::run_forward), and the operator
// state holds that half's memory until MXNet calls backward on it.
#pragma once

#include "engine/execution/executor.h"
#include "engine/passes/amp_options.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::mxnet {

// One input of a call: MXNet's memory wrapped (not copied) and its NDArray version.
struct RegionInput {
  runtime::Tensor tensor;
  uint64_t version = 0;
};

// Which form of BatchNorm and Dropout the region computes (see the top of this file).
enum class RegionForm {
  unknown,    // partitioned without training=: the inference form; backward through
              // BatchNorm/Dropout is refused (it could be either form's gradient)
  inference,  // training=0: the inference form, and its gradient (autograd.record(train_mode=False))
  training,   // training=1: batch statistics, moving statistics updated, Dropout drops
};

// The largest Dropout step + 1: the step input is an f32, exact for integers below 2^24.
constexpr uint32_t kDropoutSteps = uint32_t{1} << 24;

struct RegionStats {
  int compilations = 0;        // signatures compiled so far
  int constant_refreshes = 0;  // runs that recomputed the weight constants after the first
  int kept_forwards = 0;       // training forwards that kept their values for backward
  int kept_backwards = 0;      // backwards that ran on a kept forward (the rest computed it again)
};

// A training forward's values, kept by Region::run for the backward of the same call (the
// operator state holds it between MXNet's forward and backward calls).
struct KeptForward {
  struct Key {
    std::vector<std::pair<const void*, uint64_t>> inputs;  // buffer and version, moving statistics aside
    uint32_t step = 0;                                     // the Dropout step
    bool operator==(const Key&) const = default;
  };
  const engine::Executable* exe = nullptr;  // the backward executable that ran the forward half
  Key key;
  engine::ForwardPass pass;
};

class Region {
 public:
  // `json`: the subgraph symbol MXNet hands the operator (attribute subgraph_sym_json);
  // `name`: for messages (the subgraph node's name); `amp`: the AMP target inside, or none.
  // Throws ampfuse::Error when the JSON does not parse or names an op ampfuse lacks.
  // `form`: see RegionForm.
  Region(std::string json, std::string name, std::optional<engine::AmpOptions> amp,
         RegionForm form = RegionForm::unknown);

  RegionForm form() const { return form_; }

  // The names of the region's inputs in the order MXNet passes them (the symbol's
  // arg_nodes order, which is its list_inputs() order).
  const std::vector<std::string>& input_names() const { return input_names_; }

  // Runs the region on `inputs` (in input_names() order) and writes its outputs into
  // `outputs`, tensors wrapping MXNet's output memory (shapes and dtypes must match the
  // graph's). Thread-safe. Throws ampfuse::Error naming the region and the input.
  // Training form: the moving statistics of each BatchNorm are also written into its aux
  // inputs (in place, in MXNet's memory), and Dropout draws its masks for `step` (below
  // kDropoutSteps; ignored without a Dropout or in the other forms).
  // `keep` (training form): the forward runs as the first half of the backward executable
  // (Executable::run_forward) and its values go into *keep for backward, which then runs
  // only the second half; *keep is reset first, and stays empty where the plan cannot be
  // split (the forward executable runs then, as without `keep`).
  void run(const std::vector<RegionInput>& inputs, std::vector<runtime::Tensor>& outputs, uint32_t step = 0,
           std::unique_ptr<KeptForward>* keep = nullptr);

  // Backward (autograd): writes into `input_grads` (one per input, in input_names() order)
  // the gradients of the region's outputs, given their head gradients `head_grads`, taken
  // at `inputs`. Inputs that get no gradient (aux states, integer inputs) get zeros. With
  // `kept` from the run of these inputs (same buffers and versions, same step), only the
  // backward half runs, on the forward's values; otherwise the backward executable computes
  // the forward again: in the region's form, with the Dropout masks of `step`, which must
  // be the step of the forward these gradients belong to. A region of unknown form whose
  // two forms differ (BatchNorm with batch statistics, Dropout) throws here rather than
  // give gradients of another function than MXNet's.
  void backward(const std::vector<RegionInput>& inputs, const std::vector<runtime::Tensor>& head_grads,
                std::vector<runtime::Tensor>& input_grads, uint32_t step = 0,
                std::unique_ptr<KeptForward> kept = nullptr);

  RegionStats stats() const;

 private:
  struct Compiled {
    engine::Executable exe;
    // The inputs in param/aux slots, constants to exe, with the buffer and version the next
    // run should see if nothing wrote them (none before the first run).
    struct WeightInput {
      size_t input = 0;
      bool aux = false;  // a moving statistic: MXNet bumps its version at every call (above)
      const void* buffer = nullptr;
      uint64_t version = 0;
    };
    std::vector<WeightInput> weights;
    // Training form: the input each extra graph output (a new moving mean or variance, in
    // training_mode's order) is written into.
    std::vector<size_t> moving_stat_inputs;
  };
  struct Backward {
    std::unique_ptr<engine::Executable> exe;
    std::vector<size_t> moving_stat_inputs;  // training form: as Compiled's, for its forward outputs
  };
  using Signature = std::vector<std::pair<int, std::vector<int64_t>>>;
  static Signature signature_of(const std::vector<RegionInput>& inputs);
  static KeptForward::Key kept_key(const std::vector<RegionInput>& inputs, const std::vector<size_t>& moving_stats,
                                   uint32_t step);
  ir::Graph import_for(const std::vector<RegionInput>& inputs) const;
  std::vector<size_t> moving_stat_inputs_of(const ir::Graph& g) const;
  std::vector<runtime::Tensor> with_moving_stats(const engine::Executable& exe, size_t forward_outputs,
                                                 const std::vector<RegionInput>& inputs,
                                                 const std::vector<runtime::Tensor>& outputs,
                                                 const std::vector<size_t>& moving_stat_inputs) const;
  Compiled& compiled_for(const std::vector<RegionInput>& inputs);
  Backward& backward_for(const std::vector<RegionInput>& inputs);
  engine::ExecutorOptions options() const;
  runtime::Bindings bindings(const std::vector<RegionInput>& inputs, const engine::Executable& exe,
                             uint32_t step) const;

  std::string json_, name_;
  std::optional<engine::AmpOptions> amp_;
  RegionForm form_;
  std::vector<std::string> input_names_;
  mutable std::mutex mutex_;
  std::map<Signature, std::unique_ptr<Compiled>> compiled_;
  std::map<Signature, Backward> backward_;
  RegionStats stats_;
};

}  // namespace ampfuse::mxnet
