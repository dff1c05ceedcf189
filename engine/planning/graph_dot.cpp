#include "engine/planning/graph_dot.h"

#include "ir/error.h"
#include "ir/op_registry.h"

#include <fmt/format.h>

#include <variant>

namespace ampfuse::engine {

namespace {

// A dot string literal: quotes and backslashes escaped, newlines as dot's centred "\n".
std::string quoted(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += c;
    else if (c == '\n') r += "\\n";
    else if (static_cast<unsigned char>(c) >= 0x20) r += c;
  }
  return r + "\"";
}

// Text for a Graphviz HTML-like label: markup characters as entities, newlines as breaks.
std::string html_escaped(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '&') r += "&amp;";
    else if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '"') r += "&quot;";
    else if (c == '\n') r += "<br/>";
    else if (static_cast<unsigned char>(c) >= 0x20) r += c;
  }
  return r;
}

std::string node_id(int32_t n) { return fmt::format("n{}", n); }

std::string value_label(const ir::TensorType& t) {
  return fmt::format("{} {}", ir::dtype_name(t.dtype), ir::shape_str(t.shape));
}

std::string fill_of(const ir::Node& n) {
  return n.outputs.empty() ? "#ffffff" : dtype_fill_colour(n.outputs[0].dtype);
}

bool is_weight(const ir::Node& n) { return n.is_var() && n.role != ir::VarRole::input; }

// Weights and aux states (BatchNorm statistics) have no node of their own: a network has
// several per op (resnet20's picture had 175 nodes, 112 of them weights: ellipses in the
// rank above their readers, each with a labelled edge, twice as wide as the network). Each
// reader names them in its own label instead, one small line per input slot,
//
//   +------------------------------------------+
//   |                  conv0                   |
//   |               Convolution                |
//   |  weight: conv0_weight f32 [16,3,3,3]     |   <- 7 pt
//   |  bias: conv0_bias f32 [16]               |
//   +------------------------------------------+
//
// unless the weight is a graph output or read by nothing (then nothing else would show it).
std::vector<bool> weights_shown_in_readers(const ir::Graph& g) {
  std::vector<bool> inline_weight(g.nodes.size(), false);
  for (const ir::Node& node : g.nodes)
    for (ir::ValueRef in : node.inputs) inline_weight[in.node] = is_weight(g.nodes[in.node]);
  for (ir::ValueRef out : g.outputs) inline_weight[out.node] = false;
  return inline_weight;
}

// The line that declares node n: label "name\nop" (variables: "name\nshape"), followed by
// a line for each weight it reads that has no node of its own.
std::string node_line(const ir::Graph& g, int32_t n, const std::vector<bool>& inline_weight, const std::string& shape,
                      const std::string& style, const std::string& indent) {
  const ir::Node& node = g.nodes[n];
  const std::string detail =
      !node.is_var() ? node.op : node.outputs.empty() ? "(untyped)" : ir::shape_str(node.outputs[0].shape);
  const std::string title = fmt::format("{}\n{}", node.name, detail);
  std::string weights;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ir::ValueRef in = node.inputs[i];
    if (!inline_weight[in.node]) continue;
    const ir::Node& w = g.nodes[in.node];
    const std::string type = w.outputs.empty() ? "(untyped)" : value_label(w.outputs[0]);
    const std::string slot = ir::OpRegistry::global().get(node.op).slot(i, node.attrs).name;
    weights += fmt::format("<br/><font point-size=\"7\">{}: {} {}</font>", html_escaped(slot), html_escaped(w.name),
                           html_escaped(type));
  }
  const std::string label = weights.empty() ? quoted(title) : fmt::format("<{}{}>", html_escaped(title), weights);
  return fmt::format("{}{} [label={}, shape={}, style={}, fillcolor=\"{}\"];\n", indent, node_id(n), label, shape,
                     quoted(style), fill_of(node));
}

}  // namespace

std::string dtype_fill_colour(ir::DType t) {
  switch (t) {
    case ir::DType::f32: return "#9ecae1";   // blue
    case ir::DType::bf16: return "#fdae6b";  // orange
    case ir::DType::f16: return "#a1d99b";   // green
    case ir::DType::f64: return "#bcbddc";   // purple
    case ir::DType::boolean: return "#fa9fb5";  // pink
    case ir::DType::i8:
    case ir::DType::u8:
    case ir::DType::i32:
    case ir::DType::i64: return "#d9d9d9";  // grey
  }
  return "#ffffff";
}

std::string graph_to_dot(const ir::Graph& g, const Plan& plan) {
  int kernels = 0, externals = 0, views = 0;
  for (const PlanStep& s : plan.steps) {
    kernels += std::holds_alternative<FusedKernel>(s);
    externals += std::holds_alternative<ExternalStep>(s);
    views += std::holds_alternative<ViewStep>(s);
  }
  std::string out = "digraph ampfuse {\n";
  out += fmt::format("  label={};\n  labelloc=t;\n", quoted(fmt::format("{} nodes: {} fused kernels, {} external ops, {} views",
                                                                     g.nodes.size(), kernels, externals, views)));
  out += "  rankdir=TB;\n  fontname=\"Helvetica\";\n";
  out += "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n";

  // Legend: one swatch per dtype family, chained so that Graphviz keeps them in a row.
  out += "  subgraph cluster_legend {\n    label=\"output dtype\";\n    style=\"rounded\";\n";
  const std::pair<const char*, ir::DType> legend[] = {{"f32", ir::DType::f32}, {"bf16", ir::DType::bf16},
                                                      {"f16", ir::DType::f16}, {"f64", ir::DType::f64},
                                                      {"int", ir::DType::i32}, {"bool", ir::DType::boolean}};
  for (const auto& [name, t] : legend)
    out += fmt::format("    legend_{} [label=\"{}\", shape=box, style=\"filled\", fillcolor=\"{}\"];\n", name, name,
                       dtype_fill_colour(t));
  out += "    legend_f32 -> legend_bf16 -> legend_f16 -> legend_f64 -> legend_int -> legend_bool [style=invis];\n";
  out += "  }\n";

  const std::vector<bool> inline_weight = weights_shown_in_readers(g);
  std::vector<bool> drawn(inline_weight);
  // Variables with a node of their own: inputs, and weights that no reader shows.
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    if (!node.is_var() || drawn[n]) continue;
    out += node_line(g, static_cast<int32_t>(n), inline_weight, "ellipse", is_weight(node) ? "filled,dotted" : "filled", "  ");
    drawn[n] = true;
  }
  // Steps: kernels as clusters, external ops and views on their own.
  int k = 0;
  for (const PlanStep& s : plan.steps) {
    if (const auto* kernel = std::get_if<FusedKernel>(&s)) {
      out += fmt::format("  subgraph cluster_{} {{\n    label={};\n    style=\"rounded,filled\";\n    fillcolor=\"#f5f5f5\";\n",
                         k, quoted(fmt::format("kernel {}: {} ops, {} bytes", k, kernel->nodes.size(), kernel_bytes(g, *kernel))));
      for (int32_t n : kernel->nodes) {
        out += node_line(g, n, inline_weight, "box", "rounded,filled", "    ");
        drawn[n] = true;
      }
      out += "  }\n";
      ++k;
    } else if (const auto* e = std::get_if<ExternalStep>(&s)) {
      out += node_line(g, e->node, inline_weight, "box", "filled,bold", "  ");
      drawn[e->node] = true;
    } else if (const auto* v = std::get_if<ViewStep>(&s)) {
      out += node_line(g, v->node, inline_weight, "box", "filled,dashed", "  ");
      drawn[v->node] = true;
    }
  }
  // Anything the plan left out (it should not) still appears, so no edge dangles.
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!drawn[n]) out += node_line(g, static_cast<int32_t>(n), inline_weight, "box", "filled,diagonals", "  ");

  // Edges, labelled with the value's type (weights in labels have none).
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (const ir::ValueRef& in : g.nodes[n].inputs) {
      if (inline_weight[in.node]) continue;
      const ir::Node& src = g.nodes.at(in.node);
      const std::string label = static_cast<size_t>(in.index) < src.outputs.size() ? value_label(src.outputs[in.index]) : "?";
      out += fmt::format("  {} -> {} [label={}];\n", node_id(in.node), node_id(static_cast<int32_t>(n)), quoted(label));
    }
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const ir::ValueRef v = g.outputs[o];
    const ir::Node& src = g.nodes.at(v.node);
    const std::string label = static_cast<size_t>(v.index) < src.outputs.size() ? value_label(src.outputs[v.index]) : "?";
    out += fmt::format("  out{} [label={}, shape=plaintext];\n", o, quoted(fmt::format("output {}", o)));
    out += fmt::format("  {} -> out{} [label={}];\n", node_id(v.node), o, quoted(label));
  }
  out += "}\n";
  return out;
}

}  // namespace ampfuse::engine
