#include "ir/special_functions.h"

#include <array>
#include <cmath>
#include <limits>

namespace ampfuse::ir {

namespace {

// cephes polevl / p1evl: coefficients highest degree first; p1evl's leading 1 is implicit.
// Written as the same sequence of double multiply-adds (no FMA) MXNet compiles.
template <size_t N>
double poly(double x, const std::array<double, N>& c) {
  double acc = c[0];
  for (size_t i = 1; i < N; ++i) acc = acc * x + c[i];
  return acc;
}
template <size_t N>
double monic_poly(double x, const std::array<double, N>& c) {
  double acc = x + c[0];
  for (size_t i = 1; i < N; ++i) acc = acc * x + c[i];
  return acc;
}

// cephes ndtri's published coefficients (MXNet copies them unchanged).
// |y - 0.5| <= 3/8: x = w + w^3 P0(w^2) / Q0(w^2), times sqrt(2 pi).
constexpr std::array<double, 5> kP0 = {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                                       1.39312609387279679503E1, -1.23916583867381258016E0};
constexpr std::array<double, 8> kQ0 = {1.95448858338141759834E0,  4.67627912898881538453E0, 8.63602421390890590575E1,
                                       -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
                                       1.59056225126211695515E1,  -1.18331621121330003142E0};
// z = sqrt(-2 log y) in [2, 8).
constexpr std::array<double, 9> kP1 = {
    4.05544892305962419923E0,   3.15251094599893866154E1,   5.71628192246421288162E1,
    4.40805073893200834700E1,   1.46849561928858024014E1,   2.18663306850790267539E0,
    -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
constexpr std::array<double, 8> kQ1 = {
    1.57799883256466749731E1, 4.53907635128879210584E1,   4.13172038254672030440E1,   1.50425385692907503408E1,
    2.50464946208309415979E0, -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
// z in [8, 64).
constexpr std::array<double, 9> kP2 = {3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
                                       1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
                                       3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
constexpr std::array<double, 8> kQ2 = {6.02427039364742014255E0,  3.67983563856160859403E0,  1.37702099489081330271E0,
                                       2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
                                       2.89247864745380683936E-6, 6.79019408009981274425E-9};

constexpr double kExpMinus2 = 0.13533528323661269189;  // exp(-2)
constexpr double kSqrt2Pi = 2.50662827463100050242E0;

// The x with Phi(x) = p, for 0 < p < 1 (cephes ndtri, in MXNet's order of operations).
double ndtri(double p) {
  bool upper_tail = true;  // negate the result at the end
  double y = p;
  if (y > 1.0 - kExpMinus2) {
    y = 1.0 - y;
    upper_tail = false;
  }
  if (y > kExpMinus2) {
    y = y - 0.5;
    const double y2 = y * y;
    const double x = y + y * (y2 * poly(y2, kP0) / monic_poly(y2, kQ0));
    return x * kSqrt2Pi;
  }
  const double x = std::sqrt(-2.0 * std::log(y));
  const double x0 = x - std::log(x) / x;
  const double z = 1.0 / x;
  const double x1 = x < 8.0 ? z * poly(z, kP1) / monic_poly(z, kQ1) : z * poly(z, kP2) / monic_poly(z, kQ2);
  const double r = x0 - x1;
  return upper_tail ? -r : r;
}

}  // namespace

double mxnet_erfinv(double y) {
  constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // M_2_SQRTPI
  constexpr double kSqrtHalf = 0.70710678118654752440;       // M_SQRT1_2
  // Near 0, erf(x) = 2/sqrt(pi) x to double precision; (y + 1) / 2 would lose y's bits.
  if (-1e-7 < y && y < 1e-7) return y / kTwoOverSqrtPi;
  if (-1 < y && y < 1) return ndtri(0.5 * (y + 1)) * kSqrtHalf;
  if (y == -1 || y == 1) return std::copysign(std::numeric_limits<double>::infinity(), y);
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace ampfuse::ir

// The kernel helpers, with C linkage so that the JIT can bind them by name.
extern "C" {
double ampfuse_erfinv(double y) { return ampfuse::ir::mxnet_erfinv(y); }
float ampfuse_lgammaf(float x) {
  int sign = 0;
  return lgammaf_r(x, &sign);
}
double ampfuse_lgamma(double x) {
  int sign = 0;
  return lgamma_r(x, &sign);
}
}

namespace ampfuse::ir {

std::span<const KernelHelperSymbol> kernel_helper_symbols() {
  static const std::array<KernelHelperSymbol, 3> symbols = {{
      {kErfinvSymbol, reinterpret_cast<void*>(&ampfuse_erfinv)},
      {kLgammaF32Symbol, reinterpret_cast<void*>(&ampfuse_lgammaf)},
      {kLgammaF64Symbol, reinterpret_cast<void*>(&ampfuse_lgamma)},
  }};
  return symbols;
}

}  // namespace ampfuse::ir
