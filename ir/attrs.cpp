#include "ir/attrs.h"

#include "ir/error.h"
#include "ir/text_lexer.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ampfuse::ir {

std::string_view attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Bool: return "bool";
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::String: return "string";
    case AttrKind::IntList: return "int list";
    case AttrKind::FloatList: return "float list";
    case AttrKind::DType: return "dtype";
  }
  return "?";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_none(std::string_view s) { return s == "None" || s == "none" || s == "null"; }

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.back() == 'L') s.remove_suffix(1);  // Python 2 longs: "3L"
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_float(std::string_view s) {
  s = trim(s);
  std::string t(s);
  if (t.empty()) return std::nullopt;
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "inf" || t == "+inf" || t == "infinity") return INFINITY;
  if (t == "-inf" || t == "-infinity") return -INFINITY;
  if (t == "nan") return NAN;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// "(3, 3)", "[3,3]", "3", "()", "(None, 2)", "(1,)"
std::vector<std::string_view> split_list(std::string_view s) {
  s = trim(s);
  if (!s.empty() && (s.front() == '(' || s.front() == '[')) {
    const char close = s.front() == '(' ? ')' : ']';
    if (s.back() != close) fail("unbalanced brackets in list '{}'", s);
    s = trim(s.substr(1, s.size() - 2));
  }
  std::vector<std::string_view> items;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = trim(s.substr(0, comma));
    if (item.empty()) fail("empty list entry");
    items.push_back(item);
    if (comma == std::string_view::npos) break;
    s = trim(s.substr(comma + 1));
  }
  return items;
}

}  // namespace

AttrValue parse_mxnet_attr(const AttrSpec& spec, std::string_view text) {
  auto bad = [&](std::string_view why) -> AttrValue {
    fail("attribute '{}': cannot read '{}' as {}{}", spec.name, text, attr_kind_name(spec.kind), why);
  };
  const std::string_view t = trim(text);
  if (is_none(t) && spec.kind != AttrKind::String) {
    if (spec.default_value && std::holds_alternative<std::monostate>(*spec.default_value))
      return std::monostate{};
    return bad(" (None is not allowed here)");
  }
  try {
    switch (spec.kind) {
      case AttrKind::Bool:
        if (t == "True" || t == "true" || t == "1") return true;
        if (t == "False" || t == "false" || t == "0") return false;
        return bad("");
      case AttrKind::Int: {
        auto v = parse_int(t);
        if (!v) return bad("");
        return *v;
      }
      case AttrKind::Float: {
        auto v = parse_float(t);
        if (!v) return bad("");
        return *v;
      }
      case AttrKind::String: {
        std::string s(t);
        if (!spec.choices.empty()) {
          bool ok = false;
          for (const auto& c : spec.choices) ok = ok || c == s;
          if (!ok)
            fail("attribute '{}': '{}' is not one of {}", spec.name, text::escaped(s), fmt::join(spec.choices, ", "));
        }
        return s;
      }
      case AttrKind::IntList: {
        std::vector<int64_t> out;
        for (auto item : split_list(t)) {
          if (is_none(item)) {
            out.push_back(kNoneIndex);
            continue;
          }
          auto v = parse_int(item);
          if (!v) return bad("");
          out.push_back(*v);
        }
        return out;
      }
      case AttrKind::FloatList: {
        std::vector<double> out;
        for (auto item : split_list(t)) {
          auto v = parse_float(item);
          if (!v) return bad("");
          out.push_back(*v);
        }
        return out;
      }
      case AttrKind::DType: {
        auto d = parse_dtype(t);
        if (!d) return bad("");
        return *d;
      }
    }
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with("attribute '")) throw;
    return bad(std::string(" (") + e.what() + ")");
  }
  return bad("");
}

namespace {
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest form that reads back to the same double.
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}
std::string format_index(int64_t v) { return v == kNoneIndex ? "None" : std::to_string(v); }
}  // namespace

std::string format_mxnet_attr(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return "None";
        else if constexpr (std::is_same_v<T, bool>) return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return format_double(x);
        else if constexpr (std::is_same_v<T, std::string>) return x;
        else if constexpr (std::is_same_v<T, DType>) return std::string(mxnet_dtype_name(x));
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::vector<std::string> items;
          for (int64_t i : x) items.push_back(format_index(i));
          if (items.size() == 1) return "(" + items[0] + ",)";
          return fmt::format("({})", fmt::join(items, ", "));
        } else {
          std::vector<std::string> items;
          for (double d : x) items.push_back(format_double(d));
          if (items.size() == 1) return "(" + items[0] + ",)";
          return fmt::format("({})", fmt::join(items, ", "));
        }
      },
      v);
}

std::string format_ir_attr(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return "none";
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return format_double(x);
        else if constexpr (std::is_same_v<T, std::string>) {
          std::string out = "\"";
          for (char c : x) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
          }
          return out + "\"";
        } else if constexpr (std::is_same_v<T, DType>) return std::string(dtype_name(x));
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::vector<std::string> items;
          for (int64_t i : x) items.push_back(i == kNoneIndex ? "none" : std::to_string(i));
          return fmt::format("[{}]", fmt::join(items, ","));
        } else {
          std::vector<std::string> items;
          for (double d : x) items.push_back(format_double(d));
          return fmt::format("[{}]", fmt::join(items, ","));
        }
      },
      v);
}

const AttrValue& Attrs::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) fail("attribute '{}' is missing", name);
  return it->second;
}

namespace {
template <class T>
const T& get_as(const Attrs& a, const std::string& name, std::string_view kind) {
  const AttrValue& v = a.get(name);
  if (const T* p = std::get_if<T>(&v)) return *p;
  fail("attribute '{}' is {}, not {}", name, format_ir_attr(v), kind);
}
}  // namespace

bool Attrs::get_bool(const std::string& n) const { return get_as<bool>(*this, n, "a bool"); }
int64_t Attrs::get_int(const std::string& n) const { return get_as<int64_t>(*this, n, "an int"); }
double Attrs::get_float(const std::string& n) const {
  const AttrValue& v = get(n);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return get_as<double>(*this, n, "a float");
}
const std::string& Attrs::get_string(const std::string& n) const {
  return get_as<std::string>(*this, n, "a string");
}
const std::vector<int64_t>& Attrs::get_ints(const std::string& n) const {
  return get_as<std::vector<int64_t>>(*this, n, "an int list");
}
const std::vector<double>& Attrs::get_floats(const std::string& n) const {
  return get_as<std::vector<double>>(*this, n, "a float list");
}
DType Attrs::get_dtype(const std::string& n) const { return get_as<DType>(*this, n, "a dtype"); }
bool Attrs::is_none(const std::string& n) const {
  auto it = values_.find(n);
  return it != values_.end() && std::holds_alternative<std::monostate>(it->second);
}
std::optional<int64_t> Attrs::get_opt_int(const std::string& n) const {
  if (!has(n) || is_none(n)) return std::nullopt;
  return get_int(n);
}
std::optional<DType> Attrs::get_opt_dtype(const std::string& n) const {
  if (!has(n) || is_none(n)) return std::nullopt;
  return get_dtype(n);
}

}  // namespace ampfuse::ir
