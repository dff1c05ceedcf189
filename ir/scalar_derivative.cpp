#include "ir/scalar_derivative.h"

#include "ir/error.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace ampfuse::ir {

namespace {

using Val = ScalarBuilder::Val;
using Tangent = std::optional<Val>;  // nullopt: zero

// Chain-rule arithmetic on tangents that may be zero.
Tangent scaled(ScalarBuilder& b, Tangent t, Val factor) {
  if (!t) return std::nullopt;
  return b.mul(*t, factor);
}
Tangent sum(ScalarBuilder& b, Tangent x, Tangent y) {
  if (!x) return y;
  if (!y) return x;
  return b.add(*x, *y);
}
Tangent negated(ScalarBuilder& b, Tangent t) {
  if (!t) return std::nullopt;
  return b.unary(ScalarOp::neg, *t);
}
Val zero_or(ScalarBuilder& b, Tangent t) { return t ? *t : b.constant(0); }

// d/dx of a unary function at x (value y): the factor the tangent of x is multiplied by.
Val unary_factor(ScalarBuilder& b, ScalarOp op, Val x, Val y) {
  auto c = [&](double v) { return b.constant(v); };
  auto u = [&](ScalarOp o, Val a) { return b.unary(o, a); };
  switch (op) {
    case ScalarOp::exp: return y;
    case ScalarOp::log: return b.div(c(1), x);
    case ScalarOp::log1p: return b.div(c(1), b.add(c(1), x));
    case ScalarOp::expm1: return b.add(y, c(1));
    case ScalarOp::sqrt: return b.div(c(0.5), y);
    case ScalarOp::rsqrt: return b.mul(c(-0.5), b.div(y, x));  // -x^(-3/2) / 2
    case ScalarOp::erf: return b.mul(c(2 / std::sqrt(std::numbers::pi)), u(ScalarOp::exp, u(ScalarOp::neg, b.mul(x, x))));
    case ScalarOp::erfinv:  // sqrt(pi)/2 exp(y^2)
      return b.mul(c(std::sqrt(std::numbers::pi) / 2), u(ScalarOp::exp, b.mul(y, y)));
    case ScalarOp::tanh: return b.sub(c(1), b.mul(y, y));
    case ScalarOp::sin: return u(ScalarOp::cos, x);
    case ScalarOp::cos: return u(ScalarOp::neg, u(ScalarOp::sin, x));
    case ScalarOp::tan: return b.add(c(1), b.mul(y, y));
    case ScalarOp::asin: return u(ScalarOp::rsqrt, b.sub(c(1), b.mul(x, x)));
    case ScalarOp::acos: return u(ScalarOp::neg, u(ScalarOp::rsqrt, b.sub(c(1), b.mul(x, x))));
    case ScalarOp::atan: return b.div(c(1), b.add(c(1), b.mul(x, x)));
    case ScalarOp::sinh: return u(ScalarOp::cosh, x);
    case ScalarOp::cosh: return u(ScalarOp::sinh, x);
    case ScalarOp::asinh: return u(ScalarOp::rsqrt, b.add(b.mul(x, x), c(1)));
    case ScalarOp::acosh: return u(ScalarOp::rsqrt, b.sub(b.mul(x, x), c(1)));
    case ScalarOp::atanh: return b.div(c(1), b.sub(c(1), b.mul(x, x)));
    case ScalarOp::log2: return b.div(c(1 / std::numbers::ln2), x);
    case ScalarOp::log10: return b.div(c(1 / std::numbers::ln10), x);
    case ScalarOp::cbrt: return b.div(y, b.mul(c(3), x));  // x^(-2/3) / 3
    case ScalarOp::abs: return u(ScalarOp::sign, x);
    default: fail("internal: {} has no unary derivative rule", scalar_op_name(op));
  }
}

}  // namespace

std::optional<Val> scalar_tangent(ScalarBuilder& b, Val first, Val of, int wrt) {
  if (first < 0 || of < first || of >= b.size()) fail("internal: scalar_tangent over %{}..%{} of {}", first, of, b.size());
  // Tangents of every instruction in [first, of]; operands before `first` are inputs or
  // constants the recipe did not make (zero unless they are input `wrt`).
  std::vector<Tangent> t(static_cast<size_t>(of - first + 1));
  std::optional<Val> one;
  auto tangent_of = [&](Val v) -> Tangent {
    if (v >= first) return t[static_cast<size_t>(v - first)];
    const ScalarInstr& s = b.at(v);
    if (s.op == ScalarOp::input && s.index == wrt) {
      if (!one) one = b.constant(1);
      return one;
    }
    return std::nullopt;
  };
  for (Val v = first; v <= of; ++v) {
    const ScalarInstr s = b.at(v);  // a copy: appending may reallocate
    const Val x = s.a, y_of = v;
    Tangent r;
    switch (s.op) {
      case ScalarOp::input:
        if (s.index == wrt) r = b.constant(1);
        break;
      case ScalarOp::constant:
      case ScalarOp::philox_bits24:  // random bits: independent of the inputs
      case ScalarOp::philox_bits24_at:  // and piecewise constant in the step: 0 almost everywhere
      case ScalarOp::sign:
      case ScalarOp::floor:
      case ScalarOp::ceil:
      case ScalarOp::trunc:
      case ScalarOp::round:
      case ScalarOp::isfinite:
      case ScalarOp::eq:
      case ScalarOp::ne:
      case ScalarOp::lt:
      case ScalarOp::le:
      case ScalarOp::gt:
      case ScalarOp::ge: break;
      case ScalarOp::tgamma:
      case ScalarOp::lgamma:
        if (tangent_of(x)) fail("{} has no gradient (its derivative needs digamma, which ampfuse does not have)",
                                scalar_op_name(s.op));
        break;
      case ScalarOp::round_to: r = tangent_of(x); break;
      case ScalarOp::neg: r = negated(b, tangent_of(x)); break;
      case ScalarOp::add: r = sum(b, tangent_of(s.a), tangent_of(s.b)); break;
      case ScalarOp::sub: r = sum(b, tangent_of(s.a), negated(b, tangent_of(s.b))); break;
      case ScalarOp::mul: r = sum(b, scaled(b, tangent_of(s.a), s.b), scaled(b, tangent_of(s.b), s.a)); break;
      case ScalarOp::div: {
        // (a/b)' = a'/b - (a/b) b'/b
        Tangent ta = tangent_of(s.a), tb = tangent_of(s.b);
        if (ta) ta = b.div(*ta, s.b);
        if (tb) tb = b.unary(ScalarOp::neg, b.div(b.mul(*tb, y_of), s.b));
        r = sum(b, ta, tb);
        break;
      }
      case ScalarOp::pow: {
        // (a^b)' = b a^(b-1) a' + a^b log(a) b'
        Tangent ta = tangent_of(s.a), tb = tangent_of(s.b);
        if (ta) ta = b.mul(*ta, b.mul(s.b, b.binary(ScalarOp::pow, s.a, b.sub(s.b, b.constant(1)))));
        if (tb) tb = b.mul(*tb, b.mul(y_of, b.unary(ScalarOp::log, s.a)));
        r = sum(b, ta, tb);
        break;
      }
      case ScalarOp::fmod: {
        Tangent tb = tangent_of(s.b);
        if (tb) tb = b.mul(*tb, b.unary(ScalarOp::neg, b.unary(ScalarOp::trunc, b.div(s.a, s.b))));
        r = sum(b, tangent_of(s.a), tb);
        break;
      }
      case ScalarOp::max:
      case ScalarOp::min: {
        Tangent ta = tangent_of(s.a), tb = tangent_of(s.b);
        if (!ta && !tb) break;
        const Val a_wins = b.binary(s.op == ScalarOp::max ? ScalarOp::gt : ScalarOp::lt, s.a, s.b);
        r = b.select(a_wins, zero_or(b, ta), zero_or(b, tb));
        break;
      }
      case ScalarOp::select: {
        Tangent ta = tangent_of(s.b), tb = tangent_of(s.c);
        if (!ta && !tb) break;
        r = b.select(s.a, zero_or(b, ta), zero_or(b, tb));
        break;
      }
      default: {
        const Tangent tx = tangent_of(x);
        if (tx) r = b.mul(*tx, unary_factor(b, s.op, x, y_of));
        break;
      }
    }
    t[static_cast<size_t>(v - first)] = r;
  }
  return t.back();
}

}  // namespace ampfuse::ir
