// Running the `ampfuse` program from tests as a user runs it: exit status, stdout, stderr.
#pragma once

#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace ampfuse {

struct CliResult {
  int status = -1;
  std::string out, err;
};

// Runs a command line with /bin/sh (it may set variables, change directory, ...).
inline CliResult run_shell(const std::string& command) {
  testing::ScopedTempDir tmp;
  const std::string err_file = tmp.file("stderr");
  const std::string cmd = fmt::format("{{ {}\n}} 2>'{}'", command, err_file);
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return r;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

// The ampfuse program with `args` (shell words: quote paths).
inline CliResult run_cli(const std::string& args) { return run_shell(fmt::format("'{}' {}", AMPFUSE_CLI_PATH, args)); }

inline nlohmann::json parse_json(const CliResult& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON object (" << e.what() << "):\n" << r.out << "\nstderr:\n" << r.err;
    return {};
  }
}

inline std::string model_path(const std::string& file) { return std::string(AMPFUSE_MODELS_DIR) + "/" + file; }

#define SKIP_WITHOUT_MODEL(path)                                                        \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models here: " << path

// One line on stderr, naming the problem, exit status 1, nothing half-printed on stdout.
inline void expect_clean_error(const CliResult& r, const std::string& part) {
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("ampfuse: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "stderr: " << r.err << "\nexpected: " << part;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace ampfuse
