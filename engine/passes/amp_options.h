// AMP conversion options and the op classes they give: which ops run in low precision.
//
// The default class of every op comes from the registry (OpDef::amp_bf16 / amp_fp16 and
// their conditions). A user moves ops between classes with the per-class lists, adds
// conditional-fp32 entries, and excludes nodes by name or by the `__amp_disable__` hint
// (MXNet's `__opt_constraint__` DisableAMP flag is honoured too). AmpPolicy turns the
// options into the effective lists and answers "how does this node run?".
#pragma once

#include "ir/graph.h"
#include "ir/op_registry.h"

#include <array>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::engine {

// Node hints the AMP passes read and write (Node::hints).
inline constexpr const char* kAmpDisableHint = "__amp_disable__";    // "1": run this node in f32
inline constexpr const char* kAmpInsertedHint = "__amp_inserted__";  // "1": amp_convert made this cast
// MXNet's per-node optimization constraints: a bit mask, DisableAMP = 1.
inline constexpr const char* kMxnetOptConstraintHint = "__opt_constraint__";

// `op` runs in f32 when its attribute `attr` has one of `values` (as MXNet spells them:
// "softrelu", "True", "(3, 3)").
struct CondFp32Entry {
  std::string op;
  std::string attr;
  std::vector<std::string> values;
};

struct AmpOptions {
  ir::DType target = ir::DType::bf16;  // f16 or bf16
  // Ops moved into a class; each leaves its default class. An op may be named in one
  // list only.
  std::vector<std::string> lp16_ops, fp32_ops, widest_ops, neutral_ops;
  // Conditional entries: the op becomes conditional-fp32, and otherwise keeps the class it
  // has (its default, or the list above that names it). Entries for one op are OR-ed and
  // replace the registry's own condition for that op.
  std::vector<CondFp32Entry> conditional_fp32_ops;
  std::vector<std::string> excluded_nodes;  // node names that run as fp32
  // Store a param in low precision when every consumer reads it through the cast.
  bool cast_params_offline = false;
  // amp_multicast's cast_narrow for widest ops: with mixed inputs run in low precision
  // (casting the f32 inputs down) instead of f32.
  bool cast_narrow = false;
  // "" or "nhwc": run layout_optimize after the AMP passes (engine/lower.h).
  std::string layout;
};

// The five classes, in the order the lists are reported.
inline constexpr std::array<ir::AmpClass, 5> kAmpClasses = {
    ir::AmpClass::lowp, ir::AmpClass::fp32, ir::AmpClass::widest, ir::AmpClass::cond_fp32,
    ir::AmpClass::neutral};

class AmpPolicy {
 public:
  // Validates the options: throws ampfuse::Error on a target other than f16/bf16, an
  // unknown op in a list ("fp32_ops: unknown op 'Conv' (did you mean ...)"), an op in two
  // lists, or a conditional entry naming an attribute the op does not have.
  explicit AmpPolicy(const AmpOptions& opts);

  ir::DType target() const { return target_; }
  // The ops of class `c` after overrides, sorted. Every registered op is in exactly one list.
  const std::vector<std::string>& ops(ir::AmpClass c) const;
  // The class of op `op` (cond_fp32 for conditional ones). Throws on an unknown op.
  ir::AmpClass op_class(std::string_view op) const;
  // The class node `n` runs as: lowp, fp32, widest or neutral. Excluded or disabled nodes
  // and conditional ones whose attribute matches run as fp32.
  ir::AmpClass node_class(const ir::Node& n) const;
  // True when the node was excluded by name or by a hint.
  bool excluded(const ir::Node& n) const;
  // Input slots that stay in their original type when the op runs in low precision:
  // the registry's keep_fp32_inputs for the target, aux slots (state the op updates) and
  // index slots (ids and labels, which a lower-precision float would round).
  bool keeps_input(const ir::OpDef& def, const ir::Attrs& attrs, size_t input) const;

 private:
  struct Condition {
    std::vector<CondFp32Entry> entries;  // any match -> fp32
    ir::AmpClass otherwise = ir::AmpClass::neutral;
  };
  ir::DType target_;
  std::map<std::string, ir::AmpClass, std::less<>> class_of_;
  std::map<std::string, Condition, std::less<>> conditions_;
  std::map<ir::AmpClass, std::vector<std::string>> lists_;
  std::set<std::string> excluded_names_;
};

}  // namespace ampfuse::engine
