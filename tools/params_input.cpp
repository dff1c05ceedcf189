#include "tools/params_input.h"

#include "ir/error.h"

namespace ampfuse::tools {

ParamsFile read_params_file(const std::string& path) {
  ParamsFile p;
  p.path = path;
  p.list = runtime::read_mxnet_params(path);
  p.by_variable = runtime::params_by_name(p.list, path);
  return p;
}

void check_params_against_model(const ParamsFile& params, const ir::Graph& g, const runtime::Bindings& inputs) {
  // In file order, so that the first problem reported is the first in the file.
  for (size_t k = 0; k < params.list.arrays.size(); ++k) {
    const std::string& spelled = params.list.names[k];
    const std::string name = runtime::param_variable_name(spelled);
    const runtime::Tensor& array = params.list.arrays[k];
    const std::optional<int32_t> var = g.find_var(name);
    if (!var) fail("{}: array '{}' names no variable of the model", params.path, spelled);
    if (inputs.count(name)) fail("{}: array '{}' binds '{}', which --inputs binds too", params.path, spelled, name);
    const ir::Node& v = g.nodes[*var];
    if (v.outputs.empty()) continue;  // not inferred (an input's shape is missing): nothing to compare
    if (v.outputs[0] == array.type()) continue;
    // The likely mistake: the f32 weights of a model converted with --cast-params-offline.
    const bool stored_lowp = v.outputs[0].shape == array.shape() && ir::is_lowp(v.outputs[0].dtype);
    fail("{}: array '{}' is {}, but the model's {} '{}' is {}{}", params.path, spelled, ir::type_str(array.type()),
         ir::var_role_name(v.role), name, ir::type_str(v.outputs[0]),
         stored_lowp ? " (a converted model's weights: write them with `ampfuse convert --params-out`)" : "");
  }
}

std::vector<std::string> weights_without_values(const ParamsFile& params, const ir::Graph& g) {
  std::vector<std::string> missing;
  for (const ir::Node& n : g.nodes)
    if (n.is_var() && n.role != ir::VarRole::input && !params.by_variable.count(n.name)) missing.push_back(n.name);
  return missing;
}

runtime::NDArrayList params_for_converted_model(const ParamsFile& params, const ir::Graph& converted) {
  runtime::NDArrayList out = params.list;
  for (size_t k = 0; k < out.arrays.size(); ++k) {
    const std::optional<int32_t> var = converted.find_var(runtime::param_variable_name(out.names[k]));
    if (!var || converted.nodes[*var].outputs.empty()) continue;  // removed as unused: kept as it was
    const ir::DType stored = converted.nodes[*var].outputs[0].dtype;
    if (stored != out.arrays[k].dtype()) out.arrays[k] = runtime::cast(out.arrays[k], stored);
  }
  return out;
}

}  // namespace ampfuse::tools
