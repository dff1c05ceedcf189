// Uses an installed ampfuse through <ampfuse/ampfuse.h> only: builds y = relu(FC(x)) with the
// GraphBuilder, runs it compiled on an input wrapped around a std::vector without a copy, in
// f32 and after bf16 AMP conversion, and checks the numbers. Exits 1 with a message when a
// check fails (tests/install/install_test.cmake runs it).
#include <ampfuse/ampfuse.h>  // first, so that it has to compile on its own

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace ampfuse;
using ir::DType;
using runtime::Tensor;

namespace {

void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "consumer: check failed: %s\n", what.c_str());
  std::exit(1);
}

Tensor f32_tensor(ir::Shape shape, const std::vector<float>& values) {
  Tensor t({DType::f32, std::move(shape)});
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

}  // namespace

int main() {
  check(std::string_view(AMPFUSE_VERSION) == CONSUMER_PACKAGE_VERSION,
        std::string("header version ") + AMPFUSE_VERSION + " but package version " + CONSUMER_PACKAGE_VERSION);

  // relu(x w^T + b) over x [2,3], w [4,3]; the second output is x reshaped (a view of x).
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {2, 3}});
  const ir::ValueRef h = b.op("FullyConnected", {x, b.param("w"), b.param("b")}, {{"num_hidden", "4"}});
  b.output(b.op("Activation", {h}, {{"act_type", "relu"}}));
  b.output(b.op("Reshape", {x}, {{"shape", "(3,2)"}}));
  const ir::Graph g = b.finish();

  std::vector<float> x_values = {1, 2, 3, -1, 0.5f, 2};
  const std::vector<float> w_values = {0.5f, -1, 0.25f, 1, 1, 1, -0.5f, 0, 2, 0.125f, 0.25f, -2};
  const std::vector<float> b_values = {0.5f, -4, 0, 1};
  std::vector<double> want(8);
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 4; ++o) {
      double sum = b_values[o];
      for (int k = 0; k < 3; ++k) sum += double(x_values[i * 3 + k]) * w_values[o * 3 + k];
      want[i * 4 + o] = std::max(sum, 0.0);
    }

  int released = 0;
  {
    runtime::Bindings vars = {{"x", Tensor::wrap(x_values.data(), {DType::f32, {2, 3}}, [&] { ++released; })},
                              {"w", f32_tensor({4, 3}, w_values)},
                              {"b", f32_tensor({4}, b_values)}};
    const engine::Executable exe = engine::Executable::compile(g);
    const std::vector<Tensor> out = exe.run(vars);
    for (int i = 0; i < 8; ++i)
      check(std::fabs(out[0].get_f64(i) - want[i]) <= 1e-6 * (1 + std::fabs(want[i])),
            "f32 element " + std::to_string(i) + ": " + std::to_string(out[0].get_f64(i)) + ", want " +
                std::to_string(want[i]));
    check(out[1].raw() == x_values.data(), "the reshaped output does not alias the wrapped input");

    // Low precision: bf16 keeps 8 significant bits.
    const engine::Executable amp = engine::Executable::compile(engine::convert_for_amp(g, {.target = DType::bf16}));
    const std::vector<Tensor> low = amp.run(vars);
    for (int i = 0; i < 8; ++i)
      check(std::fabs(low[0].get_f64(i) - want[i]) <= 0.02 * (1 + std::fabs(want[i])),
            "bf16 element " + std::to_string(i) + ": " + std::to_string(low[0].get_f64(i)));

    // Errors cross the library boundary as ampfuse::Error.
    std::string message;
    try {
      exe.run({{"x", f32_tensor({3, 2}, x_values)}, {"w", vars.at("w")}, {"b", vars.at("b")}});
    } catch (const Error& e) {
      message = e.what();
    }
    check(message.find("variable 'x'") != std::string::npos, "wrong binding: got '" + message + "'");
    check(released == 0, "the wrapped input was released while bound");
  }
  check(released == 1, "the wrapped input was released " + std::to_string(released) + " times, want once");

  std::printf("ampfuse %s: relu(FC(x)) in f32 and bf16 as expected\n", AMPFUSE_VERSION);
  return 0;
}
