// `ampfuse run [MODEL.json]`: runs a model (the embedded default one without MODEL) with
// seeded random values for everything --inputs leaves unbound: converted for AMP when --amp
// says so, planned into fused kernels and compiled (or op by op with --no-fuse, or on the
// reference interpreter with --interpreter), timed against the f32 graph run unfused.
#include "engine/passes/amp_pipeline.h"
#include "engine/execution/device_executor.h"
#include "engine/execution/executor.h"
#include "ir/error.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tools/amp_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>

namespace ampfuse::tools {

namespace {

struct RunOptions {
  std::string model;  // empty: the default model
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;
  std::string save_dir;
  uint64_t seed = 0;
  bool json = false;
  AmpArgs amp;
  bool no_fuse = false;
  bool interpreter = false;
  bool no_baseline = false;
  bool no_fold_bn = false;
  int repeat = 5;
  std::string device = "cpu";
};

constexpr const char* kDefaultModelName = "<default>";

// A file name for an output: MXNet names may hold '/' or other characters a path cannot.
std::string file_stem(const std::string& name, std::set<std::string>& taken) {
  std::string stem = name;
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  if (stem.empty() || stem == "." || stem == "..") stem = "output";
  std::string unique = stem;
  for (int k = 2; !taken.insert(unique).second; ++k) unique = fmt::format("{}_{}", stem, k);
  return unique;
}

std::vector<std::string> save_outputs(const std::string& dir, const ir::Graph& g,
                                      const std::vector<runtime::Tensor>& outputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--save-outputs {}: cannot create the directory: {}", dir, ec.message());
  std::set<std::string> taken;
  std::vector<std::string> files;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string path = (std::filesystem::path(dir) / (file_stem(g.output_name(k), taken) + ".npy")).string();
    runtime::write_npy(path, outputs[k]);
    files.push_back(path);
  }
  return files;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `run` `repeat` times; returns the median milliseconds and the last outputs.
template <class Fn>
std::pair<double, std::vector<runtime::Tensor>> timed_runs(int repeat, Fn&& run) {
  std::vector<double> times;
  std::vector<runtime::Tensor> outputs;
  for (int k = 0; k < repeat; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    outputs = run();
    times.push_back(ms_since(t0));
  }
  return {median(times), std::move(outputs)};
}

// Compiles twice: the executable, the cold compile's milliseconds and the second's (its
// kernels from the cache).
template <class Compile>
auto compiled_twice(Compile compile) {
  auto t0 = std::chrono::steady_clock::now();
  auto exe = compile();
  const double cold_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  compile();
  return std::tuple{std::move(exe), cold_ms, ms_since(t0)};
}

// One untimed first run (what depends on the weights alone is computed then), then r.runs
// timed ones; fills r's times and `outputs`.
template <class Run>
void first_and_timed_runs(Run run, RunReport& r, std::vector<runtime::Tensor>& outputs) {
  const auto t0 = std::chrono::steady_clock::now();
  run();
  r.first_run_ms = ms_since(t0);
  std::tie(r.run_ms, outputs) = timed_runs(r.runs, run);
}

// Bindings for the converted graph: a weight stored in low precision offline
// (--cast-params-offline) is the f32 value rounded once.
runtime::Bindings bindings_for(const ir::Graph& g, const runtime::Bindings& f32_vars) {
  runtime::Bindings vars;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_var()) continue;
    const auto it = f32_vars.find(n.name);
    if (it == f32_vars.end()) continue;
    vars[n.name] = it->second.dtype() == n.outputs[0].dtype ? it->second : runtime::cast(it->second, n.outputs[0].dtype);
  }
  return vars;
}

int count_shared_casts(const ir::Graph& g) {
  const std::map<ir::ValueRef, int> uses = ir::use_counts(g);
  int shared = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    if (ir::is_cast(g.nodes[i]) && uses.count({i, 0}) && uses.at({i, 0}) > 1) ++shared;
  }
  return shared;
}

// What the CPU and device executors' compile stats have in common.
template <class Stats>
PlanSummary summarize_plan(const Stats& cs, const engine::Plan& plan, double cold_ms, double cached_ms, bool fused) {
  PlanSummary p;
  p.fused = fused;
  p.kernels = cs.kernels;
  p.fused_nodes = cs.fused_nodes;
  p.external_ops = cs.external_ops;
  p.views = cs.views;
  for (const engine::PlanStep& step : plan.steps)
    if (const auto* k = std::get_if<engine::FusedKernel>(&step)) ++p.ops_per_kernel[static_cast<int>(k->nodes.size())];
  p.compilations = cs.compilations;
  p.compile_cold_ms = cold_ms;
  p.compile_cached_ms = cached_ms;
  p.fallbacks = cs.fallbacks;
  return p;
}

PlanSummary summarize_plan(const engine::Executable& exe, double cold_ms, double cached_ms, bool fused) {
  const engine::CompileStats& cs = exe.compile_stats();
  PlanSummary p = summarize_plan(cs, exe.plan(), cold_ms, cached_ms, fused);
  p.widened_external = cs.widened_external;
  p.constant_steps = cs.constant_steps;
  p.folded_batchnorms = cs.folded_batchnorms;
  p.slow_external = cs.slow_external;
  return p;
}

// --device: null for the CPU, else the device the plan runs on (engine/execution/device_executor.h).
std::unique_ptr<runtime::DeviceApi> open_device(const std::string& name) {
  if (name == "cpu") return nullptr;
  if (name == "cuda-emulated") return std::make_unique<runtime::EmulatedDevice>();
  if (name != "cuda") fail("--device {}: expected cpu or cuda (or cuda-emulated, the device path on the CPU)", name);
  return with_context("--device cuda", [] { return runtime::cuda_device_api(); });
}

// Compiles and runs the graph on `device` as run_model does on the CPU (latency includes
// uploading the variables and downloading the outputs); fills r's plan and times and
// `outputs`, and returns what only a device run reports.
nlohmann::json run_on_device(runtime::DeviceApi& device, const ir::Graph& g, const runtime::Bindings& vars, bool fuse,
                             RunReport& r, std::vector<runtime::Tensor>& outputs) {
  engine::DeviceExecutorOptions eo;
  eo.fuse = fuse;
  eo.device = &device;
  const auto [exe, cold_ms, cached_ms] = compiled_twice([&] { return engine::DeviceExecutable::compile(g, eo); });
  const engine::DeviceCompileStats& cs = exe.compile_stats();
  r.plan = summarize_plan(cs, exe.plan(), cold_ms, cached_ms, fuse);
  engine::DeviceRunStats rs;
  first_and_timed_runs([&] { return exe.run(vars, &rs); }, r, outputs);
  return {{"name", cs.device},          {"device_kernels", cs.device_kernels}, {"host_ops", cs.external_ops},
          {"onednn_ops", cs.onednn_ops}, {"host_round_trips", cs.host_round_trips},
          {"uploads", rs.uploads},       {"upload_bytes", rs.upload_bytes},    {"downloads", rs.downloads},
          {"download_bytes", rs.download_bytes}, {"device_bytes", rs.device_bytes}};
}

void print_device_report(const nlohmann::json& d) {
  fmt::print("device:  {}: {} kernels on the device; {} ops on the host ({} through oneDNN), {} host round trips\n",
             d["name"].get<std::string>(), d["device_kernels"].get<int>(), d["host_ops"].get<int>(),
             d["onednn_ops"].get<int>(), d["host_round_trips"].get<int>());
  fmt::print("         a run uploads {} tensors ({:.2f} MB), downloads {} ({:.2f} MB), holds {:.2f} MB of device memory\n",
             d["uploads"].get<int>(), d["upload_bytes"].get<int64_t>() / 1e6, d["downloads"].get<int>(),
             d["download_bytes"].get<int64_t>() / 1e6, d["device_bytes"].get<int64_t>() / 1e6);
}

int run_model(const RunOptions& o) {
  if (o.repeat < 1) fail("--repeat {}: must be at least 1", o.repeat);
  const std::unique_ptr<runtime::DeviceApi> device = open_device(o.device);
  if (device && o.interpreter) fail("--interpreter runs on the CPU: leave out --device {}", o.device);
  if (o.interpreter && o.no_fuse) fail("--interpreter and --no-fuse: choose one");
  const std::optional<engine::AmpOptions> amp = o.amp.options();
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  runtime::Bindings given;
  for (const auto& [name, path] : parse_input_args(o.inputs))
    given[name] = with_context(fmt::format("--inputs {}", name), [&] { return runtime::read_npy(path); });

  const ir::Graph g = load_model(o.model, shapes, given);
  const runtime::Bindings vars = runtime::random_bindings(g, o.seed, given);

  RunReport r;
  r.model = summarize_model(g, o.model.empty() ? kDefaultModelName : o.model);
  r.seed = o.seed;
  r.runs = o.repeat;
  r.engine = o.interpreter ? "interpreter" : o.no_fuse ? "unfused" : "fused";

  ir::Graph run_graph = g;
  if (amp) {
    engine::AmpStats st;
    run_graph = engine::convert_for_amp(g, *amp, &st);
    r.amp = AmpSummary{o.amp.amp,     st.casts_inserted, st.casts_removed, st.casts_final, count_shared_casts(run_graph),
                       st.params_offline, st.lp16_nodes,  st.fp32_nodes};
  }
  const runtime::Bindings run_vars = bindings_for(run_graph, vars);

  std::vector<runtime::Tensor> outputs;
  nlohmann::json device_report;
  if (o.interpreter) {
    std::tie(r.run_ms, outputs) = timed_runs(o.repeat, [&] { return runtime::interpret(run_graph, run_vars); });
  } else if (device) {
    device_report = run_on_device(*device, run_graph, run_vars, !o.no_fuse, r, outputs);
  } else {
    engine::ExecutorOptions eo;
    eo.fuse = !o.no_fuse;
    eo.progress = !o.json;
    eo.constant_params = true;  // the weights stay bound: derived forms are computed once
    eo.fold_batchnorm = !o.no_fuse && !o.no_fold_bn;
    const auto [exe, cold_ms, cached_ms] = compiled_twice([&] { return engine::Executable::compile(run_graph, eo); });
    r.plan = summarize_plan(exe, cold_ms, cached_ms, eo.fuse);
    first_and_timed_runs([&] { return exe.run(run_vars); }, r, outputs);
  }

  if (!o.no_baseline) {
    engine::ExecutorOptions eo;
    eo.fuse = false;
    eo.constant_params = true;  // as above, so that only fusion and AMP differ
    const engine::Executable baseline = engine::Executable::compile(g, eo);
    baseline.run(vars);
    auto [ms, reference] = timed_runs(o.repeat, [&] { return baseline.run(vars); });
    r.baseline_ms = ms;
    double max_abs = 0, max_rel = 0;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::vector<double> a = runtime::to_f64_vector(outputs[k]), b = runtime::to_f64_vector(reference[k]);
      double largest = 0, diff = 0;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        if (std::isfinite(b[i])) largest = std::max(largest, std::fabs(b[i]));
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;
        const double d = std::fabs(a[i] - b[i]);
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      }
      max_abs = std::max(max_abs, diff);
      max_rel = std::max(max_rel, largest > 0 ? diff / largest : diff);
    }
    r.max_abs_error = max_abs;
    r.max_rel_error = max_rel;
  }

  for (size_t k = 0; k < outputs.size(); ++k) r.outputs.push_back(summarize_tensor(run_graph.output_name(k), outputs[k]));
  if (!o.save_dir.empty()) r.saved_files = save_outputs(o.save_dir, run_graph, outputs);

  if (o.json) {
    nlohmann::json j = to_json(r);
    if (device) j["device"] = device_report;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", to_text(r));
    if (device) print_device_report(device_report);
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "run", "Run a model (AMP-converted with --amp), fused and compiled, and report plan, timing, error and outputs.");
  cmd->add_option("model", o->model,
                  "MXNet *-symbol.json file; without it, the embedded default model (a conv block and a "
                  "GELU MLP block on data of shape N,3,32,32)")
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  cmd->add_option("--inputs", o->inputs,
                  "Value of a variable (an input or a weight) from a .npy file (repeatable); without --shape "
                  "it also sets the variable's shape and dtype")
      ->allow_extra_args(false)
      ->type_name("NAME=FILE.npy");
  cmd->add_option("--save-outputs", o->save_dir,
                  "Write each output to DIR/<output name>.npy (bf16 as float32), creating DIR")
      ->type_name("DIR");
  cmd->add_option("--seed", o->seed, "Seed of the random values of unbound variables (default 0)")->type_name("N");
  add_amp_args(*cmd, o->amp, "Convert for automatic mixed precision first (default off)", true);
  cmd->add_flag("--no-fuse", o->no_fuse, "Run op by op: one compiled kernel per elementwise op");
  cmd->add_flag("--interpreter", o->interpreter, "Run on the reference interpreter instead of compiled kernels");
  cmd->add_option("--device", o->device,
                  "Where fused kernels run: cpu (default) or cuda (GPU 0; external ops stay on the CPU; fails "
                  "with the reason when there is no GPU); cuda-emulated runs the device path on the CPU")
      ->type_name("cpu|cuda|cuda-emulated");
  cmd->add_option("--repeat", o->repeat, "Timed runs; the report gives the median (default 5)")->type_name("N");
  cmd->add_flag("--no-fold-bn", o->no_fold_bn,
                "Keep each BatchNorm that follows a Convolution (fused runs fold it into the convolution's weights "
                "and bias, computed once)");
  cmd->add_flag("--no-baseline", o->no_baseline,
                "Skip the f32 unfused baseline run (no speed-up and no error in the report)");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, nodes, op_nodes, ops, engine, seed, runs, run_ms, first_run_ms, "
                "baseline_f32_unfused_ms, max_abs_error, max_rel_error, amp: {target, casts_inserted, casts_removed, "
                "casts_final, casts_reused, params_offline, lp16_nodes, fp32_nodes} or null, plan: {fused, kernels, "
                "fused_ops, external_ops, views, widened_external, constant_steps, folded_batchnorms, ops_per_kernel, "
                "compilations, "
                "compile_cold_ms, compile_cached_ms, fallbacks, slow_external} or null, outputs: [{name, shape, dtype, "
                "min, max, mean, nonfinite}], saved, and with --device cuda|cuda-emulated device: {name, "
                "device_kernels, host_ops, onednn_ops, host_round_trips, uploads, upload_bytes, downloads, "
                "download_bytes, device_bytes}}; min, max and mean are over finite elements");
  cmd->footer("Variables without --inputs get seeded random values: inputs uniform in [-1, 1), weights\n"
              "scaled by 1/sqrt(fan-in), BatchNorm variances in [0.5, 1.5), token ids below the vocabulary\n"
              "of the Embedding that reads them. The same seed gives the same values on every platform.");
  return {cmd, [o] { return run_model(*o); }};
}

}  // namespace ampfuse::tools
