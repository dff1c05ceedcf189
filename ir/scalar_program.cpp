#include "ir/scalar_program.h"

#include "ir/error.h"

namespace ampfuse::ir {

std::string_view scalar_op_name(ScalarOp op) {
  switch (op) {
    case ScalarOp::input: return "input";
    case ScalarOp::constant: return "const";
    case ScalarOp::philox_bits24: return "philox_bits24";
    case ScalarOp::philox_bits24_at: return "philox_bits24_at";
    case ScalarOp::neg: return "neg";
    case ScalarOp::abs: return "abs";
    case ScalarOp::sign: return "sign";
    case ScalarOp::exp: return "exp";
    case ScalarOp::log: return "log";
    case ScalarOp::log1p: return "log1p";
    case ScalarOp::expm1: return "expm1";
    case ScalarOp::sqrt: return "sqrt";
    case ScalarOp::rsqrt: return "rsqrt";
    case ScalarOp::erf: return "erf";
    case ScalarOp::tanh: return "tanh";
    case ScalarOp::floor: return "floor";
    case ScalarOp::ceil: return "ceil";
    case ScalarOp::trunc: return "trunc";
    case ScalarOp::round: return "round";
    case ScalarOp::sin: return "sin";
    case ScalarOp::cos: return "cos";
    case ScalarOp::tan: return "tan";
    case ScalarOp::asin: return "asin";
    case ScalarOp::acos: return "acos";
    case ScalarOp::atan: return "atan";
    case ScalarOp::sinh: return "sinh";
    case ScalarOp::cosh: return "cosh";
    case ScalarOp::asinh: return "asinh";
    case ScalarOp::acosh: return "acosh";
    case ScalarOp::atanh: return "atanh";
    case ScalarOp::log2: return "log2";
    case ScalarOp::log10: return "log10";
    case ScalarOp::cbrt: return "cbrt";
    case ScalarOp::tgamma: return "tgamma";
    case ScalarOp::lgamma: return "lgamma";
    case ScalarOp::erfinv: return "erfinv";
    case ScalarOp::isfinite: return "isfinite";
    case ScalarOp::round_to: return "round_to";
    case ScalarOp::add: return "add";
    case ScalarOp::sub: return "sub";
    case ScalarOp::mul: return "mul";
    case ScalarOp::div: return "div";
    case ScalarOp::pow: return "pow";
    case ScalarOp::fmod: return "fmod";
    case ScalarOp::max: return "max";
    case ScalarOp::min: return "min";
    case ScalarOp::eq: return "eq";
    case ScalarOp::ne: return "ne";
    case ScalarOp::lt: return "lt";
    case ScalarOp::le: return "le";
    case ScalarOp::gt: return "gt";
    case ScalarOp::ge: return "ge";
    case ScalarOp::select: return "select";
  }
  return "?";
}

int scalar_op_arity(ScalarOp op) {
  switch (op) {
    case ScalarOp::input:
    case ScalarOp::constant:
    case ScalarOp::philox_bits24: return 0;
    case ScalarOp::add:
    case ScalarOp::sub:
    case ScalarOp::mul:
    case ScalarOp::div:
    case ScalarOp::pow:
    case ScalarOp::fmod:
    case ScalarOp::max:
    case ScalarOp::min:
    case ScalarOp::eq:
    case ScalarOp::ne:
    case ScalarOp::lt:
    case ScalarOp::le:
    case ScalarOp::gt:
    case ScalarOp::ge: return 2;
    case ScalarOp::select: return 3;
    default: return 1;
  }
}

bool is_transcendental(ScalarOp op) {
  switch (op) {
    case ScalarOp::exp:
    case ScalarOp::log:
    case ScalarOp::log1p:
    case ScalarOp::expm1:
    case ScalarOp::erf:
    case ScalarOp::tanh:
    case ScalarOp::pow: return true;
    default: return false;
  }
}

bool is_library_call(ScalarOp op) {
  switch (op) {
    case ScalarOp::sin:
    case ScalarOp::cos:
    case ScalarOp::tan:
    case ScalarOp::asin:
    case ScalarOp::acos:
    case ScalarOp::atan:
    case ScalarOp::sinh:
    case ScalarOp::cosh:
    case ScalarOp::asinh:
    case ScalarOp::acosh:
    case ScalarOp::atanh:
    case ScalarOp::log2:
    case ScalarOp::log10:
    case ScalarOp::cbrt:
    case ScalarOp::tgamma:
    case ScalarOp::lgamma:
    case ScalarOp::erfinv: return true;
    default: return false;
  }
}

ScalarBuilder::ScalarBuilder(int num_inputs) { p_.num_inputs = num_inputs; }

ScalarBuilder::Val ScalarBuilder::input(int i) {
  if (i < 0 || i >= p_.num_inputs) fail("scalar recipe reads input {} of {}", i, p_.num_inputs);
  p_.instrs.push_back({.op = ScalarOp::input, .index = i});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::constant(double v) {
  p_.instrs.push_back({.op = ScalarOp::constant, .value = v});
  return static_cast<Val>(p_.instrs.size() - 1);
}

namespace {
void check_operand(const ScalarProgram& p, ScalarBuilder::Val v) {
  if (v < 0 || static_cast<size_t>(v) >= p.instrs.size()) fail("scalar recipe uses undefined value %{}", v);
}
}  // namespace

ScalarBuilder::Val ScalarBuilder::unary(ScalarOp op, Val a) {
  // round_to and philox_bits24_at carry fields of their own: their builders set them.
  if (scalar_op_arity(op) != 1 || op == ScalarOp::round_to || op == ScalarOp::philox_bits24_at)
    fail("{} is not a unary scalar op", scalar_op_name(op));
  check_operand(p_, a);
  p_.instrs.push_back({.op = op, .a = a});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::binary(ScalarOp op, Val a, Val b) {
  if (scalar_op_arity(op) != 2) fail("{} is not a binary scalar op", scalar_op_name(op));
  check_operand(p_, a);
  check_operand(p_, b);
  p_.instrs.push_back({.op = op, .a = a, .b = b});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::select(Val cond, Val if_true, Val if_false) {
  check_operand(p_, cond);
  check_operand(p_, if_true);
  check_operand(p_, if_false);
  p_.instrs.push_back({.op = ScalarOp::select, .a = cond, .b = if_true, .c = if_false});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::round_to(Val a, DType t) {
  check_operand(p_, a);
  p_.instrs.push_back({.op = ScalarOp::round_to, .a = a, .dtype = t});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::philox_bits24(uint64_t seed, uint64_t offset) {
  p_.instrs.push_back({.op = ScalarOp::philox_bits24, .seed = seed, .offset = offset});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarBuilder::Val ScalarBuilder::philox_bits24_at(Val step, uint64_t seed, uint64_t offset, uint64_t stride) {
  check_operand(p_, step);
  p_.instrs.push_back({.op = ScalarOp::philox_bits24_at, .a = step, .seed = seed, .offset = offset, .stride = stride});
  return static_cast<Val>(p_.instrs.size() - 1);
}

ScalarProgram ScalarBuilder::finish(std::vector<Val> results) {
  for (Val r : results) check_operand(p_, r);
  p_.results = std::move(results);
  return std::move(p_);
}

bool uses_element_index(const ScalarProgram& p) {
  for (const ScalarInstr& s : p.instrs)
    if (reads_element_index(s.op)) return true;
  return false;
}

std::string print_scalar_program(const ScalarProgram& p) {
  std::string out;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ScalarInstr& s = p.instrs[i];
    out += fmt::format("%{} = {}", i, scalar_op_name(s.op));
    switch (s.op) {
      case ScalarOp::input: out += fmt::format(" {}", s.index); break;
      case ScalarOp::constant: out += fmt::format(" {}", s.value); break;
      case ScalarOp::round_to: out += fmt::format(" %{} to {}", s.a, dtype_name(s.dtype)); break;
      case ScalarOp::philox_bits24: out += fmt::format(" seed {} offset {}", s.seed, s.offset); break;
      case ScalarOp::philox_bits24_at:
        out += fmt::format(" %{} seed {} offset {} stride {}", s.a, s.seed, s.offset, s.stride);
        break;
      default: {
        const int n = scalar_op_arity(s.op);
        out += fmt::format(" %{}", s.a);
        if (n > 1) out += fmt::format(", %{}", s.b);
        if (n > 2) out += fmt::format(", %{}", s.c);
      }
    }
    out += '\n';
  }
  out += fmt::format("results {}\n", fmt::join(p.results, ", "));
  return out;
}

}  // namespace ampfuse::ir
