#include "fuzz/targets/parser_targets.h"

#include "ir/exception.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "runtime/mxnet_params.h"
#include "runtime/npy.h"

#include <fmt/format.h>

#include <exception>
#include <sstream>
#include <typeinfo>

namespace ampfuse::fuzz {

namespace {

std::string_view as_text(std::span<const uint8_t> input) {
  return {reinterpret_cast<const char*>(input.data()), input.size()};
}

// Runs parse(); sorts what it throws into a proper rejection or a finding.
template <class Parse>
Verdict check(Parse&& parse) {
  try {
    parse();
    return {true, std::nullopt};
  } catch (const Error& e) {
    const std::string_view m = e.what();
    if (m.empty()) return {false, "an ampfuse::Error with an empty message"};
    // The one line the CLI prints; a newline inside it (a quoted name holding one, a
    // message with a second line) breaks that and interleaves with other output.
    if (m.find_first_of("\n\r") != std::string_view::npos) {
      std::string shown(m);
      for (char& c : shown)
        if (c == '\n' || c == '\r') c = '|';
      return {false, "a multi-line error (line breaks shown as |): " + shown};
    }
    return {};
  } catch (const std::exception& e) {
    return {false, fmt::format("an exception of type {}: {}", typeid(e).name(), e.what())};
  }
}

}  // namespace

Verdict fuzz_mxnet_json(std::span<const uint8_t> input) {
  return check([&] {
    const ir::Graph g = ir::import_mxnet_json(as_text(input), "fuzz.json");
    // What the CLI does next with an imported graph: print or export it.
    (void)ir::print_graph(g);
    (void)ir::export_mxnet_json(g);
  });
}

Verdict fuzz_text_ir(std::span<const uint8_t> input) {
  return check([&] {
    const ir::Graph g = ir::parse_graph(as_text(input), "fuzz.ir");
    (void)ir::print_graph(g);
  });
}

Verdict fuzz_npy(std::span<const uint8_t> input) {
  return check([&] {
    std::istringstream in(std::string(as_text(input)), std::ios::binary);
    (void)runtime::read_npy(in, input.size(), "fuzz.npy");
  });
}

Verdict fuzz_mxnet_params(std::span<const uint8_t> input) {
  return check([&] {
    std::istringstream in(std::string(as_text(input)), std::ios::binary);
    const runtime::NDArrayList list = runtime::read_mxnet_params(in, input.size(), "fuzz.params");
    if (!list.names.empty()) (void)runtime::params_by_name(list, "fuzz.params");
  });
}

}  // namespace ampfuse::fuzz
