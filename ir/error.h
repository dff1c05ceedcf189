// The one exception type users see: a message that names the file, node and argument.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ampfuse {

// A user-facing error. The message is complete on its own ("model.json: node 'conv0'
// (Convolution): input 1 has shape [3] but ..."); callers add context by catching and
// rethrowing with a prefix (see with_context).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Runs fn(); an Error it throws comes back out with "prefix: " in front of its message.
template <class Fn>
decltype(auto) with_context(const std::string& prefix, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error& e) {
    throw Error(prefix + ": " + e.what());
  }
}

}  // namespace ampfuse
