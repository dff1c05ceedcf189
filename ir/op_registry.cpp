#include "ir/op_registry.h"

#include "ir/error.h"
#include "ir/ops/contrib_detection.h"
#include "ir/text_lexer.h"

#include <algorithm>

namespace ampfuse::ir {

std::string_view amp_class_name(AmpClass c) {
  switch (c) {
    case AmpClass::lowp: return "lowp";
    case AmpClass::fp32: return "fp32";
    case AmpClass::widest: return "widest";
    case AmpClass::cond_fp32: return "cond_fp32";
    case AmpClass::neutral: return "neutral";
  }
  return "?";
}

const TensorType& InferContext::in(size_t i) const {
  if (i >= inputs.size()) fail("input {} is missing ({} given)", i, inputs.size());
  if (!inputs[i]) fail("the type of input {} is unknown", i);
  return *inputs[i];
}

int OpDef::input_count(const Attrs& a) const {
  return num_inputs ? num_inputs(a) : static_cast<int>(inputs.size());
}
const InputSlot& OpDef::slot(size_t i) const {
  if (inputs.empty()) fail("{} declares no input slots", name);
  if (alt_inputs_apply) fail("{}'s input slots depend on its attributes: ask slot(i, attrs)", name);
  return inputs[std::min(i, inputs.size() - 1)];
}
const InputSlot& OpDef::slot(size_t i, const Attrs& a) const {
  if (alt_inputs_apply && alt_inputs_apply(a)) return alt_inputs[std::min(i, alt_inputs.size() - 1)];
  if (inputs.empty()) fail("{} declares no input slots", name);
  return inputs[std::min(i, inputs.size() - 1)];
}
int OpDef::output_count(const Attrs& a) const { return num_outputs ? num_outputs(a) : 1; }

const AttrSpec* OpDef::find_attr(std::string_view n) const {
  for (const auto& s : attrs)
    if (s.name == n) return &s;
  return nullptr;
}

AmpClass OpDef::amp_class(DType target) const {
  if (target == DType::bf16) return amp_bf16;
  if (target == DType::f16) return amp_fp16;
  fail("AMP target must be f16 or bf16, not {}", dtype_name(target));
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    register_elementwise_ops(*r);
    register_nn_ops(*r);
    register_tensor_ops(*r);
    register_index_ops(*r);
    register_tensor_backward_ops(*r);
    register_contrib_detection_ops(*r);
    register_gradient_ops(*r);
    return r;
  }();
  return *registry;
}

namespace {

// Declarations that contradict the op's own schema fail at registration, not in a pass.
void check_declarations(const OpDef& d) {
  if (d.remap_access && (d.inputs.size() != 1 || d.num_inputs))
    fail("op '{}' declares a remap access map but does not have exactly one input", d.name);
  if (const ChannelsLastRule* c = d.channels_last ? &*d.channels_last : nullptr;
      c && c->channels != ChannelsLastRule::Channels::anywhere && !d.find_attr(c->attr))
    fail("op '{}' names attribute '{}' in its channels-last rule but has no such attribute", d.name, c->attr);
  if (d.table_index && (!d.find_attr(d.table_index->size_attr) || d.table_index->slot >= d.inputs.size()))
    fail("op '{}' declares table index input {} sized by '{}', which it does not have", d.name, d.table_index->slot,
         d.table_index->size_attr);
  // A table's indices are integers: AMP reads InputSlot::index, random inputs TableIndex.
  if (d.table_index && !d.inputs[d.table_index->slot].index)
    fail("op '{}' declares table index input {} ('{}') but not as an index slot: declare it with .index = true",
         d.name, d.table_index->slot, d.inputs[d.table_index->slot].name);
}

}  // namespace

void OpRegistry::add(OpDef def) {
  check_declarations(def);
  const auto taken = [&](const std::string& n) { return ops_.count(n) || canonical_of_alias_.count(n); };
  if (taken(def.name)) fail("op '{}' is registered twice", def.name);
  for (const std::string& alias : def.aliases) {
    if (alias == def.name || taken(alias)) fail("alias '{}' of op '{}' is already a name or alias", alias, def.name);
    canonical_of_alias_.emplace(alias, def.name);
  }
  std::string name = def.name;
  const auto it = ops_.emplace(std::move(name), std::move(def)).first;
  by_name_.emplace(std::string_view(it->first), &it->second);
}

const OpDef* OpRegistry::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

namespace {
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

// The suggestion is the closest name within 3 edits; of equally close ones, canonical
// names before aliases, each in sorted order.
void OpRegistry::fail_unknown(std::string_view name, bool aliases) const {
  std::string best;
  size_t best_d = 4;
  const auto consider = [&](const std::string& candidate, std::string shown) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_d) best_d = d, best = std::move(shown);
  };
  for (const auto& [n, _] : ops_) consider(n, fmt::format("'{}'", n));
  if (aliases)
    for (const auto& [alias, canonical] : canonical_of_alias_)
      consider(alias, fmt::format("'{}' (an alias of '{}')", alias, canonical));
  if (!best.empty()) fail("unknown op '{}' (did you mean {}?)", name, best);
  fail("unknown op '{}'", name);
}

const OpDef& OpRegistry::get(std::string_view name) const {
  if (const OpDef* d = find(name)) return *d;
  if (auto it = canonical_of_alias_.find(name); it != canonical_of_alias_.end())
    fail("op '{}' is an alias of '{}': graphs hold canonical op names (resolve aliases when building them)", name,
         it->second);
  fail_unknown(name, false);
}

const OpDef& OpRegistry::resolve(std::string_view name_or_alias) const {
  if (const OpDef* d = find(name_or_alias)) return *d;
  if (auto it = canonical_of_alias_.find(name_or_alias); it != canonical_of_alias_.end())
    return ops_.find(it->second)->second;
  fail_unknown(name_or_alias, true);
}

bool is_cast(const Node& n) { return !n.is_var() && OpRegistry::global().get(n.op).is_cast; }

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : ops_) out.push_back(n);
  return out;
}

namespace {
bool kind_matches(AttrKind k, const AttrValue& v) {
  switch (k) {
    case AttrKind::Bool: return std::holds_alternative<bool>(v);
    case AttrKind::Int: return std::holds_alternative<int64_t>(v);
    case AttrKind::Float: return std::holds_alternative<double>(v);
    case AttrKind::String: return std::holds_alternative<std::string>(v);
    case AttrKind::IntList: return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrKind::FloatList: return std::holds_alternative<std::vector<double>>(v);
    case AttrKind::DType: return std::holds_alternative<DType>(v);
  }
  return false;
}
}  // namespace

Attrs complete_attrs(const OpDef& def, Attrs given) {
  for (const auto& [name, value] : given.values()) {
    const AttrSpec* spec = def.find_attr(name);
    if (!spec && def.open_attrs && std::holds_alternative<std::string>(value)) continue;
    if (!spec) fail("{} has no attribute '{}'", def.name, name);
    AttrValue v = value;
    // Widen an int where a float is declared, and a float list from ints.
    if (spec->kind == AttrKind::Float)
      if (const int64_t* i = std::get_if<int64_t>(&v)) v = static_cast<double>(*i);
    if (spec->kind == AttrKind::FloatList)
      if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) v = std::vector<double>(l->begin(), l->end());
    const bool none_ok = std::holds_alternative<std::monostate>(v) && spec->default_value &&
                         std::holds_alternative<std::monostate>(*spec->default_value);
    if (!none_ok && !kind_matches(spec->kind, v))
      fail("attribute '{}' of {} must be {}, not {}", name, def.name, attr_kind_name(spec->kind), format_ir_attr(v));
    if (const auto* s = std::get_if<std::string>(&v); s && !spec->choices.empty() &&
        std::find(spec->choices.begin(), spec->choices.end(), *s) == spec->choices.end())
      fail("attribute '{}' of {}: '{}' is not one of {}", name, def.name, text::escaped(*s),
           fmt::join(spec->choices, ", "));
    given.set(name, std::move(v));
  }
  for (const auto& spec : def.attrs) {
    if (given.has(spec.name)) continue;
    if (!spec.default_value) fail("{} needs attribute '{}'", def.name, spec.name);
    given.set(spec.name, *spec.default_value);
  }
  return given;
}

bool attrs_complete(const OpDef& def, const Attrs& given) {
  size_t declared = 0;  // attributes of `given` that def.attrs declares
  for (const auto& [name, value] : given.values()) {
    const AttrSpec* spec = def.find_attr(name);
    if (!spec) {
      if (def.open_attrs && std::holds_alternative<std::string>(value)) continue;
      return false;
    }
    ++declared;
    // complete_attrs widens these, so `given` is not complete yet.
    if (spec->kind == AttrKind::Float && std::holds_alternative<int64_t>(value)) return false;
    if (spec->kind == AttrKind::FloatList && std::holds_alternative<std::vector<int64_t>>(value)) return false;
    const bool none_ok = std::holds_alternative<std::monostate>(value) && spec->default_value &&
                         std::holds_alternative<std::monostate>(*spec->default_value);
    if (!none_ok && !kind_matches(spec->kind, value)) return false;
    if (const auto* s = std::get_if<std::string>(&value); s && !spec->choices.empty() &&
        std::find(spec->choices.begin(), spec->choices.end(), *s) == spec->choices.end())
      return false;
  }
  // Attribute names are unique in both, so every declared one is present when the counts agree.
  return declared == def.attrs.size();
}

Attrs parse_attrs(const OpDef& def, const std::map<std::string, std::string>& raw) {
  Attrs typed;
  for (const auto& [name, text] : raw) {
    if (name.starts_with("__")) continue;
    if (const AttrSpec* spec = def.find_attr(name)) {
      typed.set(name, parse_mxnet_attr(*spec, text));
    } else if (def.open_attrs) {
      typed.set(name, text);
    } else if (std::find(def.ignored_attrs.begin(), def.ignored_attrs.end(), name) == def.ignored_attrs.end()) {
      fail("{} has no attribute '{}' (value '{}')", def.name, name, text);
    }
  }
  return complete_attrs(def, std::move(typed));
}

}  // namespace ampfuse::ir
