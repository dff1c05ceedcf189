#include "tools/model_input.h"

#include "models/default_model.h"

#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

#include <charconv>
#include <filesystem>

namespace ampfuse::tools {

namespace {

std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& arg,
                                                     const char* value_form) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
    fail("{} '{}': expected NAME={}", option, arg, value_form);
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

ir::Shape parse_extents(const std::string& arg, const std::string& text) {
  ir::Shape shape;
  size_t pos = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item(text.data() + pos, comma - pos);
    int64_t d = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    // Zero is an extent like any other (an empty tensor, as from an .npy file of batch 0).
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || d < 0)
      fail("--shape '{}': '{}' is not an integer extent of 0 or more", arg, item);
    shape.push_back(d);
    if (comma == text.size()) break;
    pos = comma + 1;
  }
  with_context(fmt::format("--shape '{}'", arg), [&] { ir::num_elements(shape); });  // at most 2^63 - 1
  return shape;
}

std::string input_list(const ir::Graph& g) {
  std::vector<std::string> names;
  for (const ir::Node* n : input_variables(g)) names.push_back(n->name);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

ir::Node& variable(ir::Graph& g, const std::string& name) {
  const std::optional<int32_t> i = g.find_var(name);
  if (!i) fail("the model has no variable '{}' (its inputs: {})", name, input_list(g));
  return g.nodes[*i];
}

}  // namespace

std::map<std::string, ir::Shape> parse_shape_args(const std::vector<std::string>& args) {
  std::map<std::string, ir::Shape> shapes;
  for (const std::string& arg : args) {
    auto [name, dims] = split_assignment("--shape", arg, "D0,D1,...");
    ir::Shape shape = parse_extents(arg, dims);
    if (!shapes.emplace(name, std::move(shape)).second) fail("--shape: '{}' is given twice", name);
  }
  return shapes;
}

std::map<std::string, std::string> parse_input_args(const std::vector<std::string>& args) {
  std::map<std::string, std::string> files;
  for (const std::string& arg : args) {
    auto [name, path] = split_assignment("--inputs", arg, "FILE.npy");
    if (!files.emplace(name, path).second) fail("--inputs: '{}' is given twice", name);
  }
  return files;
}

ir::Graph load_model_file(const std::string& path, std::set<std::string>* unreached) {
  ir::MxnetImportOptions opts;
  opts.infer = false;  // shapes from the command line come first
  opts.unreached_variables = unreached;
  return ir::load_mxnet_json_file(path, opts);
}

ir::Graph load_model_file_with_placeholder(const std::string& path, std::set<std::string>* unreached,
                                           int64_t placeholder, std::map<std::string, std::string>* open_hints) {
  ir::MxnetImportOptions opts;
  opts.infer = false;
  opts.unreached_variables = unreached;
  opts.open_extent_placeholder = placeholder;
  opts.open_shape_hints = open_hints;
  return ir::load_mxnet_json_file(path, opts);
}

void set_variable_types(ir::Graph& g, const std::map<std::string, ir::TensorType>& types) {
  for (const auto& [name, type] : types) variable(g, name).outputs = {type};
}

void set_variable_shapes(ir::Graph& g, const std::map<std::string, ir::Shape>& shapes,
                         const std::set<std::string>& unreached) {
  for (const auto& [name, shape] : shapes) {
    if (unreached.count(name) && !g.find_var(name)) continue;
    ir::Node& v = variable(g, name);
    // Import types only variables whose shape it knows; the others keep their __dtype__
    // hint for this moment (a bf16 input stays bf16 when --shape gives its shape).
    const ir::DType dtype = !v.outputs.empty() ? v.outputs[0].dtype
                                               : with_context(fmt::format("variable '{}'", name), [&] {
                                                   return ir::variable_dtype_hint(v).value_or(ir::DType::f32);
                                                 });
    v.outputs = {ir::TensorType{dtype, shape}};
    v.hints.erase("__shape__");  // spent, as import spends the hints of what it types
    v.hints.erase("__dtype__");
  }
}

std::vector<const ir::Node*> input_variables(const ir::Graph& g) {
  std::vector<const ir::Node*> inputs;
  for (const ir::Node& n : g.nodes)
    if (n.is_var() && n.role == ir::VarRole::input) inputs.push_back(&n);
  return inputs;
}

std::vector<std::string> inputs_needing_shapes(const ir::Graph& g) {
  std::map<int32_t, bool> feeds_non_label;
  for (const ir::Node& n : g.nodes) {
    const ir::OpDef* def = ir::OpRegistry::global().find(n.op);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const bool label = def && !def->inputs.empty() && def->slot(k, n.attrs).name == "label";
      feeds_non_label[n.inputs[k].node] |= !label;
    }
  }
  std::vector<std::string> needed, labels;
  for (const ir::Node* n : input_variables(g)) {
    if (!n->outputs.empty()) continue;
    const int32_t i = *g.find_var(n->name);
    (feeds_non_label[i] ? needed : labels).push_back(n->name);
  }
  return needed.empty() ? labels : needed;
}

void infer_types_naming_missing_shapes(ir::Graph& g) {
  try {
    ir::infer_types(g);
  } catch (const Error& e) {
    const std::vector<std::string> missing = inputs_needing_shapes(g);
    if (missing.empty()) throw;
    std::vector<std::string> flags;
    for (const std::string& name : missing) flags.push_back(fmt::format("--shape {}=D0,D1,...", name));
    fail("{} (the shape of {} is unknown: give {})", e.what(), fmt::join(missing, ", "), fmt::join(flags, " "));
  }
}

std::map<std::string, int> op_histogram(const ir::Graph& g) {
  std::map<std::string, int> ops;
  for (const ir::Node& n : g.nodes)
    if (!n.is_var()) ++ops[n.op];
  return ops;
}

namespace {

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
  ir::Graph g = models::build_default_model(batch);
  for (const auto& [name, _] : given)
    if (!g.find_var(name)) fail("--inputs {}: the default model has no variable '{}' (its input: data)", name, name);
  return g;
}

// The dtype the model itself gives variable `name`: its __dtype__ hint, else f32; nullopt
// for a name the graph lacks or a hint naming a type ampfuse lacks (a file's type replaces
// it, and other checks name the variable).
std::optional<ir::DType> declared_dtype(const ir::Graph& g, const std::string& name) {
  const std::optional<int32_t> i = g.find_var(name);
  if (!i) return std::nullopt;
  try {
    return ir::variable_dtype_hint(g.nodes[*i]).value_or(ir::DType::f32);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

ir::Graph load_model_text(std::string_view json_text, std::string_view source_name, std::set<std::string>* unreached) {
  ir::MxnetImportOptions opts;
  opts.infer = false;  // shapes given by the caller come first
  opts.unreached_variables = unreached;
  return ir::import_mxnet_json(json_text, source_name, opts);
}

ir::Graph type_model(ir::Graph g, const std::set<std::string>& unreached, const std::map<std::string, ir::Shape>& shapes,
                     const runtime::Bindings& given) {
  // An input file fixes its variable's type, unless --shape says otherwise (then the run
  // reports the mismatch).
  std::map<std::string, ir::TensorType> from_files;
  for (const auto& [name, t] : given)
    if (!shapes.count(name)) from_files[name] = t.type();
  // Files of another dtype than the model declares (an f64 array for an f32 model) are
  // legal: the input's type flows through the graph. When that makes inference fail (an
  // f32 weight meets f64 data), the error is the file's, not the weight's.
  std::map<std::string, ir::TensorType> as_declared;
  for (const auto& [name, t] : from_files)
    if (const std::optional<ir::DType> d = declared_dtype(g, name); d && *d != t.dtype) as_declared[name] = {*d, t.shape};
  with_context("--inputs", [&] { set_variable_types(g, from_files); });
  with_context("--shape", [&] { set_variable_shapes(g, shapes, unreached); });
  std::optional<ir::Graph> before;
  if (!as_declared.empty()) before = g;
  try {
    infer_types_naming_missing_shapes(g);
  } catch (const Error& e) {
    if (!before) throw;
    set_variable_types(*before, as_declared);
    try {
      ir::infer_types(*before);
    } catch (const Error&) {
      throw e;  // not the files' dtype alone
    }
    const auto& [name, t] = *as_declared.begin();
    fail("--inputs {}: the file holds {}, but the model computes in {} ({}); save the array as {}", name,
         ir::dtype_name(from_files.at(name).dtype), ir::dtype_name(t.dtype), e.what(), ir::dtype_name(t.dtype));
  }
  return g;
}

namespace {

ir::Graph model_from_file(const std::string& path, const std::map<std::string, ir::Shape>& shapes,
                          const runtime::Bindings& given) {
  std::set<std::string> unreached;
  ir::Graph g = load_model_file(path, &unreached);
  return type_model(std::move(g), unreached, shapes, given);
}

}  // namespace

ir::Graph load_model(const std::string& model, const std::map<std::string, ir::Shape>& shapes,
                     const runtime::Bindings& given) {
  return model.empty() ? default_model(shapes, given) : model_from_file(model, shapes, given);
}

}  // namespace ampfuse::tools
