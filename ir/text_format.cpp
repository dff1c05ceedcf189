// The printer half of ir/text_format.h (the parser is text_parser.cpp).
#include "ir/text_format.h"

#include "ir/error.h"
#include "ir/text_lexer.h"

#include <map>
#include <utility>

namespace ampfuse::ir {

namespace {

// The ~N occurrence number of each node among the nodes sharing its name.
std::vector<int> occurrence_numbers(const Graph& g) {
  std::map<std::string, int> seen;
  std::vector<int> dup;
  for (const Node& n : g.nodes) dup.push_back(++seen[n.name]);
  return dup;
}

std::string attr_name(const std::string& name) { return text::is_bare_name(name) ? name : text::quote(name); }

// Strings take the lexer's quoting (format_ir_attr leaves control characters raw).
std::string attr_value(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return text::quote(*s);
  return format_ir_attr(v);
}

class Printer {
 public:
  explicit Printer(const Graph& g) : g_(g), dup_(occurrence_numbers(g)) {}

  std::string run() {
    out_ = "graph {\n";
    for (size_t i = 0; i < g_.nodes.size(); ++i) node(i);
    std::vector<std::string> outs;
    for (ValueRef v : g_.outputs) outs.push_back(ref(v));
    out_ += outs.empty() ? "  return\n" : fmt::format("  return {}\n", fmt::join(outs, ", "));
    return out_ + "}\n";
  }

 private:
  std::string def(size_t i) const {
    const std::string& name = g_.nodes[i].name;
    std::string s = "%" + (text::is_bare_name(name) ? name : text::quote(name));
    if (dup_[i] > 1) s += fmt::format("~{}", dup_[i]);
    return s;
  }

  // A reference to a node that does not exist prints in a form the parser rejects, so
  // that printing a broken graph (for an error message) never throws.
  std::string ref(ValueRef v) const {
    if (v.node < 0 || static_cast<size_t>(v.node) >= g_.nodes.size()) return fmt::format("%<missing node {}>", v.node);
    std::string s = def(v.node);
    if (v.index != 0) s += fmt::format(":{}", v.index);
    return s;
  }

  void node(size_t i) {
    const Node& n = g_.nodes[i];
    out_ += "  " + def(i) + " = ";
    if (n.is_var()) {
      out_ += fmt::format("var {}", var_role_name(n.role));
    } else {
      std::vector<std::string> ins;
      for (ValueRef v : n.inputs) ins.push_back(ref(v));
      out_ += fmt::format("{}({})", text::is_bare_name(n.op) ? n.op : text::quote(n.op), fmt::join(ins, ", "));
      if (!n.attrs.values().empty()) {
        std::vector<std::string> items;
        for (const auto& [k, v] : n.attrs.values()) items.push_back(attr_name(k) + "=" + attr_value(v));
        out_ += fmt::format(" {{{}}}", fmt::join(items, ", "));
      }
    }
    if (!n.hints.empty()) {
      std::vector<std::string> items;
      for (const auto& [k, v] : n.hints) items.push_back(text::quote(k) + ":" + text::quote(v));
      out_ += fmt::format(" hints={{{}}}", fmt::join(items, ", "));
    }
    if (n.outputs.size() == 1) {
      out_ += " : " + type_str(n.outputs[0]);
    } else if (n.outputs.size() > 1) {
      std::vector<std::string> types;
      for (const TensorType& t : n.outputs) types.push_back(type_str(t));
      out_ += fmt::format(" : ({})", fmt::join(types, ", "));
    }
    out_ += "\n";
  }

  const Graph& g_;
  std::vector<int> dup_;
  std::string out_;
};

}  // namespace

std::string print_graph(const Graph& g) { return Printer(g).run(); }

}  // namespace ampfuse::ir
