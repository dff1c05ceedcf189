// ampfuse._ampfuse: the native half of the Python package (python/ampfuse/__init__.py holds
// the other half: argument normalisation, ml_dtypes views, warnings). A Model keeps the
// imported graph and compiles it once per input signature, the way `ampfuse run` compiles
// it (tools/model_input.h, tools/model_steps.h: the same loading, typing, weights, options
// and messages). Inputs are wrapped, not copied (runtime::Tensor::wrap over the DLPack or
// buffer-protocol memory); outputs go back as NumPy arrays over the executor's buffers, which
// it reuses only once Python has let go of them.
#include "engine/execution/executor.h"
#include "engine/planning/graph_dot.h"
#include "ir/error.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "tools/model_input.h"
#include "tools/model_steps.h"
#include "tools/params_input.h"
#include "tools/plan_args.h"
#include "tools/report.h"

#include <ampfuse/version.h>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>

namespace nb = nanobind;
using namespace ampfuse;

namespace {

using Array = nb::ndarray<nb::ro>;

// Where a model comes from: an MXNet *-symbol.json file, JSON text, or the embedded default
// model (`ampfuse run` without MODEL).
struct Source {
  std::string kind;  // "file", "text" or "default"
  std::string value;
};

struct Untyped {
  ir::Graph graph;
  std::set<std::string> unreached;
};

Untyped load_untyped(const Source& s) {
  Untyped u;
  if (s.kind == "file")
    u.graph = tools::load_model_file(s.value, &u.unreached);
  else if (s.kind == "text")
    u.graph = tools::load_model_text(s.value, "<symbol JSON text>", &u.unreached);
  else if (s.kind == "default")
    u.graph = tools::load_model("", {});  // batch 1: names and outputs; each signature builds its own
  else
    fail("unknown model source '{}'", s.kind);
  return u;
}

// The element type of a DLPack / buffer-protocol array; `tag` overrides it where NumPy
// cannot say it ("bf16": ml_dtypes.bfloat16 passed as uint16, "bool" passed as uint8).
ir::DType dtype_of(const Array& a, const std::string& tag, const std::string& what) {
  if (!tag.empty()) {
    const std::optional<ir::DType> t = ir::parse_dtype(tag);
    if (!t) fail("{}: unknown dtype '{}'", what, tag);
    if (ir::dtype_size(*t) * 8 != a.dtype().bits) fail("{}: {} needs {}-bit elements", what, tag, ir::dtype_size(*t) * 8);
    return *t;
  }
  const nb::dlpack::dtype d = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
    const auto code = static_cast<C>(d.code);
    if (code == C::Float && d.bits == 32) return ir::DType::f32;
    if (code == C::Float && d.bits == 16) return ir::DType::f16;
    if (code == C::Float && d.bits == 64) return ir::DType::f64;
    if (code == C::Bfloat && d.bits == 16) return ir::DType::bf16;
    if (code == C::Int && d.bits == 8) return ir::DType::i8;
    if (code == C::Int && d.bits == 32) return ir::DType::i32;
    if (code == C::Int && d.bits == 64) return ir::DType::i64;
    if (code == C::UInt && d.bits == 8) return ir::DType::u8;
    if (code == C::Bool && d.bits == 8) return ir::DType::boolean;
  }
  fail("{}: unsupported element type (DLPack code {}, {} bits, {} lanes); ampfuse takes float32, float16, bfloat16, "
       "float64, int8, uint8, int32, int64 and bool",
       what, d.code, d.bits, d.lanes);
}

// The array as a tensor over its own memory. The tensor keeps the array (hence the Python
// object behind it) alive; dropping it takes the GIL, since the last drop may happen
// while a run holds the GIL released. Non-contiguous arrays are copied densely.
runtime::Tensor wrap_array(const Array& a, const std::string& tag, const std::string& what) {
  if (a.device_type() != nb::device::cpu::value)
    fail("{}: the array lives on device type {} (DLPack); ampfuse.Model takes host (CPU) memory", what, a.device_type());
  ir::TensorType type{dtype_of(a, tag, what), {}};
  std::vector<int64_t> strides;
  for (size_t d = 0; d < a.ndim(); ++d) {
    type.shape.push_back(static_cast<int64_t>(a.shape(d)));
    strides.push_back(a.stride(d));
  }
  auto* keep = new Array(a);
  runtime::Tensor t;
  try {
    t = runtime::Tensor::wrap(const_cast<void*>(a.data()), type, strides, [keep] {
      nb::gil_scoped_acquire gil;
      delete keep;
    });
  } catch (...) {
    delete keep;  // wrap() did not take ownership
    throw;
  }
  return t.is_contiguous() ? t : t.contiguous();
}

// A NumPy array over the tensor's buffer (no copy): the capsule holds a share of it. bf16
// goes out as uint16 and bool as uint8 (the Python side views them as ml_dtypes.bfloat16 and
// numpy.bool_); returns the array and that tag.
std::pair<nb::object, std::string> to_numpy(runtime::Tensor t) {
  t = t.contiguous();
  using C = nb::dlpack::dtype_code;
  nb::dlpack::dtype d{static_cast<uint8_t>(C::Float), static_cast<uint8_t>(ir::dtype_size(t.dtype()) * 8), 1};
  std::string tag;
  switch (t.dtype()) {
    case ir::DType::f32: case ir::DType::f16: case ir::DType::f64: break;
    case ir::DType::bf16: d.code = static_cast<uint8_t>(C::UInt), tag = "bf16"; break;
    case ir::DType::boolean: d.code = static_cast<uint8_t>(C::UInt), tag = "bool"; break;
    case ir::DType::u8: d.code = static_cast<uint8_t>(C::UInt); break;
    case ir::DType::i8: case ir::DType::i32: case ir::DType::i64: d.code = static_cast<uint8_t>(C::Int); break;
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* owned = new runtime::Tensor(std::move(t));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<runtime::Tensor*>(p); });
  nb::ndarray<nb::numpy> arr(owned->raw(), shape.size(), shape.data(), owner, nullptr, d);
  return {arr.cast(), tag};
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The AMP and planning options, spelled as the CLI's flags (tools/amp_args.h).
struct Options {
  std::string amp = "off";
  std::vector<std::string> lp16_ops, fp32_ops, widest_ops, neutral_ops, exclude;
  bool cast_params_offline = false, cast_narrow = false;
  std::string layout;
  bool fuse = true, fold_bn = true, constant_params = true;
  std::string device = "cpu";
  uint64_t seed = 0;

  tools::AmpArgs amp_args() const {
    tools::AmpArgs a;
    a.amp = amp;
    a.lp16_ops = lp16_ops, a.fp32_ops = fp32_ops, a.widest_ops = widest_ops, a.neutral_ops = neutral_ops;
    a.exclude = exclude;
    a.cast_params_offline = cast_params_offline, a.cast_narrow = cast_narrow;
    a.layout = layout;
    return a;
  }
};

// Weights from arrays by name, as a .params file would give them. Copied: the model computes
// what depends on them once, so later changes to the caller's arrays must not half-apply.
tools::ParamsFile params_from_arrays(const std::map<std::string, std::pair<Array, std::string>>& arrays) {
  tools::ParamsFile p;
  p.path = "params";
  for (const auto& [name, value] : arrays) {
    runtime::Tensor t = wrap_array(value.first, value.second, fmt::format("params['{}']", name)).clone();
    p.list.names.push_back(name);
    p.list.arrays.push_back(t);
  }
  p.by_variable = runtime::params_by_name(p.list, p.path);
  return p;
}

class Model {
 public:
  Model(Source source, std::optional<tools::ParamsFile> params, std::map<std::string, ir::Shape> shapes, Options o)
      : source_(std::move(source)), params_(std::move(params)), shapes_(std::move(shapes)), opts_(std::move(o)) {
    tools::PlanArgs pa;
    pa.amp = opts_.amp_args();
    pa.no_fuse = !opts_.fuse;
    pa.no_fold_bn = !opts_.fold_bn;
    eo_ = pa.executor_options();  // the options `ampfuse run` compiles with
    eo_.constant_params = opts_.constant_params;
    device_ = tools::open_device(opts_.device);
    eo_.device = device_.get();
    untyped_ = load_untyped(source_);
    // Names now (types are compared once a signature types the model).
    if (params_) tools::check_params_against_model(*params_, untyped_.graph);
  }

  std::vector<std::string> input_names() const {
    std::vector<std::string> names;
    for (const ir::Node* n : tools::input_variables(untyped_.graph)) names.push_back(n->name);
    return names;
  }
  std::vector<std::string> output_names() const {
    std::vector<std::string> names;
    for (size_t k = 0; k < untyped_.graph.outputs.size(); ++k) names.push_back(untyped_.graph.output_name(k));
    return names;
  }
  // Weights the params give no value (random, seeded), for the Python side's warning.
  std::vector<std::string> weights_without_values() const {
    // Roles are known before types: no shapes needed.
    return params_ ? tools::weights_without_values(*params_, untyped_.graph) : std::vector<std::string>{};
  }

  // Input name -> (shape, dtype) of the current signature.
  std::map<std::string, std::pair<ir::Shape, std::string>> input_types() {
    const std::shared_ptr<Entry> e = current();
    std::map<std::string, std::pair<ir::Shape, std::string>> r;
    for (const ir::Node* n : tools::input_variables(e->model))
      r[n->name] = {n->outputs.at(0).shape, std::string(ir::dtype_name(n->outputs[0].dtype))};
    return r;
  }

  // Weight (param and aux) name -> (shape, dtype) of the current signature.
  std::map<std::string, std::pair<ir::Shape, std::string>> weight_types() {
    const std::shared_ptr<Entry> e = current();
    std::map<std::string, std::pair<ir::Shape, std::string>> r;
    for (const ir::Node& n : e->model.nodes)
      if (n.is_var() && n.role != ir::VarRole::input)
        r[n.name] = {n.outputs.at(0).shape, std::string(ir::dtype_name(n.outputs[0].dtype))};
    return r;
  }

  std::vector<std::pair<nb::object, std::string>> call(const std::map<std::string, std::pair<Array, std::string>>& inputs) {
    runtime::Bindings given;
    for (const auto& [name, value] : inputs) given[name] = wrap_array(value.first, value.second, fmt::format("input '{}'", name));
    std::vector<runtime::Tensor> outputs;
    {
      nb::gil_scoped_release nogil;
      run_entry(given, outputs);
    }
    std::vector<std::pair<nb::object, std::string>> r;
    for (runtime::Tensor& t : outputs) r.push_back(to_numpy(std::move(t)));
    return r;
  }

  void run_entry(runtime::Bindings& given, std::vector<runtime::Tensor>& outputs) {
    {
      const std::shared_ptr<Entry> e = entry_for(given);
      runtime::Bindings vars = e->vars;
      for (const auto& [name, t] : given)
        if (vars.count(name)) vars[name] = t;  // an input no output reads is not bound
      {
        std::lock_guard lock(mu_);
        last_input_pointers_.clear();
        for (const auto& [name, t] : given) last_input_pointers_[name] = reinterpret_cast<uintptr_t>(t.raw());
      }
      outputs = e->exe.run(vars);
      given.clear();
      vars.clear();
    }
  }

  std::string plan_text() {
    const std::shared_ptr<Entry> e = current();
    return tools::plan_text(tools::summarize_plan(e->exe, eo_.fuse, e->compile_ms, -1));
  }
  std::string dot() {
    const std::shared_ptr<Entry> e = current();
    return engine::graph_to_dot(e->exe.graph(), e->exe.plan());
  }
  nb::dict compile_stats() {
    const std::shared_ptr<Entry> e = current();
    const engine::CompileStats& s = e->exe.compile_stats();
    nb::dict d;
    d["device"] = s.device;
    d["kernels"] = s.kernels;
    d["external_ops"] = s.external_ops;
    d["onednn_ops"] = s.onednn_ops;
    d["views"] = s.views;
    d["widened_external"] = s.widened_external;
    d["constant_steps"] = s.constant_steps;
    d["folded_batchnorms"] = s.folded_batchnorms;
    d["fused_epilogues"] = s.fused_epilogues;
    d["row_kernels"] = s.row_kernels;
    d["fused_nodes"] = s.fused_nodes;
    d["compilations"] = s.compilations;
    d["cache_hits"] = s.cache_hits;
    d["disk_loads"] = s.disk_loads;
    d["compile_seconds"] = s.compile_seconds;
    d["host_round_trips"] = s.host_round_trips;
    d["arena_bytes"] = s.arena_bytes;
    d["intermediate_bytes"] = s.intermediate_bytes;
    d["in_place"] = s.in_place;
    d["fallbacks"] = s.fallbacks;
    d["slow_external"] = s.slow_external;
    if (s.amp) {
      nb::dict a;
      a["target"] = opts_.amp;
      a["casts_inserted"] = s.amp->casts_inserted;
      a["casts_removed"] = s.amp->casts_removed;
      a["casts_final"] = s.amp->casts_final;
      a["params_offline"] = s.amp->params_offline;
      a["lp16_nodes"] = s.amp->lp16_nodes;
      a["fp32_nodes"] = s.amp->fp32_nodes;
      d["amp"] = a;
    } else {
      d["amp"] = nb::none();
    }
    std::lock_guard lock(compile_mu_);
    d["signatures"] = entries_.size();  // input signatures compiled so far
    return d;
  }
  std::map<std::string, uintptr_t> last_input_pointers() {
    std::lock_guard lock(mu_);
    return last_input_pointers_;
  }

 private:
  // One compiled signature: the typed model, its executable, and the bindings of the
  // executable's graph (weights from the params, seeded random values for the rest).
  struct Entry {
    ir::Graph model;
    engine::Executable exe;
    runtime::Bindings vars;
    double compile_ms = 0;
  };
  // "name:f32[1,3,32,32];..." over the named values, in name order.
  using Signature = std::string;
  static void add_to(Signature& sig, const std::string& name, const ir::TensorType& t) {
    sig += fmt::format("{}:{};", name, ir::type_str(t));
  }

  ir::Graph typed(const runtime::Bindings& given) const {
    if (source_.kind == "default") return tools::load_model("", shapes_, given);
    return tools::type_model(untyped_.graph, untyped_.unreached, shapes_, given);
  }

  // The entry for inputs of these types: looked up by the inputs' types, else by the typed
  // model's input types (inputs left out get the shapes the model or `shapes` give), else
  // compiled. Runs without the GIL.
  std::shared_ptr<Entry> entry_for(const runtime::Bindings& given) {
    Signature sig;
    for (const auto& [name, t] : given) add_to(sig, name, t.type());
    std::lock_guard lock(compile_mu_);
    if (auto it = by_call_.find(sig); it != by_call_.end()) return last_ = it->second;
    ir::Graph g = typed(given);
    if (params_) tools::check_params_against_model(*params_, g, given);
    std::map<std::string, ir::TensorType> types;
    for (const ir::Node* n : tools::input_variables(g)) types[n->name] = n->outputs.at(0);
    Signature inputs;
    for (const auto& [name, t] : types) add_to(inputs, name, t);
    std::shared_ptr<Entry>& e = entries_[inputs];
    if (!e) {
      const runtime::Bindings f32_vars =
          runtime::random_bindings(g, opts_.seed, params_ ? params_->by_variable : runtime::Bindings{});
      const auto t0 = std::chrono::steady_clock::now();
      engine::Executable exe = engine::Executable::compile(g, eo_);
      const double ms = ms_since(t0);
      runtime::Bindings vars = tools::bindings_for(exe.graph(), f32_vars);
      e = std::make_shared<Entry>(Entry{std::move(g), std::move(exe), std::move(vars), ms});
    }
    by_call_[sig] = e;
    return last_ = e;
  }

  // The signature last run, else the one `shapes` and the model give (compiled now).
  std::shared_ptr<Entry> current() {
    {
      std::lock_guard lock(compile_mu_);
      if (last_) return last_;
    }
    nb::gil_scoped_release nogil;
    return entry_for({});
  }

  Source source_;
  std::optional<tools::ParamsFile> params_;
  std::map<std::string, ir::Shape> shapes_;
  Options opts_;
  engine::ExecutorOptions eo_;
  std::unique_ptr<runtime::DeviceApi> device_;
  Untyped untyped_;
  std::mutex compile_mu_;  // guards the maps below and last_; held while compiling
  std::map<Signature, std::shared_ptr<Entry>> by_call_, entries_;
  std::shared_ptr<Entry> last_;
  std::mutex mu_;  // guards last_input_pointers_
  std::map<std::string, uintptr_t> last_input_pointers_;
};

std::string convert(const Source& source, const std::optional<tools::ParamsFile>& params,
                    const std::map<std::string, ir::Shape>& shapes, const Options& o) {
  const engine::AmpOptions amp = o.amp_args().convert_options();
  if (source.kind == "default") fail("convert needs an MXNet model (a *-symbol.json file or its text)");
  nb::gil_scoped_release nogil;
  Untyped u = load_untyped(source);
  return tools::convert_model(std::move(u.graph), u.unreached, shapes, amp, params ? &*params : nullptr).json;
}

std::optional<tools::ParamsFile> params_arg(const nb::object& p) {
  if (p.is_none()) return std::nullopt;
  if (nb::isinstance<nb::str>(p)) return tools::read_params_file(nb::cast<std::string>(p));
  return params_from_arrays(nb::cast<std::map<std::string, std::pair<Array, std::string>>>(p));
}

}  // namespace

NB_MODULE(_ampfuse, m) {
  m.doc() = "ampfuse's native module; use the ampfuse package (python/ampfuse/__init__.py)";
  nb::exception<ampfuse::Error>(m, "Error", PyExc_RuntimeError);
  m.attr("__version__") = AMPFUSE_VERSION;

  nb::class_<Source>(m, "Source")
      .def(nb::init<std::string, std::string>())
      .def_ro("kind", &Source::kind)
      .def_ro("value", &Source::value);

  nb::class_<Options>(m, "Options")
      .def(nb::init<>())
      .def_rw("amp", &Options::amp)
      .def_rw("lp16_ops", &Options::lp16_ops)
      .def_rw("fp32_ops", &Options::fp32_ops)
      .def_rw("widest_ops", &Options::widest_ops)
      .def_rw("neutral_ops", &Options::neutral_ops)
      .def_rw("exclude", &Options::exclude)
      .def_rw("cast_params_offline", &Options::cast_params_offline)
      .def_rw("cast_narrow", &Options::cast_narrow)
      .def_rw("layout", &Options::layout)
      .def_rw("fuse", &Options::fuse)
      .def_rw("fold_bn", &Options::fold_bn)
      .def_rw("constant_params", &Options::constant_params)
      .def_rw("device", &Options::device)
      .def_rw("seed", &Options::seed);

  nb::class_<Model>(m, "Model")
      .def("__init__",
           [](Model* self, const Source& s, const nb::object& params, const std::map<std::string, ir::Shape>& shapes,
              const Options& o) {
             std::optional<tools::ParamsFile> p = params_arg(params);
             nb::gil_scoped_release nogil;
             new (self) Model(s, std::move(p), shapes, o);
           },
           nb::arg("source"), nb::arg("params").none(), nb::arg("shapes"), nb::arg("options"))
      .def("__call__", &Model::call)
      .def_prop_ro("input_names", &Model::input_names)
      .def_prop_ro("output_names", &Model::output_names)
      .def("weights_without_values", &Model::weights_without_values)
      .def("input_types", &Model::input_types)
      .def("weight_types", &Model::weight_types)
      .def("plan", &Model::plan_text)
      .def("dot", &Model::dot)
      .def("compile_stats", &Model::compile_stats)
      .def("_last_input_pointers", &Model::last_input_pointers);

  m.def("convert", [](const Source& s, const nb::object& params, const std::map<std::string, ir::Shape>& shapes,
                      const Options& o) { return convert(s, params_arg(params), shapes, o); },
        nb::arg("source"), nb::arg("params").none(), nb::arg("shapes"), nb::arg("options"));
}
