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
// `g` as load_model_file / load_model_text give it (untyped), typed with `shapes`, checked
// against `params` where given, converted. Throws ampfuse::Error as the CLI reports it.
// `open_hints`: inputs load_model_file_with_placeholder typed with a placeholder extent,
// written with the hint the file had.
ConvertedModel convert_model(ir::Graph g, const std::set<std::string>& unreached,
                             const std::map<std::string, ir::Shape>& shapes, const engine::AmpOptions& amp,
                             const ParamsFile* params = nullptr,
                             const std::map<std::string, std::string>& open_hints = {});

}  // namespace ampfuse::tools
