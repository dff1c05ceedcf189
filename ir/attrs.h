// Typed node attributes, the schema an op declares for them, and MXNet's string spellings.
#pragma once

#include "ir/dtype.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ampfuse::ir {

// An entry of an int list that MXNet spells "None" (slice's begin=(None, 2)).
inline constexpr int64_t kNoneIndex = std::numeric_limits<int64_t>::min();

// std::monostate is MXNet's "None" for an optional scalar attribute.
using AttrValue = std::variant<std::monostate, bool, int64_t, double, std::string,
                               std::vector<int64_t>, std::vector<double>, DType>;

enum class AttrKind : uint8_t { Bool, Int, Float, String, IntList, FloatList, DType };

std::string_view attr_kind_name(AttrKind k);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  // nullopt: the attribute is required. std::monostate: optional, absent means None.
  std::optional<AttrValue> default_value;
  // For String attributes with a closed set of values (act_type, pool_type...): the set.
  std::vector<std::string> choices;
};

// Parses one MXNet attribute string ("(3, 3)", "True", "None", "1e-05", "float16") as the
// given kind. Throws ampfuse::Error naming the attribute on a malformed value.
AttrValue parse_mxnet_attr(const AttrSpec& spec, std::string_view text);
// The inverse, in the spelling MXNet 1.9 writes ("(3, 3)", "True", "None", "float16").
std::string format_mxnet_attr(const AttrValue& v);
// The textual IR spelling: 3, 1.5, true, "relu", [3,3], [1.5], f16, none.
std::string format_ir_attr(const AttrValue& v);

// The attributes of one node, by name, already typed by the op's schema.
class Attrs {
 public:
  Attrs() = default;

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const AttrValue& get(const std::string& name) const;  // throws if absent
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }

  // Typed getters: throw ampfuse::Error if absent or of another kind. get_float also
  // accepts an Int value. is_none: present and None.
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  DType get_dtype(const std::string& name) const;
  bool is_none(const std::string& name) const;
  std::optional<int64_t> get_opt_int(const std::string& name) const;  // None -> nullopt
  std::optional<DType> get_opt_dtype(const std::string& name) const;

  const std::map<std::string, AttrValue>& values() const { return values_; }
  friend bool operator==(const Attrs&, const Attrs&) = default;

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace ampfuse::ir
