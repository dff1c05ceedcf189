// The README against the binary: every `ampfuse` command shown in its code blocks runs and
// exits as shown, and every option, JSON key and environment variable of the program is
// documented in it. A README that drifts from the code fails here.
//
// A command is a line of a fenced code block of the form
//   [$ ] [NAME=VALUE ]... [./]build/ampfuse ARGS [# exit status N]
// (or plain `ampfuse ARGS`). It runs in a fresh directory holding a `models` link to the
// MXNet models, so that `models/...` paths and output files work as from the repository
// root; `--repeat N` becomes `--repeat 1` and `run` gets `--repeat 1` when it has none.
// Commands that need the models skip without them, `.svg` ones without Graphviz, and runs
// of a model file in the sanitizer build.
#include "ampfuse/version.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ampfuse {
namespace {

const std::filesystem::path kSourceDir = AMPFUSE_SOURCE_DIR;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

const std::string& readme() {
  static const std::string text = read_text(kSourceDir / "README.md");
  return text;
}

// The README from the line that starts with `heading` to the next heading of the same or a
// higher level.
std::string readme_section(const std::string& heading) {
  const std::string& text = readme();
  const size_t start = text.find("\n" + heading);
  if (start == std::string::npos) {
    ADD_FAILURE() << "README.md has no heading starting with '" << heading << "'";
    return "";
  }
  const std::string level = heading.substr(0, heading.find(' ') + 1);  // "## " or "### "
  size_t end = start + 1;
  while (true) {
    end = text.find("\n#", end + 1);
    if (end == std::string::npos) break;
    const size_t hashes = text.find_first_not_of('#', end + 1) - (end + 1);
    if (hashes <= level.size() - 1 && text[end + 1 + hashes] == ' ') break;
  }
  return text.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1);
}

struct Example {
  int line = 0;      // in README.md, 1-based
  std::string env;   // NAME=VALUE assignments before the program, as written
  std::string args;  // after the program name, without the comment
  int status = 0;    // from "# exit status N"
};

std::vector<Example> readme_examples() {
  static const std::regex command(
      R"(^\s*(?:\$\s+)?((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(?:\./)?(?:build/)?ampfuse(?:\s+(.*))?$)");
  static const std::regex exit_status(R"(#\s*exit status (\d+))");
  std::vector<Example> examples;
  std::istringstream in(readme());
  std::string line, joined;
  bool in_block = false;
  int number = 0, first = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      continue;
    }
    if (!in_block) continue;
    if (joined.empty()) first = number;
    if (!line.empty() && line.back() == '\\') {  // continued on the next line
      joined += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    joined += line;
    std::smatch m;
    if (std::regex_match(joined, m, command)) {
      Example e;
      e.line = first;
      e.env = m[1].str();
      std::string rest = m[2].str();
      std::smatch st;
      if (std::regex_search(rest, st, exit_status)) e.status = std::stoi(st[1].str());
      if (const size_t hash = rest.find(" #"); hash != std::string::npos) rest.resize(hash);
      rest.erase(rest.find_last_not_of(' ') + 1);
      e.args = rest;
      examples.push_back(e);
    }
    joined.clear();
  }
  return examples;
}

std::string first_word(const std::string& args) { return args.substr(0, args.find(' ')); }

// Fast enough for a test: one timed run.
std::string with_one_repeat(std::string args) {
  static const std::regex repeat(R"(--repeat[ =]\d+)");
  if (std::regex_search(args, repeat)) return std::regex_replace(args, repeat, "--repeat 1");
  if (first_word(args) == "run") args += " --repeat 1";
  return args;
}

bool dot_program_on_path() { return run_shell("command -v dot >/dev/null").status == 0; }

TEST(CliReadme, EveryCommandRunsAsShown) {
  const std::vector<Example> examples = readme_examples();
  ASSERT_GE(examples.size(), 10u) << "README.md lost its examples, or this parser lost track of them";
  std::set<std::string> commands;
  for (const Example& e : examples) commands.insert(first_word(e.args));
  for (const char* c : {"info", "run", "convert", "dot", "fuzz", "train", "--version"})
    EXPECT_TRUE(commands.count(c)) << "no README example of 'ampfuse " << c << "'";

  testing::ScopedTempDir dir;
  const bool have_models = std::filesystem::is_directory(AMPFUSE_MODELS_DIR);
  if (have_models) std::filesystem::create_directory_symlink(AMPFUSE_MODELS_DIR, dir.path() / "models");
  std::filesystem::create_directory_symlink(AMPFUSE_DATA_DIR, dir.path() / "data");
  const bool have_dot = dot_program_on_path();
  double total_seconds = 0;
  for (const Example& e : examples) {
    const std::string shown = e.env + "ampfuse " + e.args;
    if (!have_models && e.args.find("models/") != std::string::npos) {
      std::printf("README.md:%d: skipped (no models in %s): %s\n", e.line, AMPFUSE_MODELS_DIR, shown.c_str());
      continue;
    }
    if (!have_dot && e.args.find(".svg") != std::string::npos) {
      std::printf("README.md:%d: skipped (Graphviz's dot is not on PATH): %s\n", e.line, shown.c_str());
      continue;
    }
#if defined(__SANITIZE_ADDRESS__)
    // Whole-model runs take minutes in the sanitizer build; the release build runs them.
    if (first_word(e.args) == "run" && e.args.find(".json") != std::string::npos) {
      std::printf("README.md:%d: skipped under ASan: %s\n", e.line, shown.c_str());
      continue;
    }
#endif
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run_shell(fmt::format("cd '{}' && {}'{}' {}", dir.path().string(), e.env, AMPFUSE_CLI_PATH,
                                              with_one_repeat(e.args)));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds += seconds;
    std::printf("README.md:%d: %.1f s: %s\n", e.line, seconds, shown.c_str());
    SCOPED_TRACE(fmt::format("README.md:{}: {} ({:.1f} s)", e.line, shown, seconds));
    EXPECT_EQ(r.status, e.status) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
    if (e.status == 0) {
      EXPECT_EQ(r.err.find("ampfuse: error:"), std::string::npos) << r.err;
    } else if (e.status == 1) {
      expect_clean_error(r, "");
    }
    if (e.args.find("--json") != std::string::npos && e.status != 1) parse_json(r);
  }
  std::printf("%zu README commands in %.1f s\n", examples.size(), total_seconds);
}

// The options each `COMMAND --help` lists, without --help.
std::set<std::string> help_options(const std::string& command) {
  const CliResult r = run_cli(command + " --help");
  EXPECT_EQ(r.status, 0) << r.err;
  static const std::regex option(R"(^\s+(?:-[a-zA-Z],)?(--[a-z0-9][a-z0-9-]*))");
  std::set<std::string> options;
  std::istringstream in(r.out);
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, option) && m[1] != "--help") options.insert(m[1]);
  return options;
}

// `text` holds `word` as a whole word (not as the start of a longer option).
bool has_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-' || text[end] == '_'))
      return true;
  }
  return false;
}

TEST(CliReadme, EveryOptionIsDocumentedUnderItsCommand) {
  for (const std::string command : {"info", "run", "convert", "dot", "fuzz", "train"}) {
    const std::set<std::string> options = help_options(command);
    EXPECT_GE(options.size(), 2u) << command << " --help lists no options";
    const std::string section = readme_section("### `ampfuse " + command + " ");
    for (const std::string& o : options)
      EXPECT_TRUE(has_word(section, o)) << "ampfuse " << command << " " << o << " is not in its README section";
  }
  for (const std::string& o : help_options(""))
    EXPECT_TRUE(has_word(readme(), o)) << "ampfuse " << o << " is not in README.md";
}

// Every key of a JSON object, recursively, except the keys of `data` objects (op names,
// kernel sizes), which are values rather than names the README can list.
void collect_keys(const nlohmann::json& j, std::set<std::string>& keys) {
  if (j.is_array())
    for (const nlohmann::json& x : j) collect_keys(x, keys);
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    keys.insert(key);
    if (key != "ops" && key != "ops_per_kernel" && key != "op_classes") collect_keys(value, keys);
  }
}

void expect_keys_documented(const CliResult& r, const std::string& command) {
  std::set<std::string> keys;
  collect_keys(parse_json(r), keys);
  EXPECT_GE(keys.size(), 5u) << r.out;
  const std::string section = readme_section("### `ampfuse " + command + " ");
  for (const std::string& k : keys)
    EXPECT_NE(section.find("\"" + k + "\""), std::string::npos)
        << "ampfuse " << command << " --json prints \"" << k << "\", which its README section does not list";
}

TEST(CliReadme, EveryJsonKeyIsDocumentedUnderItsCommand) {
  testing::ScopedTempDir dir;
  const CliResult run = run_cli(fmt::format("run --json --amp bf16 --repeat 1 --save-outputs '{}'", dir.file("out")));
  ASSERT_EQ(run.status, 0) << run.err;
  expect_keys_documented(run, "run");
  const CliResult device = run_cli("run --json --device cuda-emulated --repeat 1 --no-baseline");
  ASSERT_EQ(device.status, 0) << device.err;
  expect_keys_documented(device, "run");

  const std::string model = model_path("mlp_legacy_000800-test-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  const CliResult info = run_cli(fmt::format("info '{}' --shape data=2,100 --json", model));
  ASSERT_EQ(info.status, 0) << info.err;
  expect_keys_documented(info, "info");
  const CliResult partial = run_cli(fmt::format("info '{}' --json", model));
  ASSERT_EQ(partial.status, 2) << partial.err;
  expect_keys_documented(partial, "info");
  const CliResult convert =
      run_cli(fmt::format("convert '{}' --shape data=2,100 --amp fp16 --json -o '{}'", model, dir.file("c.json")));
  ASSERT_EQ(convert.status, 0) << convert.err;
  expect_keys_documented(convert, "convert");
  const std::string digits = std::string(AMPFUSE_DATA_DIR) + "/digits/";
  const CliResult train = run_cli(fmt::format(
      "train '{}' --data '{}train_images.npy' --labels '{}train_labels.npy' --test-data '{}test_images.npy' "
      "--test-labels '{}test_labels.npy' --epochs 1 --json",
      model_path("digits/digits_mlp-symbol.json"), digits, digits, digits, digits));
  ASSERT_EQ(train.status, 0) << train.err;
  expect_keys_documented(train, "train");
}

// Environment variables the code reads: std::getenv of a literal name in C++, the
// variables shell scripts give defaults to, and os.environ reads in Python.
std::set<std::string> environment_variables_in_sources() {
  // Names read by getenv or by runtime::env_count (runtime/env_count.h).
  static const std::regex getenv_call(R"re((?:getenv|env_count)\("([A-Z_][A-Z0-9_]*)"[,)])re");
  static const std::regex shell_default(R"(\$\{([A-Z_][A-Z0-9_]*):-)");
  static const std::regex python_environ(R"re(environ(?:\.get)?[\[(]"([A-Z_][A-Z0-9_]*)")re");
  std::set<std::string> names;
  for (const char* folder : {"ir", "codegen", "runtime", "engine", "tools", "fuzz", "models", "tests", "bench",
                             "examples", "scripts", "frameworks", "python"}) {
    const std::filesystem::path root = kSourceDir / folder;
    if (!std::filesystem::is_directory(root)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".sh" && ext != ".py")) continue;
      const std::string text = read_text(entry.path());
      for (const std::regex* re : {&getenv_call, &shell_default, &python_environ})
        for (auto it = std::sregex_iterator(text.begin(), text.end(), *re); it != std::sregex_iterator(); ++it)
          names.insert((*it)[1].str());
    }
  }
  names.erase("PATH");  // the shell's, for finding Graphviz
  return names;
}

TEST(CliReadme, EveryEnvironmentVariableIsDocumented) {
  std::set<std::string> names = environment_variables_in_sources();
  EXPECT_TRUE(names.count("AMPFUSE_THREADS") && names.count("AMPFUSE_STRICT") && names.count("AMPFUSE_DUMP"))
      << "the source scan lost track";
  // Read by OpenMP for oneDNN and the kernels alike (runtime/thread_pool.h).
  names.insert({"OMP_NUM_THREADS", "OMP_WAIT_POLICY"});
  const std::string section = readme_section("## Environment switches");
  for (const std::string& name : names)
    EXPECT_NE(section.find("\n- `" + name), std::string::npos)
        << name << " has no entry (a line \"- `" << name << "...\") in README.md's environment section";
}

// The items the error for a bad AMPFUSE_DUMP lists are the ones the README describes.
TEST(CliReadme, EveryDumpItemIsDocumented) {
  const CliResult r = run_shell(fmt::format("AMPFUSE_DUMP=bogus '{}' run --repeat 1 --no-baseline", AMPFUSE_CLI_PATH));
  expect_clean_error(r, "AMPFUSE_DUMP");
  const size_t from = r.err.find("list of "), to = r.err.find(')', from);
  ASSERT_NE(from, std::string::npos) << r.err;
  std::string items = r.err.substr(from + 8, to - from - 8);  // "ir, plan, ..., or all"
  items = std::regex_replace(items, std::regex("or "), "");
  const std::string section = readme_section("## Environment switches");
  std::istringstream in(items);
  std::string item;
  int count = 0;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    ++count;
    EXPECT_NE(section.find("`" + item + "`"), std::string::npos) << "AMPFUSE_DUMP item '" << item << "'";
  }
  EXPECT_GE(count, 6) << r.err;
}

TEST(CliHelp, VersionNamesAmpfuseLlvmAndOnednn) {
  const CliResult r = run_cli("--version");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(fmt::format("ampfuse {}\n", AMPFUSE_VERSION), 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nLLVM 19."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\noneDNN "), std::string::npos) << r.out;
}

TEST(CliHelp, HelpTextsMatchWhatTheCommandsDo) {
  // Models run compiled by default; the interpreter is an option.
  const CliResult top = run_cli("--help");
  EXPECT_NE(top.out.find("compiled"), std::string::npos) << top.out;
  // convert takes a low-precision type only, and says so.
  const CliResult convert = run_cli("convert --help");
  EXPECT_NE(convert.out.find("--amp bf16|fp16"), std::string::npos) << convert.out;
  EXPECT_EQ(convert.out.find("off|"), std::string::npos) << convert.out;
}

}  // namespace
}  // namespace ampfuse
