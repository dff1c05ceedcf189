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
// optimizer step), so an in-place update is seen without comparing any bytes.
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

struct RegionStats {
  int compilations = 0;        // signatures compiled so far
  int constant_refreshes = 0;  // runs that recomputed the weight constants after the first
};

class Region {
 public:
  // `json`: the subgraph symbol MXNet hands the operator (attribute subgraph_sym_json);
  // `name`: for messages (the subgraph node's name); `amp`: the AMP target inside, or none.
  // Throws ampfuse::Error when the JSON does not parse or names an op ampfuse lacks.
  Region(std::string json, std::string name, std::optional<engine::AmpOptions> amp);

  // The names of the region's inputs in the order MXNet passes them (the symbol's
  // arg_nodes order, which is its list_inputs() order).
  const std::vector<std::string>& input_names() const { return input_names_; }

  // Runs the region on `inputs` (in input_names() order) and writes its outputs into
  // `outputs`, tensors wrapping MXNet's output memory (shapes and dtypes must match the
  // graph's). Thread-safe. Throws ampfuse::Error naming the region and the input.
  void run(const std::vector<RegionInput>& inputs, std::vector<runtime::Tensor>& outputs);

  // Backward (autograd): writes into `input_grads` (one per input, in input_names() order)
  // the gradients of the region's outputs, given their head gradients `head_grads`, taken
  // at `inputs`. Inputs that get no gradient (aux states, integer inputs) get zeros. The
  // backward executable computes the forward again (the forward call's values are not kept
  // between MXNet's two calls). MXNet's extension API tells a subgraph operator nothing of
  // is_train, so the forward ran in inference form: a region whose training form differs
  // (BatchNorm with batch statistics, Dropout) throws here rather than give gradients of
  // another function than MXNet's.
  void backward(const std::vector<RegionInput>& inputs, const std::vector<runtime::Tensor>& head_grads,
                std::vector<runtime::Tensor>& input_grads);

  RegionStats stats() const;

 private:
  struct Compiled {
    engine::Executable exe;
    std::vector<size_t> weight_inputs;  // inputs in param/aux slots: constants to exe
    std::vector<std::pair<const void*, uint64_t>> weight_seen;  // (buffer, version) last run
  };
  using Signature = std::vector<std::pair<int, std::vector<int64_t>>>;
  static Signature signature_of(const std::vector<RegionInput>& inputs);
  ir::Graph import_for(const std::vector<RegionInput>& inputs) const;
  Compiled& compiled_for(const std::vector<RegionInput>& inputs);
  const engine::Executable& backward_for(const std::vector<RegionInput>& inputs);

  std::string json_, name_;
  std::optional<engine::AmpOptions> amp_;
  std::vector<std::string> input_names_;
  mutable std::mutex mutex_;
  std::map<Signature, std::unique_ptr<Compiled>> compiled_;
  std::map<Signature, std::unique_ptr<engine::Executable>> backward_;
  RegionStats stats_;
};

}  // namespace ampfuse::mxnet
