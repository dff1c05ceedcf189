// Steps between loading a model and reporting on it that `ampfuse run` and `convert` share
// with the Python module (python/src/): opening the device, binding weights to a converted
// graph, summarizing a compiled plan, converting a model for AMP. Here, so that the module
// gives the CLI's results and messages without a second copy of the logic.
#pragma once

#include "engine/execution/executor.h"
#include "engine/passes/amp_options.h"
#include "ir/graph.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "tools/params_input.h"
#include "tools/report.h"

#include <map>
#include <memory>
#include <set>
#include <string>

namespace ampfuse::tools {

// The device `--device NAME` names: null for "cpu", the emulated GPU for "cuda-emulated",
// GPU 0 for "cuda". Throws ampfuse::Error naming the option for another name or no GPU.
std::unique_ptr<runtime::DeviceApi> open_device(const std::string& name);

// Bindings for the converted graph `g` from the f32 model's: a weight stored in low precision
// offline (cast_params_offline) is the f32 value rounded once.
runtime::Bindings bindings_for(const ir::Graph& g, const runtime::Bindings& f32_vars);

// The plan lines `ampfuse run` prints: steps of every run, compile counts, memory.
// cached_ms < 0: the cached compile was not timed.
PlanSummary summarize_plan(const engine::Executable& exe, bool fused, double cold_ms, double cached_ms);

// `ampfuse convert`: the model converted for AMP, and the MXNet JSON written for it.
struct ConvertedModel {
  ir::Graph graph;     // converted and typed (the shapes it was converted with)
  std::string json;    // MXNet symbol JSON; inputs carry the hints the model file had
  engine::AmpStats stats;
  size_t nodes_before = 0;  // nodes of the typed model before conversion
};
// An input with no __shape__ hint at all (what Gluon's export writes), as far as the op
// that reads it implies it, looking through elementwise ops and those that keep their data's
// shape (data -> BatchNorm -> Convolution): a Convolution's, Deconvolution's or Pooling's
// data has rank 2 + the kernel's, and its channels (axis 1, or the last with a
// channels-last layout) are the weight's where that is known, from the weight's type or
// `params`; FullyConnected's data is (N, K), K the weight's dim 1 where known; Embedding's
// indices are (N, T), RNN's data (T, N, C). An operand broadcast with it on the way gives
// its extents other than 1. The batch N is `open_batch`, the other extents not implied
// `open_extent`. nullopt: the reader is another op (nothing implies the rank).
std::optional<ir::Shape> implied_input_shape(const ir::Graph& g, int32_t var, const ParamsFile* params,
                                             int64_t open_batch, int64_t open_extent);

// `g` as load_model_file / load_model_text give it (untyped), typed with `shapes`, checked
// against `params` where given, converted. Throws ampfuse::Error as the CLI reports it.
// `open_hints`: inputs typed with a placeholder extent (by load_model_file_with_placeholder
// or from implied_input_shape), written with the hint the file had ("" for none). Where an
// input had no hint, weights whose file hint left extents open keep that hint too: their
// inferred shapes may hold the placeholder (a first convolution's input channels).
ConvertedModel convert_model(ir::Graph g, const std::set<std::string>& unreached,
                             const std::map<std::string, ir::Shape>& shapes, const engine::AmpOptions& amp,
                             const ParamsFile* params = nullptr,
                             const std::map<std::string, std::string>& open_hints = {});

}  // namespace ampfuse::tools
