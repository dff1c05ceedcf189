// `ampfuse info MODEL.json`: what a model is made of and what it computes, without running it.
#include "ir/error.h"
#include "ir/type_inference.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/params_input.h"
#include "tools/report.h"

#include <memory>

namespace ampfuse::tools {

namespace {

struct InfoOptions {
  std::string model;
  std::vector<std::string> shapes;
  std::string params;  // --params FILE.params
  bool json = false;
};

int run_info(const InfoOptions& o) {
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  const std::optional<ParamsFile> params =
      o.params.empty() ? std::nullopt : std::optional<ParamsFile>(read_params_file(o.params));
  std::set<std::string> unreached;
  ir::Graph g = load_model_file(o.model, &unreached);
  set_variable_shapes(g, shapes, unreached);
  std::string inference_error;
  try {
    ir::infer_types(g);
  } catch (const Error& e) {
    inference_error = e.what();
  }
  InfoReport r = make_info_report(g, o.model);
  if (!inference_error.empty()) {
    r.outputs.reset();
    r.missing_shapes = inputs_needing_shapes(g);
    // Every input has a shape, so the model itself (or a --shape) is inconsistent.
    if (r.missing_shapes.empty()) throw Error(inference_error);
    r.inference_error = inference_error;
  }
  // The file against the variables inference typed (all of them once no shape is missing).
  if (params) {
    check_params_against_model(*params, g);
    r.params_file = InfoReport::ParamsFile{params->path, params->list.arrays.size(), weights_without_values(*params, g)};
  }
  if (o.json) {
    fmt::print("{}\n", to_json(r).dump(2));
    return r.outputs ? 0 : 2;
  }
  fmt::print("{}", to_text(r));
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "info", "Show a model's nodes, op counts, inputs, weights and inferred output shapes.");
  cmd->add_option("model", o->model, "MXNet *-symbol.json file")
      ->check(non_empty_path())
      ->required()
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes,
                  "Shape of an input, NAME=D0,D1,... (repeatable); overrides the model's __shape__ hints")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  cmd->add_option("--params", o->params,
                  "Check an MXNet .params file against the model: every array names a variable ('arg:' and "
                  "'aux:' dropped) of its shape and dtype; the report adds the weights it gives no value")
      ->check(non_empty_path())
      ->type_name("FILE.params");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, nodes, op_nodes, ops, inputs, params, outputs}. When an input "
                "shape is missing, outputs is null, missing_shapes names the inputs to give, and the exit "
                "status is 2");
  cmd->footer("Without --shape, inputs take the shapes the model's hints give. If one is still unknown, the\n"
              "report shows what is known and names the --shape to add (exit status 0, or 2 with --json).");
  return {cmd, [o] { return run_info(*o); }};
}

}  // namespace ampfuse::tools
