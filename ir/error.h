// Throwing the one exception type users see (ir/exception.h): a message that names the
// file, node and argument.
#pragma once

#include "ir/exception.h"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace ampfuse {

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

// As with_context, for loops over many nodes: the prefix is `label()`, called only when
// fn() throws, so that the common case formats no string.
template <class Label, class Fn>
decltype(auto) with_lazy_context(Label&& label, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error& e) {
    throw Error(std::forward<Label>(label)() + ": " + e.what());
  }
}

}  // namespace ampfuse
