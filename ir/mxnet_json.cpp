// MXNet symbol JSON import (export lives in mxnet_json_export.cpp).
//
// One Importer reads one file front to back: the JSON text, a scan that refuses INT8 graphs
// before anything else can complain about their ops, the nodes in file order (MXNet writes
// them topologically, so every input must name an earlier node), the heads, then what
// MXNet's loader makes of them (one variable per name, only what the heads reach), variable
// roles and types, and finally type inference. Pre-0.9 files left out auxiliary states: as
// MXNet's loader does, the importer adds a variable "<node>_<slot>" for each, just before its
// consumer.
#include "ir/mxnet_json.h"

#include "ir/error.h"
#include "ir/input_file.h"
#include "ir/mxnet_hidden_keys.h"
#include "ir/mxnet_type_flags.h"
#include "ir/op_registry.h"
#include "ir/text_lexer.h"
#include "ir/type_inference.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace ampfuse::ir {

namespace {

using json = nlohmann::json;

// MXNet 2.0 reads shapes with NumPy semantics: -1 is an unknown extent, 0 a real one and
// "()" a scalar. Before it, 0 meant unknown and "()" an unknown shape.
constexpr int64_t kFirstNumpyShapeVersion = 20000;
constexpr int64_t kUnknownExtent = -1;
// Files before 0.9.0 list no auxiliary-state inputs (BatchNorm's moving mean and variance).
constexpr int64_t kFirstVersionWithAuxInputs = 900;

// Symbol attributes (AttrScope, Symbol._set_attr, Gluon's parameter hints) share the map with
// op parameters in the file but belong to the trainer, the executor or the user. MXNet's own
// list ("hidden keys"), also as a suffix: weight_lr_mult is the lr_mult of input "weight".
bool is_symbol_attribute(std::string_view key) {
  if (key.starts_with("__")) return true;
  for (std::string_view hidden : kMxnetHiddenKeys) {
    if (key == hidden) return true;
    if (key.size() > hidden.size() + 1 && key.ends_with(hidden) && key[key.size() - hidden.size() - 1] == '_')
      return true;
  }
  return false;
}

bool is_quantization_op(std::string_view op) {
  return op.starts_with("_contrib_quantize") || op.starts_with("_contrib_requantize") ||
         op.starts_with("_contrib_dequantize");
}

// MKLDNN / oneDNN fused subgraph nodes; with quantized=true they run INT8 kernels.
bool is_quantized_fused_node(std::string_view op, const json& jn) {
  if (!op.starts_with("_sg_mkldnn_") && !op.starts_with("_sg_onednn_")) return false;
  auto attrs = jn.find("attrs");
  if (attrs == jn.end() || !attrs->is_object()) return false;
  auto q = attrs->find("quantized");
  return q != attrs->end() && q->is_string() && (*q == "true" || *q == "True" || *q == "1");
}

// A JSON value short enough to quote in a message.
std::string brief(const json& j) {
  std::string s = j.dump();
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

// nlohmann's message minus its "[json.exception.parse_error.101] " tag.
std::string_view parse_error_reason(std::string_view what) {
  const size_t tag_end = what.find("] ");
  return tag_end == std::string_view::npos ? what : what.substr(tag_end + 2);
}

class Importer {
 public:
  Importer(std::string_view source, const MxnetImportOptions& opts)
      : source_(source), opts_(opts), registry_(OpRegistry::global()) {}

  Graph run(std::string_view text) {
    try {
      return run_checked(text);
    } catch (const json::exception& e) {
      // Every access is type-checked first; this keeps a missed case an error, not a crash.
      fail("{}: {}", source_, e.what());
    }
  }

 private:
  Graph run_checked(std::string_view text) {
    const json root = parse(text);
    if (!root.is_object())
      fail("{}: the top level is {}, not an object: not an MXNet symbol file", source_, root.type_name());
    auto nodes = root.find("nodes");
    if (nodes == root.end() || !nodes->is_array())
      fail("{}: no \"nodes\" list: not an MXNet symbol file", source_);
    version_ = read_version(root);
    refuse_int8(*nodes);
    total_nodes_ = nodes->size();
    for (size_t i = 0; i < nodes->size(); ++i) read_node(i, (*nodes)[i]);
    read_heads(root);
    check_arg_nodes(root);
    upgrade_mxnet_hidden_keys(g_);  // as MXNet's loader: "ctx_group" -> "__ctx_group__"
    keep_what_heads_reach();
    assign_roles();
    type_variables();
    if (opts_.infer && inference_can_start()) infer();
    return std::move(g_);
  }

  json parse(std::string_view text) {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      fail("{}: invalid JSON at byte {}: {}", source_, e.byte, parse_error_reason(e.what()));
    }
  }

  // {"attrs": {"mxnet_version": ["int", 10900]}}; legacy files have none (version 0).
  static int64_t read_version(const json& root) {
    auto attrs = root.find("attrs");
    if (attrs == root.end() || !attrs->is_object()) return 0;
    auto v = attrs->find("mxnet_version");
    if (v == attrs->end() || !v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer()) return 0;
    return (*v)[1].get<int64_t>();
  }

  void refuse_int8(const json& nodes) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& jn = nodes[i];
      if (!jn.is_object()) continue;  // read_node reports it
      auto op = jn.find("op");
      if (op == jn.end() || !op->is_string()) continue;
      const std::string& name = op->get_ref<const std::string&>();
      if (is_quantization_op(name) || is_quantized_fused_node(name, jn)) {
        auto node_name = jn.find("name");
        fail("{}: INT8 quantized graphs are not supported: node {} '{}' uses {}", source_, i,
             node_name != jn.end() && node_name->is_string() ? node_name->get<std::string>() : "", name);
      }
    }
  }

  std::string read_string_field(const json& jn, const char* key, size_t i) {
    auto it = jn.find(key);
    if (it == jn.end()) fail("{}: node {} has no \"{}\"", source_, i, key);
    if (!it->is_string()) fail("{}: node {}: \"{}\" is {}, not a string", source_, i, key, brief(*it));
    return it->get<std::string>();
  }

  void read_node(size_t i, const json& jn) {
    if (!jn.is_object()) fail("{}: node {} is {}, not an object", source_, i, brief(jn));
    const std::string op = read_string_field(jn, "op", i);
    const std::string name = read_string_field(jn, "name", i);
    const std::string label = fmt::format("node {} '{}' ({})", i, name, op);
    with_context(fmt::format("{}: {}", source_, label), [&] {
      if (op == "null")
        read_variable(jn, name);
      else
        read_op(jn, op, name, i);
    });
    labels_.push_back(label);
  }

  void read_variable(const json& jn, const std::string& name) {
    if (!input_list(jn).empty()) fail("a variable (op \"null\") cannot have inputs");
    file_to_graph_.push_back(add_variable(name, read_raw_attrs(jn)));  // a variable has no op parameters
  }

  int32_t add_variable(const std::string& name, std::map<std::string, std::string> hints) {
    Node n;
    n.op = kVarOp;
    n.name = name;
    n.hints = std::move(hints);
    output_counts_.push_back(1);
    return g_.add(std::move(n));
  }

  void read_op(const json& jn, const std::string& op, const std::string& name, size_t i) {
    const OpDef& def = registry_.resolve(op);
    Node n;
    n.op = def.name;  // canonical: an alias (`cast`) ends here
    n.name = name;
    const auto raw = read_raw_attrs(jn);
    std::map<std::string, std::string> params;
    for (const auto& [key, text] : raw) (is_symbol_attribute(key) ? n.hints : params)[key] = text;
    n.attrs = parse_attrs(def, params);
    const json& inputs = input_list(jn);
    const size_t expected = static_cast<size_t>(def.input_count(n.attrs));
    for (size_t k = 0; k < inputs.size() && k < expected; ++k)
      n.inputs.push_back(read_entry(inputs[k], fmt::format("input {}", k), i));
    if (version_ < kFirstVersionWithAuxInputs) {
      // MXNet's upgrader gives the new variable the node's whole attribute map.
      for (size_t k = inputs.size(); k < expected; ++k) {
        const std::string var = name.empty() ? def.slot(k, n.attrs).name : name + "_" + def.slot(k, n.attrs).name;
        const int32_t id = add_variable(var, raw);
        labels_.push_back(fmt::format("variable '{}' (added as input {} of node {} '{}')", var, k, i, name));
        n.inputs.push_back({id, 0});
      }
    }
    if (inputs.size() > expected || n.inputs.size() < expected) {
      std::vector<std::string> slots;
      for (size_t k = 0; k < expected; ++k) slots.push_back(def.slot(k, n.attrs).name);
      fail("needs {} input{} ({}) but the file gives {}", expected, expected == 1 ? "" : "s",
           fmt::join(slots, ", "), inputs.size());
    }
    output_counts_.push_back(def.output_count(n.attrs));
    file_to_graph_.push_back(g_.add(std::move(n)));
  }

  static const json& input_list(const json& jn) {
    static const json kNone = json::array();
    auto it = jn.find("inputs");
    if (it == jn.end()) return kNone;
    if (!it->is_array()) fail("\"inputs\" is {}, not a list", brief(*it));
    return *it;
  }

  // "attrs" (MXNet >= 1.0), "attr" (0.9-0.12), "param" (0.8; with symbol attributes under
  // "attr" beside it): one map, whatever the file spreads it over.
  static std::map<std::string, std::string> read_raw_attrs(const json& jn) {
    std::map<std::string, std::string> raw;
    for (const char* section : {"attrs", "attr", "param"}) {
      auto it = jn.find(section);
      if (it == jn.end() || it->is_null()) continue;
      if (!it->is_object()) fail("\"{}\" is {}, not an object", section, brief(*it));
      for (const auto& [key, value] : it->items()) {
        if (!value.is_string())
          fail("attribute '{}' is {}, but MXNet writes every attribute value as a string", key, brief(value));
        const std::string& text = value.get_ref<const std::string&>();
        auto [pos, inserted] = raw.emplace(key, text);
        if (!inserted && pos->second != text)
          fail("attribute '{}' is given twice, as '{}' and as '{}' (in \"{}\")", key, pos->second, text, section);
      }
    }
    return raw;
  }

  // [node, output] or [node, output, version]; `consumer` is the reading node's index, or
  // the node count for heads (which may read any node).
  ValueRef read_entry(const json& e, const std::string& what, size_t consumer) {
    bool well_formed = e.is_array() && (e.size() == 2 || e.size() == 3);
    for (size_t k = 0; well_formed && k < e.size(); ++k) well_formed = e[k].is_number_integer();
    if (!well_formed) fail("{} is {}: an entry is [node, output] or [node, output, version] of integers", what, brief(e));
    const bool id_negative = e[0].is_number_integer() && !e[0].is_number_unsigned() && e[0].get<int64_t>() < 0;
    if (id_negative || e[0].get<uint64_t>() >= total_nodes_)
      fail("{} refers to node {}, but the file has {} nodes", what, e[0].dump(), total_nodes_);
    const size_t file_id = e[0].get<size_t>();
    if (file_id >= consumer)
      fail("{} refers to node {}, which does not come before it: the nodes form a cycle or are not in topological order",
           what, file_id);
    const int32_t id = file_to_graph_[file_id];
    const int outputs = output_counts_[id];
    const bool index_negative = !e[1].is_number_unsigned() && e[1].get<int64_t>() < 0;
    if (index_negative || e[1].get<uint64_t>() >= static_cast<uint64_t>(outputs))
      fail("{} reads output {} of {}, which has {} output{}", what, e[1].dump(), labels_[id], outputs,
           outputs == 1 ? "" : "s");
    return {id, e[1].get<int32_t>()};
  }

  void read_heads(const json& root) {
    auto heads = root.find("heads");
    // MXNet's loader requires the field too. Guessing the outputs (the ops nobody reads)
    // would run a damaged file, or a fragment of one, as if it were a model.
    if (heads == root.end())
      fail("{}: no \"heads\": a symbol file lists the graph outputs there, as [node, output, version] entries",
           source_);
    if (!heads->is_array() || heads->empty())
      fail("{}: \"heads\" is {}: it must list the graph outputs as [node, output] entries", source_, brief(*heads));
    with_context(source_, [&] {
      for (size_t k = 0; k < heads->size(); ++k)
        g_.outputs.push_back(read_entry((*heads)[k], fmt::format("heads entry {}", k), total_nodes_));
    });
  }

  // MXNet rebuilds arg_nodes on load; a wrong list means a damaged or hand-edited file.
  void check_arg_nodes(const json& root) const {
    auto args = root.find("arg_nodes");
    if (args == root.end()) return;
    if (!args->is_array()) fail("{}: \"arg_nodes\" is {}, not a list", source_, brief(*args));
    for (size_t k = 0; k < args->size(); ++k) {
      const json& e = (*args)[k];
      if (!e.is_number_unsigned() || e.get<uint64_t>() >= total_nodes_)
        fail("{}: arg_nodes entry {} is {}, not the index of one of the {} nodes", source_, k, brief(e), total_nodes_);
      const int32_t id = file_to_graph_[e.get<size_t>()];
      if (!g_.nodes[id].is_var()) fail("{}: arg_nodes entry {} names {}, which is not a variable", source_, k, labels_[id]);
    }
  }

  // The graph MXNet binds: a symbol is what its heads reach, so nodes no head reaches are
  // dropped (they need no input shapes, as in MXNet, where list_arguments() leaves their
  // variables out), and variables that share a name are one variable, bound to one array
  // (MXNet binds arguments by name). Every node was read and checked before this.
  void keep_what_heads_reach() {
    std::vector<int32_t> same_as(g_.nodes.size());  // the variable each node stands for
    std::map<std::string, int32_t> first;
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      same_as[i] = i;
      if (!g_.nodes[i].is_var()) continue;
      auto [it, fresh] = first.emplace(g_.nodes[i].name, i);
      if (fresh) continue;
      merge_hints(it->second, i);
      same_as[i] = it->second;
    }
    for (Node& n : g_.nodes)
      for (ValueRef& in : n.inputs) in.node = same_as[in.node];
    for (ValueRef& o : g_.outputs) o.node = same_as[o.node];

    std::vector<bool> reached(g_.nodes.size(), false);
    for (ValueRef o : g_.outputs) reached[o.node] = true;
    for (int32_t i = static_cast<int32_t>(g_.nodes.size()) - 1; i >= 0; --i)
      if (reached[i])
        for (ValueRef in : g_.nodes[i].inputs) reached[in.node] = true;

    std::vector<int32_t> new_index(g_.nodes.size(), -1);
    Graph kept;
    std::vector<std::string> labels;
    std::vector<int> output_counts;
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      if (!reached[i]) {
        if (g_.nodes[i].is_var()) unreached_variables_.insert(g_.nodes[i].name);
        continue;
      }
      Node n = std::move(g_.nodes[i]);
      for (ValueRef& in : n.inputs) in.node = new_index[in.node];
      new_index[i] = kept.add(std::move(n));
      labels.push_back(std::move(labels_[i]));
      output_counts.push_back(output_counts_[i]);
    }
    for (ValueRef o : g_.outputs) kept.outputs.push_back({new_index[o.node], o.index});
    // A name reached through one of its variables is reached.
    for (const Node& n : kept.nodes)
      if (n.is_var()) unreached_variables_.erase(n.name);
    if (opts_.unreached_variables) *opts_.unreached_variables = unreached_variables_;
    g_ = std::move(kept);
    labels_ = std::move(labels);
    output_counts_ = std::move(output_counts);
    file_to_graph_.clear();  // file indices mean nothing from here on
  }

  // Variable `dup` has the name of variable `var` and becomes it: their hints (a __shape__,
  // a __dtype__) describe one array and must agree.
  void merge_hints(int32_t var, int32_t dup) {
    Node& v = g_.nodes[var];
    for (const auto& [key, text] : g_.nodes[dup].hints) {
      auto [it, fresh] = v.hints.emplace(key, text);
      if (!fresh && it->second != text)
        fail("{}: {} and {} are one variable (MXNet binds variables by name), but their '{}' hints differ: '{}' "
             "and '{}'",
             source_, labels_[var], labels_[dup], key, it->second, text);
    }
  }

  // A variable feeding a weight slot anywhere is a param even if it also feeds data slots
  // (tied embeddings); one feeding an aux slot is aux (MXNet's auxiliary states). Casts pass
  // on the role of the slots they feed: a converted model reads its weights through amp_cast
  // (or amp_multicast), and they are weights all the same.
  void assign_roles() {
    std::map<ValueRef, VarRole> fed;  // the strongest role among the slots a value reaches
    for (int32_t i = static_cast<int32_t>(g_.nodes.size()) - 1; i >= 0; --i) {
      Node& n = g_.nodes[i];
      if (n.is_var()) {
        n.role = std::max(n.role, fed[{i, 0}]);
        continue;
      }
      const OpDef& def = registry_.get(n.op);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const SlotRole slot = def.slot(k, n.attrs).role;
        VarRole role = slot == SlotRole::aux ? VarRole::aux : slot == SlotRole::param ? VarRole::param : VarRole::input;
        if (def.is_cast) role = fed[{i, 0}];
        if (def.is_multicast) role = fed[{i, static_cast<int32_t>(k)}];
        VarRole& r = fed[n.inputs[k]];
        r = std::max(r, role);
      }
    }
  }

  std::string input_names() const {
    std::vector<std::string> names;
    for (const Node& n : g_.nodes)
      if (n.is_var() && n.role == VarRole::input) names.push_back(n.name);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  template <class Map>
  void check_option_names(const Map& m, std::string_view option) const {
    for (const auto& [name, _] : m)
      if (!g_.find_var(name) && !unreached_variables_.count(name))
        fail("{}: {} names '{}', which is not a variable of the graph (its inputs: {})", source_, option, name,
             input_names());
  }

  // nullopt: nothing known. Otherwise the extents, kUnknownExtent where the file leaves one open.
  std::optional<Shape> read_shape_hint(const Node& v) const {
    auto it = v.hints.find("__shape__");
    if (it == v.hints.end()) return std::nullopt;
    const bool numpy = version_ >= kFirstNumpyShapeVersion;
    const AttrSpec spec{"__shape__", AttrKind::IntList, std::nullopt, {}};
    const AttrValue parsed = parse_mxnet_attr(spec, it->second);
    Shape shape = std::get<std::vector<int64_t>>(parsed);
    if (shape.empty() && !numpy) return std::nullopt;
    for (int64_t& d : shape) {
      if (d == kNoneIndex || d == -1 || (d == 0 && !numpy)) d = kUnknownExtent;
      else if (d < 0) fail("__shape__ '{}' has a negative extent", it->second);
    }
    return shape;
  }

  std::optional<DType> read_dtype_hint(const Node& v) const { return variable_dtype_hint(v); }

  static bool fully_known(const Shape& s) {
    for (int64_t d : s)
      if (d == kUnknownExtent) return false;
    return true;
  }

  // Options first, then hints. A typed variable's hints are spent (export writes them back
  // from the type); partial ones stay until inference can check them.
  void type_variables() {
    check_option_names(opts_.input_shapes, "input_shapes");
    check_option_names(opts_.input_dtypes, "input_dtypes");
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& v = g_.nodes[i];
      if (!v.is_var()) continue;
      with_context(fmt::format("{}: {}", source_, labels_[i]), [&] {
        std::optional<Shape> shape = read_shape_hint(v);
        std::optional<DType> dtype = read_dtype_hint(v);
        if (auto s = opts_.input_shapes.find(v.name); s != opts_.input_shapes.end()) shape = s->second;
        if (auto t = opts_.input_dtypes.find(v.name); t != opts_.input_dtypes.end()) dtype = t->second;
        if (shape && !fully_known(*shape) && opts_.open_extent_placeholder && v.role == VarRole::input &&
            !opts_.input_shapes.count(v.name)) {
          if (opts_.open_shape_hints) (*opts_.open_shape_hints)[v.name] = v.hints.at("__shape__");
          for (int64_t& d : *shape)
            if (d == kUnknownExtent) d = *opts_.open_extent_placeholder;
        }
        if (!shape || !fully_known(*shape)) return;
        num_elements(*shape);  // rejects negative extents and overflow from the options
        v.outputs = {TensorType{dtype.value_or(DType::f32), *shape}};
        v.hints.erase("__shape__");
        v.hints.erase("__dtype__");
      });
    }
  }

  // Inference starts from a typed input. The other inputs may be left out when consumers
  // type them (SoftmaxOutput its label); a graph without inputs needs every variable typed.
  bool inference_can_start() const {
    bool has_input = false, all_typed = true;
    for (const Node& n : g_.nodes) {
      if (!n.is_var()) continue;
      if (n.role == VarRole::input) {
        has_input = true;
        if (!n.outputs.empty()) return true;
      }
      all_typed = all_typed && !n.outputs.empty();
    }
    return !has_input && all_typed;
  }

  void infer() {
    std::vector<std::string> untyped;
    for (const Node& n : g_.nodes)
      if (n.is_var() && n.role == VarRole::input && n.outputs.empty()) untyped.push_back(n.name);
    try {
      infer_types(g_);
    } catch (const Error& e) {
      // The failing node may be far from the input whose shape is missing: name it too.
      if (untyped.empty()) fail("{}: {}", source_, e.what());
      fail("{}: {} (inputs given no shape: {})", source_, e.what(), fmt::join(untyped, ", "));
    }
    settle_shape_hints();
  }

  // Inference typed the variables whose hints were partial: they must agree.
  void settle_shape_hints() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& v = g_.nodes[i];
      if (!v.is_var() || v.outputs.empty()) continue;
      with_context(fmt::format("{}: {}", source_, labels_[i]), [&] {
        const TensorType& t = v.outputs[0];
        if (auto hint = read_shape_hint(v)) {
          bool match = hint->size() == t.shape.size();
          for (size_t d = 0; match && d < hint->size(); ++d)
            match = (*hint)[d] == kUnknownExtent || (*hint)[d] == t.shape[d];
          if (!match) fail("__shape__ '{}' does not match the inferred type {}", v.hints.at("__shape__"), type_str(t));
        }
        if (auto dtype = read_dtype_hint(v); dtype && *dtype != t.dtype)
          fail("__dtype__ '{}' ({}) does not match the inferred type {}", v.hints.at("__dtype__"),
               mxnet_dtype_name(*dtype), type_str(t));
        v.hints.erase("__shape__");
        v.hints.erase("__dtype__");
      });
    }
  }

  std::string source_;
  const MxnetImportOptions& opts_;
  const OpRegistry& registry_;
  int64_t version_ = 0;
  size_t total_nodes_ = 0;
  Graph g_;
  std::vector<int32_t> file_to_graph_;  // graph index of each file node
  // By graph index:
  std::vector<std::string> labels_;  // "node 3 'conv0' (Convolution)", with the file's index
  std::vector<int> output_counts_;
  std::set<std::string> unreached_variables_;  // variables of the file that no head reaches
};

}  // namespace

std::optional<DType> variable_dtype_hint(const Node& v) {
  auto it = v.hints.find("__dtype__");
  if (it == v.hints.end()) return std::nullopt;
  if (auto named = parse_dtype(it->second)) return named;
  const AttrValue code = parse_mxnet_attr(AttrSpec{"__dtype__", AttrKind::Int, std::nullopt, {}}, it->second);
  if (std::get<int64_t>(code) == -1) return std::nullopt;  // MXNet's "not known yet"
  if (auto t = dtype_from_mxnet_flag(std::get<int64_t>(code))) return t;
  fail("__dtype__ '{}' is an MXNet type ampfuse does not support (it reads the type flags 0-7 and 12)", it->second);
}

Graph import_mxnet_json(std::string_view json_text, std::string_view source_name, const MxnetImportOptions& opts) {
  // The JSON parser stops at a NUL as at the end of the input ("unexpected end of input"),
  // which sends the user looking for a truncated file instead of a binary one.
  if (const size_t nul = json_text.find('\0'); nul != std::string_view::npos)
    fail("{}: a NUL byte at offset {}: a symbol file is JSON text", source_name, nul);
  try {
    return Importer(source_name, opts).run(json_text);
  } catch (const Error& e) {
    // Node names, op names and values from the file may hold line breaks (JSON's "\n").
    throw Error(text::one_line(e.what()));
  }
}

Graph load_mxnet_json_file(const std::string& path, const MxnetImportOptions& opts) {
  return import_mxnet_json(read_regular_file(path), path, opts);
}

}  // namespace ampfuse::ir
