// `ampfuse dot [MODEL.json] -o FILE.dot|FILE.svg`: a Graphviz picture of the fusion plan
// (engine/planning/graph_dot.h), after AMP conversion when --amp says so. An .svg goes through
// Graphviz's `dot` program.
#include "engine/lower.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/graph_dot.h"
#include "ir/error.h"
#include "runtime/device_api.h"
#include "tools/plan_args.h"
#include "tools/commands.h"
#include "tools/model_input.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sys/wait.h>
#include <unistd.h>

namespace ampfuse::tools {

namespace {

struct DotOptions {
  std::string model;
  std::vector<std::string> shapes;
  PlanArgs plan;
  std::string output;
};

// A word for the shell: single-quoted, with embedded quotes closed and escaped.
std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

bool program_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest(path);
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("-o {}: cannot write: {}", path, std::strerror(errno));
  f << text;
  f.close();
  if (!f) fail("-o {}: cannot write: {}", path, std::strerror(errno));
}

// Runs `dot -Tsvg` with `text` on its standard input, writing `path`. Its stderr goes to a
// temporary file so that a failure can be quoted.
void write_svg(const std::string& path, const std::string& text) {
  if (!program_on_path("dot"))
    fail("-o {}: writing SVG needs Graphviz's 'dot' program, which is not on PATH (install graphviz, as "
         "scripts/setup.sh does, or write a .dot file)",
         path);
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() / fmt::format("ampfuse_dot_{}.err", ::getpid());
  const std::string cmd = fmt::format("dot -Tsvg -o {} 2>{}", shell_quote(path), shell_quote(err_file.string()));
  // A `dot` that dies early must not take this process with it through SIGPIPE.
  struct IgnoreSigpipe {
    void (*old)(int) = std::signal(SIGPIPE, SIG_IGN);
    ~IgnoreSigpipe() { std::signal(SIGPIPE, old); }
  } ignore_sigpipe;
  FILE* p = ::popen(cmd.c_str(), "w");
  if (!p) fail("-o {}: cannot start 'dot': {}", path, std::strerror(errno));
  const size_t written = std::fwrite(text.data(), 1, text.size(), p);
  const int status = ::pclose(p);
  std::string err;
  {
    std::ifstream f(err_file);
    std::getline(f, err);
  }
  std::error_code ec;
  std::filesystem::remove(err_file, ec);
  if (written != text.size() || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::filesystem::remove(path, ec);
    fail("-o {}: 'dot -Tsvg' failed (exit status {}){}", path, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         err.empty() ? "" : ": " + err);
  }
}

int run_dot(const DotOptions& o) {
  const std::string ext = std::filesystem::path(o.output).extension().string();
  if (ext != ".dot" && ext != ".svg")
    fail("-o {}: unknown extension '{}' (use .dot for Graphviz text or .svg for a picture)", o.output, ext);
  const engine::ExecutorOptions eo = o.plan.executor_options();
  const std::map<std::string, ir::Shape> shapes = parse_shape_args(o.shapes);
  // The plan `run` runs: the same passes and planner options, for the CPU.
  ir::Graph g = load_model(o.model, shapes);
  check_excluded_nodes(eo.amp, g);
  const engine::Lowered lowered = engine::lower(std::move(g), engine::lower_options(eo, runtime::cpu_device()));
  const engine::Plan& plan = lowered.plan;
  const std::string text = engine::graph_to_dot(lowered.graph, plan);
  if (ext == ".dot")
    write_text(o.output, text);
  else
    write_svg(o.output, text);
  // Steps that read the weights alone run once (ExecutorOptions::constant_params).
  const std::vector<bool> constant = ir::computed_from_params(lowered.graph);
  int kernels = 0, once = 0, external = 0;
  for (const engine::PlanStep& s : plan.steps) {
    if (std::holds_alternative<engine::FusedKernel>(s)) {
      ++kernels;
      const std::vector<ir::ValueRef> reads = engine::step_reads(lowered.graph, s);
      once += std::all_of(reads.begin(), reads.end(), [&](ir::ValueRef v) { return constant[v.node]; });
    }
    external += std::holds_alternative<engine::ExternalStep>(s);
  }
  fmt::print("wrote {}: {} fused kernels ({} of them computed from the weights alone, once), {} external ops\n",
             o.output, kernels, once, external);
  return 0;
}

}  // namespace

Command add_dot_command(CLI::App& parent) {
  auto o = std::make_shared<DotOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "dot", "Draw a model's fusion plan with Graphviz: each fused kernel a cluster, dtypes as colours.");
  cmd->add_option("model", o->model,
                  "MXNet *-symbol.json file; without it, the embedded default model (data of shape N,3,32,32)")
      ->check(non_empty_path())
      ->type_name("MODEL.json");
  cmd->add_option("--shape", o->shapes, "Shape of an input, NAME=D0,D1,... (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=D0,D1,...");
  add_plan_args(*cmd, o->plan);
  cmd->add_option("-o,--output", o->output, "FILE.dot (Graphviz text) or FILE.svg (drawn by Graphviz's 'dot')")
      ->check(non_empty_path())
      ->required()
      ->type_name("FILE.dot|FILE.svg");
  cmd->footer("The plan is the one `ampfuse run` runs on the CPU with the same options (BatchNorms folded,\n"
              "casts around ops oneDNN computes in f32).\n"
              "Clusters are fused kernels (\"kernel K: N ops, B bytes\"); bold boxes run alone (oneDNN or the\n"
              "reference), dashed boxes are views, ellipses variables; edges carry dtype and shape.");
  return {cmd, [o] { return run_dot(*o); }};
}

}  // namespace ampfuse::tools
