// `ampfuse run [MODEL.json]`: runs a model (the embedded default one without MODEL) with
// seeded random values for everything --inputs and --params leave unbound: converted for
// AMP when --amp says so, planned into fused kernels and compiled (or op by op with
// --no-fuse, or on the reference interpreter with --interpreter), timed against the f32
// graph run unfused. With --backward it differentiates the (converted) graph and runs
// forward and backward together (engine/passes/autodiff.h), reporting every gradient.
#include "engine/lower.h"
#include "engine/execution/executor.h"
#include "ir/error.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tools/plan_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"
#include "tools/params_input.h"
#include "tools/model_steps.h"
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
  std::string params;  // --params FILE.params
  std::string save_dir;
  uint64_t seed = 0;
  bool json = false;
  PlanArgs plan;
  bool interpreter = false;
  bool no_baseline = false;
  int repeat = 5;
  std::string device = "cpu";
  bool backward = false;
  bool training = false;
  std::vector<std::string> wrt;
  bool grad_inputs = false;
  std::string gradients_dir;
  bool no_recompute = false;
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

// Writes tensors[k] to DIR/<names[k]>.npy; `option` names the flag in errors.
std::vector<std::string> save_tensors(const std::string& option, const std::string& dir,
                                      const std::vector<std::string>& names, std::span<const runtime::Tensor> tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{} {}: cannot create the directory: {}", option, dir, ec.message());
  std::set<std::string> taken;
  std::vector<std::string> files;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const std::string path = (std::filesystem::path(dir) / (file_stem(names[k], taken) + ".npy")).string();
    runtime::write_npy(path, tensors[k]);
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
    outputs.clear();  // lets the executable reuse its output buffers
    const auto t0 = std::chrono::steady_clock::now();
    outputs = run();
    times.push_back(ms_since(t0));
  }
  return {median(times), std::move(outputs)};
}

// Head gradients of ones (MXNet's backward() default) for the backward graph's inputs.
void bind_head_grads(const ir::Graph& g, const std::vector<std::string>& heads, runtime::Bindings& vars) {
  for (const std::string& name : heads) {
    const ir::TensorType t = g.nodes.at(*g.find_var(name)).outputs.at(0);
    runtime::Tensor ones(ir::TensorType{ir::DType::f64, t.shape});
    for (int64_t i = 0; i < ones.size(); ++i) ones.data<double>()[i] = 1;
    vars[name] = runtime::cast(ones, t.dtype);
  }
}

int run_model(const RunOptions& o) {
  if (o.repeat < 1) fail("--repeat {}: must be at least 1", o.repeat);
  if (!o.backward && (!o.wrt.empty() || o.grad_inputs || !o.gradients_dir.empty() || o.no_recompute))
    fail("--wrt, --grad-inputs, --save-gradients and --no-recompute need --backward");
  const std::unique_ptr<runtime::DeviceApi> device = open_device(o.device);
  if (device && o.interpreter) fail("--interpreter runs on the CPU: leave out --device {}", o.device);
  if (o.interpreter && o.plan.no_fuse) fail("--interpreter and --no-fuse: choose one");
  engine::ExecutorOptions eo = o.plan.executor_options();
  const std::optional<engine::AmpOptions>& amp = eo.amp;
  std::optional<engine::BackwardOptions> backward;
  if (o.backward) {
    backward = engine::BackwardOptions{o.wrt, o.grad_inputs};
    eo.fold_batchnorm = false;  // folding takes the BatchNorm params out of the graph
    eo.recompute = !o.no_recompute;
  }
  if (o.training) {
    if (o.interpreter) fail("--training runs compiled: leave out --interpreter");
    eo.training = engine::TrainingOptions{o.seed, 0};
    eo.fold_batchnorm = false;
  }
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  runtime::Bindings given;
  for (const auto& [name, path] : parse_input_args(o.inputs))
    given[name] = with_context(fmt::format("--inputs {}", name), [&] { return runtime::read_npy(path); });

  const std::optional<ParamsFile> params =
      o.params.empty() ? std::nullopt : std::optional<ParamsFile>(read_params_file(o.params));

  const ir::Graph g = load_model(o.model, shapes, given);
  check_excluded_nodes(amp, g);
  if (params) {
    check_params_against_model(*params, g, given);
    given.insert(params->by_variable.begin(), params->by_variable.end());
    if (const std::vector<std::string> missing = weights_without_values(*params, g); !missing.empty())
      fmt::print(stderr, "ampfuse: warning: {}: no array for {} weight{} of the model, which get{} random values: {}\n",
                 params->path, missing.size(), missing.size() == 1 ? "" : "s", missing.size() == 1 ? "s" : "",
                 fmt::join(missing, ", "));
  }
  const runtime::Bindings vars = runtime::random_bindings(g, o.seed, given);

  RunReport r;
  r.model = summarize_model(g, o.model.empty() ? kDefaultModelName : o.model);
  r.seed = o.seed;
  r.runs = o.repeat;
  r.engine = o.interpreter ? "interpreter" : o.plan.no_fuse ? "unfused" : "fused";

  std::vector<runtime::Tensor> outputs;
  ir::Graph run_graph = g;
  std::optional<engine::AmpStats> amp_stats;
  size_t forward_outputs = g.outputs.size();
  std::vector<std::string> gradient_of;
  if (backward) r.backward.emplace();
  if (o.interpreter) {
    if (amp) {
      engine::AmpStats st;
      run_graph = engine::convert_for_amp(g, *amp, &st);
      amp_stats = st;
    }
    runtime::Bindings run_vars = bindings_for(run_graph, vars);
    if (backward) {
      engine::BackwardGraph bg = engine::build_backward(run_graph, *backward);
      run_graph = std::move(bg.graph);
      forward_outputs = bg.num_forward_outputs;
      gradient_of = bg.gradient_of;
      r.backward->head_grads = bg.head_grads;
      bind_head_grads(run_graph, bg.head_grads, run_vars);
    }
    std::tie(r.run_ms, outputs) = timed_runs(o.repeat, [&] { return runtime::interpret(run_graph, run_vars); });
  } else {
    eo.progress = !o.json;
    eo.device = device.get();
    if (backward) {
      // The forward graph alone, compiled the same way: the backward's share of the time.
      const engine::Executable fwd = engine::Executable::compile(g, eo);
      const runtime::Bindings fwd_vars = bindings_for(fwd.graph(), vars);
      fwd.run(fwd_vars);
      r.backward->forward_ms = timed_runs(o.repeat, [&] { return fwd.run(fwd_vars); }).first;
      const PlanSummary fp = summarize_plan(fwd, eo.fuse, 0, 0);
      r.backward->forward_kernels = fp.kernels;
      r.backward->forward_external_ops = fp.external_ops;
      eo.backward = backward;
    }
    auto t0 = std::chrono::steady_clock::now();
    const engine::Executable exe = engine::Executable::compile(g, eo);
    const double cold_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    engine::Executable::compile(g, eo);
    const double cached_ms = ms_since(t0);
    r.plan = summarize_plan(exe, eo.fuse, cold_ms, cached_ms);
    amp_stats = exe.compile_stats().amp;
    run_graph = exe.graph();
    runtime::Bindings run_vars = bindings_for(run_graph, vars);
    if (backward) {
      forward_outputs = exe.compile_stats().forward_outputs;
      gradient_of = exe.compile_stats().gradient_of;
      r.backward->head_grads = exe.compile_stats().head_grads;
      bind_head_grads(run_graph, r.backward->head_grads, run_vars);
      const engine::CompileStats& cs = exe.compile_stats();
      r.backward->saved_values = cs.saved_values;
      r.backward->saved_bytes = cs.saved_bytes;
      r.backward->recomputed_values = cs.recomputed.values;
      r.backward->recompute_bytes_not_moved = cs.recomputed.bytes_not_moved;
    }
    engine::RunStats rs;
    t0 = std::chrono::steady_clock::now();
    exe.run(run_vars);  // also computes what depends on the weights alone
    r.first_run_ms = ms_since(t0);
    std::tie(r.run_ms, outputs) = timed_runs(o.repeat, [&] {
      auto out = exe.run(run_vars, &rs);
      r.solo_runs += rs.solo ? 1 : 0;
      r.nonfinite_reference_runs += rs.reference_on_nonfinite > 0 ? 1 : 0;
      return out;
    });
    r.transfers = TransferSummary{rs.uploads, rs.downloads, rs.upload_bytes, rs.download_bytes};
  }
  if (amp_stats)
    r.amp = AmpSummary{o.plan.amp.amp,          amp_stats->casts_inserted, amp_stats->casts_removed, amp_stats->casts_final,
                       amp_stats->casts_shared, amp_stats->params_offline, amp_stats->lp16_nodes, amp_stats->fp32_nodes};

  if (!o.no_baseline) {
    engine::ExecutorOptions eo;
    eo.fuse = false;
    eo.constant_params = true;  // as above, so that only fusion and AMP differ
    eo.backward = backward;
    if (o.training) eo.training = engine::TrainingOptions{o.seed, 0};
    const engine::Executable baseline = engine::Executable::compile(g, eo);
    runtime::Bindings base_vars = vars;
    bind_head_grads(baseline.graph(), baseline.compile_stats().head_grads, base_vars);
    baseline.run(base_vars);
    auto [ms, reference] = timed_runs(o.repeat, [&] { return baseline.run(base_vars); });
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

  std::vector<std::string> output_names;
  for (size_t k = 0; k < forward_outputs; ++k) {
    output_names.push_back(run_graph.output_name(k));
    r.outputs.push_back(summarize_tensor(output_names.back(), outputs[k]));
  }
  const std::span<const runtime::Tensor> all(outputs);
  if (!o.save_dir.empty()) r.saved_files = save_tensors("--save-outputs", o.save_dir, output_names, all.first(forward_outputs));
  if (backward) {
    for (size_t v = 0; v < gradient_of.size(); ++v)
      r.backward->gradients.push_back(summarize_tensor(gradient_of[v], outputs.at(forward_outputs + v)));
    if (!o.gradients_dir.empty()) {
      const std::vector<std::string> files =
          save_tensors("--save-gradients", o.gradients_dir, gradient_of, all.subspan(forward_outputs));
      r.saved_files.insert(r.saved_files.end(), files.begin(), files.end());
    }
  }

  if (o.json)
    fmt::print("{}\n", to_json(r).dump(2));
  else
    fmt::print("{}", to_text(r));
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
      ->check(non_empty_path())
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  cmd->add_option("--inputs", o->inputs,
                  "Value of a variable (an input or a weight) from a .npy file (repeatable); without --shape "
                  "it also sets the variable's shape and dtype")
      ->allow_extra_args(false)
      ->type_name("NAME=FILE.npy");
  cmd->add_option("--params", o->params,
                  "The model's weights from an MXNet .params file (mx.nd.save, HybridBlock.export): each array "
                  "binds the variable of its name, 'arg:' and 'aux:' dropped; shapes and dtypes must match")
      ->check(non_empty_path())
      ->type_name("FILE.params");
  cmd->add_option("--save-outputs", o->save_dir,
                  "Write each output to DIR/<output name>.npy (bf16 as float32), creating DIR")
      ->check(non_empty_path())
      ->type_name("DIR");
  cmd->add_flag("--backward", o->backward,
                "Also differentiate: run forward and backward (head gradients of ones, or the loss's own "
                "gradient for SoftmaxOutput, *RegressionOutput and MakeLoss heads) and report each gradient");
  cmd->add_flag("--training", o->training,
                "Training form (MXNet's is_train): BatchNorm with batch statistics, its new moving mean and "
                "variance appended to the outputs; Dropout drops (Philox masks keyed by --seed)");
  cmd->add_option("--wrt", o->wrt,
                  "With --backward: the variable to differentiate (repeatable); default every float param")
      ->allow_extra_args(false)
      ->type_name("NAME");
  cmd->add_flag("--grad-inputs", o->grad_inputs, "With --backward and no --wrt: the float inputs' gradients too");
  cmd->add_flag("--no-recompute", o->no_recompute,
                "With --backward: store every forward value the backward kernels read, instead of recomputing "
                "cheap ones in them when that moves fewer bytes");
  cmd->add_option("--save-gradients", o->gradients_dir,
                  "With --backward: write each gradient to DIR/<variable name>.npy (bf16 as float32)")
      ->check(non_empty_path())
      ->type_name("DIR");
  cmd->add_option("--seed", o->seed, "Seed of the random values of unbound variables (default 0)")->type_name("N");
  add_plan_args(*cmd, o->plan);
  cmd->add_flag("--interpreter", o->interpreter, "Run on the reference interpreter instead of compiled kernels");
  cmd->add_option("--device", o->device,
                  "Where fused kernels run: cpu (default) or cuda (GPU 0; external ops stay on the CPU; fails "
                  "with the reason when there is no GPU); cuda-emulated runs the device path on the CPU")
      ->type_name("cpu|cuda|cuda-emulated");
  cmd->add_option("--repeat", o->repeat, "Timed runs; the report gives the median (default 5)")->type_name("N");
  cmd->add_flag("--no-baseline", o->no_baseline,
                "Skip the f32 unfused baseline run (no speed-up and no error in the report)");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {model, nodes, op_nodes, ops, engine, seed, runs, run_ms, solo_runs, nonfinite_reference_runs, first_run_ms, "
                "baseline_f32_unfused_ms, max_abs_error, max_rel_error, amp: {target, casts_inserted, casts_removed, "
                "casts_final, casts_reused, params_offline, lp16_nodes, fp32_nodes} or null, plan: {fused, device, "
                "kernels, fused_ops, external_ops, views, constant_steps, widened_external, folded_batchnorms, fused_epilogues, row_kernels, "
                "ops_per_kernel, compilations, kernels_cold, kernels_disk, kernels_memory, compile_cold_ms, plan_from_disk, plan_ms, compile_cached_ms, arena_bytes, intermediate_bytes, "
                "in_place, onednn_ops, guarded_steps, guards_by_scan, host_round_trips, fallbacks, slow_external} or null, transfers: {uploads, "
                "upload_bytes, downloads, download_bytes} or null, outputs: [{name, shape, dtype, min, max, mean, "
                "nonfinite}], backward: {gradients: [{name, shape, dtype, min, max, mean, l2_norm, nonfinite}], "
                "head_grads, forward_ms, forward_kernels, forward_external_ops, saved_values, saved_bytes, "
                "recomputed_values, recompute_bytes_not_moved} or null, saved}; kernels, fused_ops, external_ops and "
                "views count the steps of every run, "
                "constant_steps those computed from the weights alone on the first run; min, max and mean are over "
                "finite elements");
  cmd->footer("Variables without --inputs or --params get seeded random values: inputs uniform in [-1, 1), weights\n"
              "scaled by 1/sqrt(fan-in), BatchNorm variances in [0.5, 1.5), token ids below the vocabulary\n"
              "of the Embedding that reads them, SoftmaxOutput labels below its class count. The same seed\n"
              "gives the same values on every platform.");
  return {cmd, [o] { return run_model(*o); }};
}

}  // namespace ampfuse::tools
