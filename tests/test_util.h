// Small helpers shared by the tests.
//
//   EXPECT_ERROR(stmt, "part of the message")
//       stmt must throw ampfuse::Error whose message contains the text; on failure the test
//       prints the message it got (or says nothing was thrown / something else was).
//   error_message([&] { ... })
//       the message of the ampfuse::Error fn throws, or "" (with a test failure) when none;
//       for checking several parts of one message.
//   ScopedTempDir dir;  dir.file("x.npy")
//       a fresh directory under the system temp dir, removed with its contents at scope end.
#pragma once

#include "ir/error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace ampfuse::testing {

template <class Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const ampfuse::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ampfuse::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ampfuse::Error, but nothing was thrown";
  return "";
}

#define EXPECT_ERROR(stmt, substring)                                                          \
  do {                                                                                         \
    const std::string ampfuse_msg_ = ::ampfuse::testing::error_message([&] { (void)(stmt); }); \
    EXPECT_NE(ampfuse_msg_.find(substring), std::string::npos)                                 \
        << "message: " << ampfuse_msg_ << "\n expected it to contain: " << (substring);        \
  } while (0)

class ScopedTempDir {
 public:
  ScopedTempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("ampfuse_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ampfuse::testing
