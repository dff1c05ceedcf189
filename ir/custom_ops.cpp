#include "ir/custom_ops.h"

#include "ir/gradient.h"

#include <algorithm>

#include "ir/error.h"

namespace ampfuse::ir {

CustomOpRegistry& CustomOpRegistry::global() {
  static CustomOpRegistry registry;
  return registry;
}

void CustomOpRegistry::add(CustomOpDef def) {
  if (defs_.count(def.op_type)) fail("Custom op_type '{}' is registered twice", def.op_type);
  std::string key = def.op_type;
  defs_.emplace(std::move(key), std::move(def));
}

const CustomOpDef* CustomOpRegistry::find(std::string_view op_type) const {
  auto it = defs_.find(op_type);
  return it == defs_.end() ? nullptr : &it->second;
}

const CustomOpDef& CustomOpRegistry::get(std::string_view op_type) const {
  if (const CustomOpDef* d = find(op_type)) return *d;
  std::vector<std::string> known;
  for (const auto& [name, _] : defs_) known.push_back(name);
  fail("unknown Custom op_type '{}' (known: {})", op_type, fmt::join(known, ", "));
}

const CustomOpDef& custom_op(std::string_view op_type) {
  OpRegistry::global();  // registering the built-in ops fills the custom-op table
  return CustomOpRegistry::global().get(op_type);
}

Attrs custom_op_attrs(const CustomOpDef& def, const Attrs& node_attrs) {
  Attrs typed;
  for (const auto& [name, value] : node_attrs.values()) {
    if (name == "op_type") continue;
    // [&name = name]: clang before 16 cannot capture a structured binding (fuzz/CMakeLists.txt).
    auto spec =
        std::find_if(def.attrs.begin(), def.attrs.end(), [&name = name](const AttrSpec& s) { return s.name == name; });
    if (spec == def.attrs.end()) fail("Custom op_type '{}' has no attribute '{}'", def.op_type, name);
    // Imported nodes hold MXNet's strings; a node built in C++ may already hold the value.
    if (const auto* text = std::get_if<std::string>(&value); text && spec->kind != AttrKind::String)
      typed.set(name, parse_mxnet_attr(*spec, *text));
    else
      typed.set(name, value);
  }
  for (const auto& spec : def.attrs) {
    if (typed.has(spec.name)) continue;
    if (!spec.default_value) fail("Custom op_type '{}' needs attribute '{}'", def.op_type, spec.name);
    typed.set(spec.name, *spec.default_value);
  }
  return typed;
}

OpDef make_custom_op_def() {
  OpDef d;
  d.name = "Custom";
  d.kind = OpKind::opaque;
  d.inputs = {{"data", SlotRole::data}};
  d.attrs = {{"op_type", AttrKind::String, std::nullopt, {}}};
  d.open_attrs = true;
  d.num_inputs = [](const Attrs& a) { return static_cast<int>(custom_op(a.get_string("op_type")).inputs.size()); };
  d.num_outputs = [](const Attrs& a) { return custom_op(a.get_string("op_type")).num_outputs; };
  d.infer = [](InferContext& ctx) {
    const CustomOpDef& def = custom_op(ctx.attrs.get_string("op_type"));
    if (ctx.inputs.size() != def.inputs.size())
      fail("Custom op_type '{}' takes {} inputs, not {}", def.op_type, def.inputs.size(), ctx.inputs.size());
    const Attrs typed = custom_op_attrs(def, ctx.attrs);
    def.infer(typed, ctx);
  };
  // MXNet's AMP lists put Custom among the fp32 ops: its Python body sees whatever type
  // it is given and cannot be trusted with a narrower one.
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) {
    const CustomOpDef& def = custom_op(c.attrs().get_string("op_type"));
    if (!def.zero_gradient)
      fail("Custom op_type '{}' has no gradient rule: its backward is Python code ampfuse does not have", def.op_type);
    return InputGrads(c.num_inputs());
  };
  return d;
}

}  // namespace ampfuse::ir
