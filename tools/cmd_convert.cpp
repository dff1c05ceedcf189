// `ampfuse convert MODEL.json --amp bf16|fp16 -o OUT.json`: the AMP passes over a model,
// written back as MXNet symbol JSON (amp_cast / amp_multicast spelled as MXNet 1.9 loads them),
// and with --params-out its weights as the converted model stores them (a .params file).
#include "engine/lower.h"
#include "ir/error.h"
#include "tools/amp_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/model_steps.h"
#include "tools/params_input.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>

namespace ampfuse::tools {

namespace {

struct ConvertOptions {
  std::string model;
  std::vector<std::string> shapes;
  AmpArgs amp;
  std::string output;
  std::string params, params_out;  // --params FILE.params, --params-out OUT.params
  bool json = false;
};

int run_convert(const ConvertOptions& o) {
  if (o.amp.amp != "bf16" && o.amp.amp != "fp16")
    fail("--amp {}: expected bf16 or fp16 (convert writes a low-precision model)", o.amp.amp);
  const std::optional<engine::AmpOptions> amp = o.amp.options();
  if (!o.params_out.empty() && o.params.empty()) fail("--params-out {}: needs --params, the weights to convert", o.params_out);
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  const std::optional<ParamsFile> params =
      o.params.empty() ? std::nullopt : std::optional<ParamsFile>(read_params_file(o.params));
  std::set<std::string> unreached;
  const ConvertedModel c = convert_model(load_model_file(o.model, &unreached), unreached, shapes, *amp,
                                         params ? &*params : nullptr);
  const ir::Graph& converted = c.graph;
  const engine::AmpStats& stats = c.stats;
  const size_t op_nodes_before = c.nodes_before;
  const std::string& text = c.json;
  std::ofstream out(o.output, std::ios::binary);
  if (!out) fail("-o {}: cannot open the file for writing", o.output);
  out << text;
  out.close();
  if (!out) fail("-o {}: writing failed", o.output);
  if (!o.params_out.empty())
    with_context("--params-out", [&] {
      runtime::write_mxnet_params(o.params_out, params_for_converted_model(*params, converted));
    });

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["output"] = o.output;
    j["params_output"] = o.params_out.empty() ? nlohmann::json() : nlohmann::json(o.params_out);
    j["target"] = o.amp.amp;
    j["nodes_before"] = op_nodes_before;
    j["nodes_after"] = converted.nodes.size();
    j["casts_inserted"] = stats.casts_inserted;
    j["casts_removed"] = stats.casts_removed;
    j["casts_final"] = stats.casts_final;
    j["params_offline"] = stats.params_offline;
    j["lp16_nodes"] = stats.lp16_nodes;
    j["fp32_nodes"] = stats.fp32_nodes;
    j["op_classes"] = stats.class_counts;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{} -> {} ({})\n", o.model, o.output, o.amp.amp);
    if (!o.params_out.empty()) fmt::print("params:  {} -> {}\n", o.params, o.params_out);
    fmt::print("casts:   {} inserted, {} removed by folding, {} in the result\n", stats.casts_inserted,
               stats.casts_removed, stats.casts_final);
    fmt::print("nodes:   {} in {}, {} in f32 ({} weights stored in {})\n", stats.lp16_nodes, o.amp.amp,
               stats.fp32_nodes, stats.params_offline, o.amp.amp);
    std::string classes;
    for (const auto& [cls, n] : stats.class_counts) classes += fmt::format(" {} {}", cls, n);
    fmt::print("classes:{}\n", classes);
  }
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& parent) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "convert", "Convert a model for automatic mixed precision and write it as MXNet symbol JSON.");
  cmd->add_option("model", o->model, "MXNet *-symbol.json file")
      ->check(non_empty_path())
      ->required()
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  add_amp_args(*cmd, o->amp, "Low-precision type to convert to", true, "bf16|fp16")->required();
  cmd->add_option("-o,--output", o->output, "Where to write the converted symbol JSON")
      ->check(non_empty_path())
      ->required()
      ->type_name("OUT.json");
  cmd->add_option("--params", o->params,
                  "The model's weights, an MXNet .params file: checked against the model (names, shapes, dtypes)")
      ->check(non_empty_path())
      ->type_name("FILE.params");
  cmd->add_option("--params-out", o->params_out,
                  "Write the weights for the converted model (needs --params): same names and order, weights stored "
                  "in low precision (--cast-params-offline) cast, as MXNet's convert_model does")
      ->check(non_empty_path())
      ->type_name("OUT.params");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, output, params_output, target, nodes_before, nodes_after, casts_inserted, "
                "casts_removed, casts_final, params_offline, lp16_nodes, fp32_nodes, op_classes}");
  cmd->footer("The steps: infer types, amp-convert, cast-fold, layout-optimize (--layout), dce (engine/lower.h).\n"
              "The result is MXNet 1.x symbol JSON, amp_cast / amp_multicast spelled as MXNet 1.9 loads them.");
  return {cmd, [o] { return run_convert(*o); }};
}

}  // namespace ampfuse::tools
