#include "engine/passes/amp_options.h"

#include "ir/error.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace ampfuse::engine {

namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// A user writes attribute values as MXNet does ("softrelu", "True", "(3, 3)") or as the
// textual IR does ("true", "[3,3]"); both spellings name the same value.
bool attr_matches(const ir::AttrValue& v, const std::vector<std::string>& values) {
  const std::string* s = std::get_if<std::string>(&v);
  const std::string mxnet = s ? *s : ir::format_mxnet_attr(v);
  const std::string irtext = s ? *s : ir::format_ir_attr(v);
  return std::any_of(values.begin(), values.end(),
                     [&](const std::string& want) { return iequal(want, mxnet) || iequal(want, irtext); });
}

bool opt_constraint_disables_amp(const std::string& text) {
  int64_t flags = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), flags);
  return ec == std::errc() && p == text.data() + text.size() && (flags & 1) != 0;
}

}  // namespace

AmpPolicy::AmpPolicy(const AmpOptions& opts) : target_(opts.target) {
  if (!ir::is_lowp(target_))
    fail("AMP target must be float16 or bfloat16, not {}", ir::mxnet_dtype_name(target_));
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  for (const std::string& name : reg.names()) {
    const ir::OpDef& def = reg.get(name);
    const ir::AmpClass c = def.amp_class(target_);
    class_of_[name] = c;
    if (c == ir::AmpClass::cond_fp32) {
      const auto& cond = target_ == ir::DType::bf16 ? def.cond_fp32_bf16 : def.cond_fp32_fp16;
      if (!cond)
        fail("internal: op '{}' is conditional-fp32 for {} without a condition", name, ir::dtype_name(target_));
      conditions_[name] = {{{name, cond->attr, cond->values}}, cond->otherwise};
    }
  }

  // Moves first, so that a conditional entry's `otherwise` is the class the user chose.
  std::map<std::string, std::string> moved_by;  // op -> the option that moved it
  const std::pair<const std::vector<std::string>*, std::pair<ir::AmpClass, const char*>> moves[] = {
      {&opts.lp16_ops, {ir::AmpClass::lowp, "lp16_ops"}},
      {&opts.fp32_ops, {ir::AmpClass::fp32, "fp32_ops"}},
      {&opts.widest_ops, {ir::AmpClass::widest, "widest_ops"}},
      {&opts.neutral_ops, {ir::AmpClass::neutral, "neutral_ops"}},
  };
  for (const auto& [list, target] : moves) {
    for (const std::string& given : *list) {
      // Graphs hold canonical names: an alias the user wrote (`cast`) moves its op (Cast).
      const std::string& op =
          with_context(target.second, [&]() -> const ir::OpDef& { return reg.resolve(given); }).name;
      if (auto it = moved_by.find(op); it != moved_by.end() && it->second != target.second)
        fail("op '{}' is in both {} and {}", op, it->second, target.second);
      moved_by[op] = target.second;
      class_of_[op] = target.first;
      conditions_.erase(op);
    }
  }

  std::set<std::string> user_conditioned;
  for (const CondFp32Entry& e : opts.conditional_fp32_ops) {
    const ir::OpDef& def =
        with_context("conditional_fp32_ops", [&]() -> const ir::OpDef& { return reg.resolve(e.op); });
    if (!def.find_attr(e.attr) && !def.open_attrs)
      fail("conditional_fp32_ops: op '{}' has no attribute '{}'", e.op, e.attr);
    if (e.values.empty()) fail("conditional_fp32_ops: the entry for '{}' ({}) lists no values", e.op, e.attr);
    const std::string& op = def.name;
    Condition& cond = conditions_[op];
    if (user_conditioned.insert(op).second) {
      // The first user entry replaces the registry's condition; the class it falls back to
      // stays what the op was before (a registry condition's `otherwise` included).
      if (class_of_[op] != ir::AmpClass::cond_fp32) cond.otherwise = class_of_[op];
      cond.entries.clear();
    }
    cond.entries.push_back(e);
    class_of_[op] = ir::AmpClass::cond_fp32;
  }

  for (ir::AmpClass c : kAmpClasses) lists_[c];
  for (const auto& [op, c] : class_of_) lists_[c].push_back(op);
  excluded_names_.insert(opts.excluded_nodes.begin(), opts.excluded_nodes.end());
}

const std::vector<std::string>& AmpPolicy::ops(ir::AmpClass c) const { return lists_.at(c); }

ir::AmpClass AmpPolicy::op_class(std::string_view op) const {
  auto it = class_of_.find(op);
  if (it == class_of_.end()) {
    ir::OpRegistry::global().get(op);  // an unknown op: throws, suggesting a close name
    fail("op '{}' was registered after the AMP policy was built", op);
  }
  return it->second;
}

bool AmpPolicy::excluded(const ir::Node& n) const {
  if (excluded_names_.count(n.name)) return true;
  if (auto it = n.hints.find(kAmpDisableHint); it != n.hints.end() && it->second == "1") return true;
  if (auto it = n.hints.find(kMxnetOptConstraintHint); it != n.hints.end())
    return opt_constraint_disables_amp(it->second);
  return false;
}

ir::AmpClass AmpPolicy::node_class(const ir::Node& n) const {
  if (excluded(n)) return ir::AmpClass::fp32;
  const ir::AmpClass c = op_class(n.op);
  if (c != ir::AmpClass::cond_fp32) return c;
  const Condition& cond = conditions_.at(n.op);
  for (const CondFp32Entry& e : cond.entries)
    if (n.attrs.has(e.attr) && attr_matches(n.attrs.get(e.attr), e.values)) return ir::AmpClass::fp32;
  return cond.otherwise;
}

bool AmpPolicy::keeps_input(const ir::OpDef& def, const ir::Attrs& attrs, size_t input) const {
  const ir::InputSlot& slot = def.slot(input, attrs);
  if (slot.role == ir::SlotRole::aux || slot.index) return true;
  const auto& keep = target_ == ir::DType::bf16 ? def.keep_fp32_inputs_bf16 : def.keep_fp32_inputs_fp16;
  return std::find(keep.begin(), keep.end(), static_cast<int>(input)) != keep.end();
}

}  // namespace ampfuse::engine
