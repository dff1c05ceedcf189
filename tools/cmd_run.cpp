// `ampfuse run [MODEL.json]`: runs a model (the embedded default one without MODEL) on the
// reference interpreter with seeded random values for everything --inputs leaves unbound.
#include "engine/default_model.h"
#include "ir/error.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/report.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>

namespace ampfuse::tools {

namespace {

struct RunOptions {
  std::string model;  // empty: the default model
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;
  std::string save_dir;
  uint64_t seed = 0;
  bool json = false;
};

constexpr const char* kDefaultModelName = "<default>";

// The default model is built for its batch: --shape (or an input file) may set only that.
ir::Graph default_model(const std::map<std::string, ir::Shape>& shapes, const runtime::Bindings& given) {
  int64_t batch = 1;
  if (auto it = given.find("data"); it != given.end() && !it->second.shape().empty()) batch = it->second.shape()[0];
  for (const auto& [name, shape] : shapes) {
    if (name != "data") fail("the default model has no input '{}' (its input: data)", name);
    if (shape.size() != 4 || shape[1] != 3 || shape[2] != 32 || shape[3] != 32)
      fail("--shape data={}: the default model takes data of shape N,3,32,32", fmt::join(shape, ","));
    batch = shape[0];
  }
  ir::Graph g = engine::build_default_model(batch);
  for (const auto& [name, _] : given)
    if (!g.find_var(name)) fail("--inputs {}: the default model has no variable '{}' (its input: data)", name, name);
  return g;
}

ir::Graph model_from_file(const std::string& path, const std::map<std::string, ir::Shape>& shapes,
                          const runtime::Bindings& given) {
  ir::Graph g = load_model_file(path);
  // An input file fixes its variable's type, unless --shape says otherwise (then the run
  // reports the mismatch).
  std::map<std::string, ir::TensorType> from_files;
  for (const auto& [name, t] : given)
    if (!shapes.count(name)) from_files[name] = t.type();
  with_context("--inputs", [&] { set_variable_types(g, from_files); });
  with_context("--shape", [&] { set_variable_shapes(g, shapes); });
  infer_types_naming_missing_shapes(g);
  return g;
}

// A file name for an output: MXNet names may hold '/' or other characters a path cannot.
std::string file_stem(const std::string& name, std::set<std::string>& taken) {
  std::string stem = name;
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  if (stem.empty() || stem == "." || stem == "..") stem = "output";
  std::string unique = stem;
  for (int k = 2; !taken.insert(unique).second; ++k) unique = fmt::format("{}_{}", stem, k);
  return unique;
}

std::vector<std::string> save_outputs(const std::string& dir, const ir::Graph& g,
                                      const std::vector<runtime::Tensor>& outputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--save-outputs {}: cannot create the directory: {}", dir, ec.message());
  std::set<std::string> taken;
  std::vector<std::string> files;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string path = (std::filesystem::path(dir) / (file_stem(g.output_name(k), taken) + ".npy")).string();
    runtime::write_npy(path, outputs[k]);
    files.push_back(path);
  }
  return files;
}

int run_model(const RunOptions& o) {
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  runtime::Bindings given;
  for (const auto& [name, path] : parse_input_args(o.inputs))
    given[name] = with_context(fmt::format("--inputs {}", name), [&] { return runtime::read_npy(path); });

  const ir::Graph g = o.model.empty() ? default_model(shapes, given) : model_from_file(o.model, shapes, given);
  const runtime::Bindings vars = runtime::random_bindings(g, o.seed, given);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<runtime::Tensor> outputs = runtime::interpret(g, vars);
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;

  RunReport r;
  r.model = summarize_model(g, o.model.empty() ? kDefaultModelName : o.model);
  r.seed = o.seed;
  r.run_ms = elapsed.count();
  for (size_t k = 0; k < outputs.size(); ++k) r.outputs.push_back(summarize_tensor(g.output_name(k), outputs[k]));
  if (!o.save_dir.empty()) r.saved_files = save_outputs(o.save_dir, g, outputs);

  if (o.json)
    fmt::print("{}\n", to_json(r).dump(2));
  else
    fmt::print("{}", to_text(r));
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "run", "Run a model on the reference interpreter and summarize its outputs.");
  cmd->add_option("model", o->model,
                  "MXNet *-symbol.json file; without it, the embedded default model (a conv block and a "
                  "GELU MLP block on data of shape N,3,32,32)")
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  cmd->add_option("--inputs", o->inputs,
                  "Value of a variable (an input or a weight) from a .npy file (repeatable); without --shape "
                  "it also sets the variable's shape and dtype")
      ->allow_extra_args(false)
      ->type_name("NAME=FILE.npy");
  cmd->add_option("--save-outputs", o->save_dir,
                  "Write each output to DIR/<output name>.npy (bf16 as float32), creating DIR")
      ->type_name("DIR");
  cmd->add_option("--seed", o->seed, "Seed of the random values of unbound variables (default 0)")->type_name("N");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, nodes, op_nodes, ops, seed, run_ms, outputs: [{name, shape, dtype, "
                "min, max, mean, nonfinite}], saved}; min, max and mean are over finite elements");
  cmd->footer("Variables without --inputs get seeded random values: inputs uniform in [-1, 1), weights\n"
              "scaled by 1/sqrt(fan-in), BatchNorm variances in [0.5, 1.5), token ids below the vocabulary\n"
              "of the Embedding that reads them. The same seed gives the same values on every platform.");
  return {cmd, [o] { return run_model(*o); }};
}

}  // namespace ampfuse::tools
