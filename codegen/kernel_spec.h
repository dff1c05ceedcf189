// KernelSpec: one fused loop nest as the code generators see it, and its cache signature.
//
// A spec is concrete: it has the sizes and strides of one call. What the generated code
// may depend on is only its KernelSignature (structure, dtypes, rank, which operands are
// contiguous, broadcast or strided, index width, a staged transpose's tile shape); sizes
// and strides are run-time arguments. The emitters take a signature, never a spec, so two specs with the same
// cache_key() can share one compiled kernel by construction.
#pragma once

#include "ir/dtype.h"
#include "ir/scalar_program.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::codegen {

inline constexpr int kMaxRank = 8;

// An input or output tensor of the kernel, addressed as
// base[sum over d of index[d] * strides[d]] for the iteration index `index`.
struct OperandSpec {
  std::string name;  // for dumps and error messages
  ir::DType dtype = ir::DType::f32;
  // One per iteration dimension, in elements. 0 broadcasts along that dimension; a
  // permutation of row-major strides reads a transposed tensor.
  std::vector<int64_t> strides;
};

// "Any value is NaN or +-Inf" over the listed operands: for an input, every element the
// kernel reads; for an output, every element it writes, as stored (after rounding, so an
// f32 value that overflows f16 counts). The loss scaler's overflow check.
struct FlagSpec {
  std::string name;
  std::vector<int> operands;  // 0..inputs-1: inputs; inputs..inputs+outputs-1: outputs
};

// A row operation at the centre of a kernel (codegen/row_loops.cpp): per row of the
// iteration space's innermost dimension, the kernel evaluates x = `data` at every column,
// computes y = op(row of x) in f32, and then the body at every column with y as one more
// input. So elementwise ops before the row op (`data`) and after it (the body) share its one
// pass over memory, and the casts around it cost nothing. The reductions give one y a row:
// the body runs once a row (at column 0) and the outputs have stride 0 along the row.
enum class RowOp : uint8_t {
  softmax,      // y = exp((x - max) / t) / sum of them        (constant: the temperature t)
  log_softmax,  // y = (x - max) / t - log(sum of exp((x - max) / t))
  layer_norm,   // y = (x - mean) / sqrt(var + eps) * gamma + beta   (constant: eps)
  sum,          // y = sum of x, added in f64 (as the reference kernel) and rounded once
  mean,         // y = (sum of x in f64) / n, rounded once
  max,          // y = the largest x, NaN if any is (NaN-propagating)
  min,          // y = the smallest x, NaN if any is
};
const char* row_op_name(RowOp op);
constexpr bool row_op_reduces(RowOp op) { return op >= RowOp::sum; }

struct RowSpec {
  RowOp op = RowOp::softmax;
  // x at one element: result 0 of this program, whose inputs are the kernel's (input
  // operands, then parameters, as the body's), rounded to data_dtype: the value the
  // interpreter stores between the ops before the row op and the row op. Its further
  // results are stored, in the row's first pass, to the kernel's last outputs (the body's
  // results go to the ones before them).
  ir::ScalarProgram data;
  ir::DType data_dtype = ir::DType::f32;
  // y is rounded to this (the row op's output dtype) before the body reads it.
  ir::DType result_dtype = ir::DType::f32;
  double constant = 1.0;  // softmax, log_softmax: the temperature; layer_norm: eps
  int gamma = -1, beta = -1;  // layer_norm: the input operands of gamma and beta, read at the column
  friend bool operator==(const RowSpec&, const RowSpec&) = default;
};

struct KernelSpec {
  std::string name;            // for dumps and error messages
  std::vector<int64_t> shape;  // the iteration space; rank 0 (one element) to kMaxRank
  std::vector<OperandSpec> inputs;
  std::vector<OperandSpec> outputs;
  // Scalar run-time parameters (a loss scale, clip bounds): they change without a recompile.
  int num_params = 0;
  // f32 or f64: the type the body computes in (ir/scalar_program.h).
  ir::DType compute = ir::DType::f32;
  // The body. Its inputs are the input operands (loaded and widened to `compute`), then the
  // parameters (rounded to `compute`); results[k] is stored to outputs[k], rounded to that
  // output's dtype by the round_to rules of ir/scalar_program.h.
  ir::ScalarProgram body;
  std::vector<FlagSpec> flags;
  // A row kernel: the body reads y as its input after the parameters. Rank 1 or more; the
  // innermost dimension is the row; compute f32; no flags. The launch splits whole rows
  // between threads (the function's begin/end are row indices).
  std::optional<RowSpec> row;

  int64_t num_elements() const;
  // Throws ampfuse::Error naming the kernel and the operand, dimension or instruction at fault.
  void validate() const;
  // Structure without sizes: equal keys mean one compiled kernel serves both specs. Stride
  // classes are taken by value, so a batch of one keeps the key of a larger batch; only an
  // extent of 1 that makes a strided operand contiguous (or a transpose a copy) changes it,
  // for a faster kernel, and a staged transpose's two innermost extents where they are
  // narrow (TileShape). Throws like validate().
  std::string cache_key() const;
};

// Merges neighbouring dimensions d, d+1 of the iteration space wherever every operand
// walks them as one (strides[d] == strides[d+1] * shape[d+1], or either extent is 1): the
// same elements in the same order, flat indices unchanged, fewer and longer rows. An NCHW
// <-> NHWC transpose becomes [N, H*W, C] <-> [N, C, H*W], whose tiles run over the whole
// image plane (codegen/tiled_loops.cpp). Empty iteration spaces are left as they are.
void coalesce_dimensions(KernelSpec& spec);

// Row-major strides of a dense tensor of `shape`, in elements.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);

// How an operand is addressed, as far as the generated code is concerned. Extent-1
// dimensions are ignored (their stride never moves the address).
enum class Layout : uint8_t {
  contiguous,  // row-major over the iteration space: element i is base[i]
  scalar,      // every stride is 0: one element broadcast everywhere
  strided,     // anything else: walked with its per-dimension strides
};

// Per dimension of a strided operand, by the stride's value (extent-1 dimensions included):
// the generated code multiplies only by `general` strides and can vectorize `unit` inner
// strides as plain loads and stores.
enum class StrideClass : uint8_t { zero, unit, general };

struct OperandSignature {
  ir::DType dtype = ir::DType::f32;
  Layout layout = Layout::contiguous;
  std::vector<StrideClass> strides;  // rank entries when strided, else empty
};

// Unit stride along the rows (dimension rank-2) and a general one along the columns
// (rank-1): read against the outputs' order, what the tiles of codegen/tiled_loops.cpp take.
bool is_transposed(const OperandSignature& o, int rank);

// The tile shape a staged transpose (a transposed input, every output contiguous:
// codegen/tiled_loops.cpp) is compiled for. Each shape is its own code, and carrying them
// all made such a kernel ~7x slower to compile, so the shape is part of the signature: it
// follows from the extents of the two innermost dimensions only through whether they are
// narrow (2..4), so a batch or image size keeps the key (an H*W of 2..4 aside).
enum class TileShape : uint8_t {
  none,            // no staged transpose
  square,          // V x V tiles, element copies for what they do not cover
  narrow_columns,  // the last extent is tile_extent (NCHW -> NHWC with C = 3)
  narrow_rows,     // extent rank-2 is tile_extent and every transposed input's columns are
                   // dense (column stride tile_extent: NHWC -> NCHW with C = 3)
};
inline constexpr int64_t kNarrowTileMin = 2, kNarrowTileMax = 4;

// Everything the generated code depends on. Equal signatures give identical code.
struct KernelSignature {
  int rank = 0;  // 0 unless some operand is strided: flat loops do not care about rank
  std::vector<OperandSignature> inputs, outputs;
  int num_params = 0;
  ir::DType compute = ir::DType::f32;
  ir::ScalarProgram body;
  std::vector<std::vector<int>> flags;  // operand lists
  // Offsets need int64 (some extent or offset can pass 2^31); else int32 arithmetic.
  bool wide_index = false;
  // The outputs pass kStreamingOutputBytes (kernel_abi.h), so the launcher may ask for
  // non-temporal stores: the streaming loops are compiled. Without it args->streaming is
  // ignored. Never set for row or CUDA kernels.
  bool streams = false;
  // Row kernels: every operand is strided (its innermost stride class is what the column
  // loops vectorize on), and rank is the spec's.
  std::optional<RowSpec> row;
  TileShape tile = TileShape::none;
  int tile_extent = 0;  // the narrow tiles' rows or columns, else 0

  bool flat() const { return rank == 0; }  // every operand contiguous or scalar (never a row kernel)
  std::string key() const;
};

KernelSignature signature(const KernelSpec& spec);

// The printable form used by AMPFUSE_DUMP=code: operands with dtypes, strides and layouts,
// then the body, one instruction a line.
std::string print_kernel_spec(const KernelSpec& spec);

}  // namespace ampfuse::codegen
