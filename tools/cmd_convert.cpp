// `ampfuse convert MODEL.json --amp bf16|fp16 -o OUT.json`: the AMP passes over a model,
// written back as MXNet symbol JSON (amp_cast / amp_multicast spelled as MXNet 1.9 loads them),
// and with --params-out its weights as the converted model stores them (a .params file).
#include "engine/lower.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "tools/amp_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/model_steps.h"
#include "tools/params_input.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <optional>

namespace ampfuse::tools {

namespace {

struct ConvertOptions {
  std::string model;
  std::vector<std::string> shapes;
  AmpArgs amp;
  std::string output;
  std::string params, params_out;  // --params FILE.params, --params-out OUT.params
  bool json = false;
};

// The converted graph does not depend on the batch, nor on any extent a model's __shape__
// hint leaves open (MXNet's convert_symbol asks for no shapes): such an input needs no
// --shape. It is converted with the open extents set to 1 and again set to 2; the two
// results must be the same file (then nothing depends on those extents), which keeps the
// hint as the model had it. An input with no hint at all (Gluon's export) takes the shape
// the op reading it implies (implied_input_shape: a first convolution's rank and, from its
// weight, channels), its batch 1 and then 2, its other extents 512 and then 1024: what
// image networks are built for or larger, so that strided, unpadded and fixed-size pooling
// layers keep positive extents (types only: nothing is allocated). An input whose reader
// implies no rank (a transpose, say) is tried at every rank from 1 to kMaxTriedRank, each
// extent as above: the ranks at which the model converts must all give the same file. A
// graph that cannot be typed so, or whose result differs, names the inputs to give --shape
// for.
constexpr int64_t kUnhintedExtent = 512;
constexpr int kMaxTriedRank = 5;

// Types the inputs that have no __shape__ hint and no --shape with implied_input_shape's
// shape for `placeholder`, or where that implies nothing and `rank` > 0, with `rank` extents
// (the batch `placeholder`, the others kUnhintedExtent * placeholder); each goes into
// `open_hints` with no hint (""). Returns how many took `rank`.
int type_unhinted_inputs(ir::Graph& g, const std::string& path, const std::map<std::string, ir::Shape>& shapes,
                         const ParamsFile* params, int64_t placeholder, int rank,
                         std::map<std::string, std::string>& open_hints) {
  int ranked = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    ir::Node& v = g.nodes[i];
    if (!v.is_var() || v.role != ir::VarRole::input || !v.outputs.empty() || v.hints.count("__shape__") ||
        shapes.count(v.name))
      continue;
    std::optional<ir::Shape> shape = implied_input_shape(g, i, params, placeholder, kUnhintedExtent * placeholder);
    if (!shape && rank > 0) {
      shape = ir::Shape(static_cast<size_t>(rank), kUnhintedExtent * placeholder);
      (*shape)[0] = placeholder;
      ++ranked;
    }
    if (!shape) continue;
    const ir::DType dtype = with_context(fmt::format("{}: variable '{}'", path, v.name), [&] {
      return ir::variable_dtype_hint(v).value_or(ir::DType::f32);
    });
    v.outputs = {ir::TensorType{dtype, *shape}};
    v.hints.erase("__dtype__");
    open_hints[v.name] = "";
  }
  return ranked;
}

ConvertedModel convert_model_file(const std::string& path, const std::map<std::string, ir::Shape>& shapes,
                                  const engine::AmpOptions& amp, const ParamsFile* params) {
  // How the inputs that --shape does not type were typed, for messages: "data (__shape__
  // (0,3,224,224), 0 as 1)", "data (no __shape__ hint, as f32[1,3,512,512])".
  auto typed_as = [&](const ir::Graph& g, const std::map<std::string, std::string>& open_hints, int64_t placeholder) {
    std::vector<std::string> names;
    for (const auto& [name, hint] : open_hints) {
      if (shapes.count(name)) continue;
      const std::optional<int32_t> v = g.find_var(name);
      if (!hint.empty())
        names.push_back(fmt::format("{} (__shape__ {}, its open extents as {})", name, hint, placeholder));
      else if (v && !g.nodes[*v].outputs.empty())
        names.push_back(fmt::format("{} (no __shape__ hint, as {})", name, ir::type_str(g.nodes[*v].outputs[0])));
    }
    return names;
  };
  // `ranked`: how many inputs took `rank` (0 when none did, or rank is 0).
  auto convert_with = [&](int64_t placeholder, int rank, std::map<std::string, std::string>& open_hints,
                          std::vector<std::string>& typed, int* ranked = nullptr) {
    std::set<std::string> unreached;
    ir::Graph g = load_model_file_with_placeholder(path, &unreached, placeholder, &open_hints);
    const int took_rank = type_unhinted_inputs(g, path, shapes, params, placeholder, rank, open_hints);
    if (ranked) *ranked = took_rank;
    typed = typed_as(g, open_hints, placeholder);
    try {
      return convert_model(std::move(g), unreached, shapes, amp, params, open_hints);
    } catch (const Error& e) {
      if (typed.empty()) throw;
      fail("{} (typed without --shape: {}; give their shapes, --shape NAME=D0,D1,...)", e.what(),
           fmt::join(typed, ", "));
    }
  };
  // The rank for inputs no reader implies one for: 0 when the model converts without.
  int rank = 0;
  std::map<std::string, std::string> open_hints;
  std::vector<std::string> typed;
  std::optional<ConvertedModel> c;
  std::string unranked_error;
  try {
    c = convert_with(1, 0, open_hints, typed);
  } catch (const Error& e) {
    unranked_error = e.what();
  }
  if (!c) {
    // Every rank at which it converts must give the same file.
    int ranked = 0;
    for (int r = 1; r <= kMaxTriedRank; ++r) {
      std::map<std::string, std::string> hints;
      std::vector<std::string> typed_r;
      std::optional<ConvertedModel> at_rank;
      try {
        at_rank = convert_with(1, r, hints, typed_r, &ranked);
      } catch (const Error&) {
      }
      if (ranked == 0) fail("{}", unranked_error);  // every input had a shape: a rank changes nothing
      if (!at_rank) continue;
      if (!c) {
        c = std::move(at_rank);
        rank = r;
        open_hints = std::move(hints);
        typed = std::move(typed_r);
      } else if (at_rank->json != c->json) {
        fail("the converted model depends on the rank of inputs no op implies one for: typed without --shape as {}, "
             "and again as {}, it converts differently: give their shapes (--shape NAME=D0,D1,...)",
             fmt::join(typed, ", "), fmt::join(typed_r, ", "));
      }
    }
    if (!c)
      fail("{} (no op implies the rank of {} input(s) without a __shape__ hint, and typed at every rank from 1 to {} "
           "the model does not convert either)",
           unranked_error, ranked, kMaxTriedRank);
  }
  if (typed.empty()) return std::move(*c);
  std::map<std::string, std::string> again;
  std::vector<std::string> typed_again;
  if (convert_with(2, rank, again, typed_again).json != c->json)
    fail("the converted model depends on the shapes of inputs the file leaves open: typed without --shape as {}, "
         "and again as {}, it converts differently: give their shapes (--shape NAME=D0,D1,...)",
         fmt::join(typed, ", "), fmt::join(typed_again, ", "));
  return std::move(*c);
}

int run_convert(const ConvertOptions& o) {
  const engine::AmpOptions amp = o.amp.convert_options();
  if (!o.params_out.empty() && o.params.empty()) fail("--params-out {}: needs --params, the weights to convert", o.params_out);
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  const std::optional<ParamsFile> params =
      o.params.empty() ? std::nullopt : std::optional<ParamsFile>(read_params_file(o.params));
  const ConvertedModel c = convert_model_file(o.model, shapes, amp, params ? &*params : nullptr);
  const ir::Graph& converted = c.graph;
  const engine::AmpStats& stats = c.stats;
  const size_t op_nodes_before = c.nodes_before;
  const std::string& text = c.json;
  std::ofstream out(o.output, std::ios::binary);
  if (!out) fail("-o {}: cannot open the file for writing", o.output);
  out << text;
  out.close();
  if (!out) fail("-o {}: writing failed", o.output);
  if (!o.params_out.empty())
    with_context("--params-out", [&] {
      runtime::write_mxnet_params(o.params_out, params_for_converted_model(*params, converted));
    });

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["output"] = o.output;
    j["params_output"] = o.params_out.empty() ? nlohmann::json() : nlohmann::json(o.params_out);
    j["target"] = o.amp.amp;
    j["nodes_before"] = op_nodes_before;
    j["nodes_after"] = converted.nodes.size();
    j["casts_inserted"] = stats.casts_inserted;
    j["casts_removed"] = stats.casts_removed;
    j["casts_final"] = stats.casts_final;
    j["params_offline"] = stats.params_offline;
    j["lp16_nodes"] = stats.lp16_nodes;
    j["fp32_nodes"] = stats.fp32_nodes;
    j["op_classes"] = stats.class_counts;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{} -> {} ({})\n", o.model, o.output, o.amp.amp);
    if (!o.params_out.empty()) fmt::print("params:  {} -> {}\n", o.params, o.params_out);
    fmt::print("casts:   {} inserted, {} removed by folding, {} in the result\n", stats.casts_inserted,
               stats.casts_removed, stats.casts_final);
    fmt::print("nodes:   {} in {}, {} in f32 ({} weights stored in {})\n", stats.lp16_nodes, o.amp.amp,
               stats.fp32_nodes, stats.params_offline, o.amp.amp);
    std::string classes;
    for (const auto& [cls, n] : stats.class_counts) classes += fmt::format(" {} {}", cls, n);
    fmt::print("classes:{}\n", classes);
  }
  return 0;
}

}  // namespace

Command add_convert_command(CLI::App& parent) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "convert", "Convert a model for automatic mixed precision and write it as MXNet symbol JSON.");
  cmd->add_option("model", o->model, "MXNet *-symbol.json file")
      ->check(non_empty_path())
      ->required()
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  add_amp_args(*cmd, o->amp, "Low-precision type to convert to", true, "bf16|fp16")->required();
  cmd->add_option("-o,--output", o->output, "Where to write the converted symbol JSON")
      ->check(non_empty_path())
      ->required()
      ->type_name("OUT.json");
  cmd->add_option("--params", o->params,
                  "The model's weights, an MXNet .params file: checked against the model (names, shapes, dtypes)")
      ->check(non_empty_path())
      ->type_name("FILE.params");
  cmd->add_option("--params-out", o->params_out,
                  "Write the weights for the converted model (needs --params): same names and order, weights stored "
                  "in low precision (--cast-params-offline) cast, as MXNet's convert_model does")
      ->check(non_empty_path())
      ->type_name("OUT.params");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, output, params_output, target, nodes_before, nodes_after, casts_inserted, "
                "casts_removed, casts_final, params_offline, lp16_nodes, fp32_nodes, op_classes}");
  cmd->footer("The steps: infer types, amp-convert, cast-fold, layout-optimize (--layout), dce (engine/lower.h).\n"
              "The result is MXNet 1.x symbol JSON, amp_cast / amp_multicast spelled as MXNet 1.9 loads them.");
  return {cmd, [o] { return run_convert(*o); }};
}

}  // namespace ampfuse::tools
