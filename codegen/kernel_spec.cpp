#include "codegen/kernel_spec.h"

#include "codegen/kernel_abi.h"
#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <limits>

namespace ampfuse::codegen {

namespace {

constexpr int64_t kInt32Limit = int64_t{1} << 31;

std::string operand_label(const KernelSpec& spec, int k) {
  const int n_in = static_cast<int>(spec.inputs.size());
  const OperandSpec& o = k < n_in ? spec.inputs[k] : spec.outputs[k - n_in];
  return fmt::format("{} {} '{}'", k < n_in ? "input" : "output", k < n_in ? k : k - n_in, o.name);
}

// The largest element offset an operand can reach: sum over d of (extent-1) * stride.
int64_t max_offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t total = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    int64_t term = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &term) || __builtin_add_overflow(total, term, &total))
      return std::numeric_limits<int64_t>::max();
  }
  return total;
}

// How many of a row kernel's outputs (its last ones) its data program stores, per element in
// the row's first pass; the body's results go to the others.
size_t stored_by_row_data(const KernelSpec& spec) {
  return spec.row && !spec.row->data.results.empty() ? spec.row->data.results.size() - 1 : 0;
}

void validate_operand(const KernelSpec& spec, const OperandSpec& o, int k, bool is_output) {
  if (o.strides.size() != spec.shape.size())
    fail("kernel '{}': {} has {} strides for rank {}", spec.name, operand_label(spec, k), o.strides.size(),
         spec.shape.size());
  for (size_t d = 0; d < o.strides.size(); ++d) {
    if (o.strides[d] < 0)
      fail("kernel '{}': {} has negative stride {} in dimension {}", spec.name, operand_label(spec, k), o.strides[d],
           d);
    // Two iterations writing one element would race between threads and make the result
    // depend on the split. A reducing row kernel's body writes each output once a row.
    const bool body_output =
        is_output && static_cast<size_t>(k) + stored_by_row_data(spec) < spec.inputs.size() + spec.outputs.size();
    const bool row_result = spec.row && row_op_reduces(spec.row->op) && body_output && d + 1 == o.strides.size();
    if (is_output && row_result && o.strides[d] != 0)
      fail("kernel '{}': {} of the row {} has stride {} along the row (one value a row: 0)", spec.name,
           operand_label(spec, k), row_op_name(spec.row->op), o.strides[d]);
    if (is_output && !row_result && o.strides[d] == 0 && spec.shape[d] > 1)
      fail("kernel '{}': {} broadcasts (stride 0) along dimension {} of extent {}", spec.name,
           operand_label(spec, k), d, spec.shape[d]);
  }
  // Generated code computes offsets without overflow checks.
  if (max_offset(spec.shape, o.strides) == std::numeric_limits<int64_t>::max())
    fail("kernel '{}': {} addresses elements beyond 2^63", spec.name, operand_label(spec, k));
}

// `what` ("body", "row data") names the program in errors; it must read `expected_inputs`
// and give `expected_results`.
void validate_program(const KernelSpec& spec, const ir::ScalarProgram& p, const char* what, int expected_inputs,
                      size_t expected_results) {
  if (p.num_inputs != expected_inputs)
    fail("kernel '{}': the {} reads {} inputs but the kernel has {} operands and {} parameters{}", spec.name, what,
         p.num_inputs, spec.inputs.size(), spec.num_params, spec.row && what[0] == 'b' ? " and the row result" : "");
  if (p.results.size() != expected_results)
    fail("kernel '{}': the {} has {} results for {}", spec.name, what, p.results.size(),
         what[0] == 'b' ? fmt::format("{} outputs", expected_results) : fmt::format("{} values", expected_results));
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::ScalarInstr& s = p.instrs[i];
    const int arity = ir::scalar_op_arity(s.op);
    const int32_t operands[] = {s.a, s.b, s.c};
    for (int j = 0; j < arity; ++j)
      if (operands[j] < 0 || operands[j] >= static_cast<int32_t>(i))
        fail("kernel '{}': {} instruction %{} ({}) uses %{}, which is not defined before it", spec.name, what, i,
             ir::scalar_op_name(s.op), operands[j]);
    if (s.op == ir::ScalarOp::input && (s.index < 0 || s.index >= p.num_inputs))
      fail("kernel '{}': {} instruction %{} reads input {} of {}", spec.name, what, i, s.index, p.num_inputs);
  }
  for (int32_t r : p.results)
    if (r < 0 || static_cast<size_t>(r) >= p.instrs.size())
      fail("kernel '{}': {} result %{} is not defined", spec.name, what, r);
}

void validate_row(const KernelSpec& spec) {
  const RowSpec& row = *spec.row;
  if (spec.shape.empty()) fail("kernel '{}': a row kernel needs rank 1 or more", spec.name);
  if (spec.compute != ir::DType::f32) fail("kernel '{}': a row kernel computes in f32, not {}", spec.name, ir::dtype_name(spec.compute));
  if (!spec.flags.empty()) fail("kernel '{}': a row kernel has no flags", spec.name);
  for (ir::DType t : {row.data_dtype, row.result_dtype})
    if (!ir::is_float(t) || t == ir::DType::f64)
      fail("kernel '{}': the row {} reads and gives f32, f16 or bf16, not {}", spec.name, row_op_name(row.op), ir::dtype_name(t));
  if (row.data.results.empty() || row.data.results.size() > spec.outputs.size() + 1)
    fail("kernel '{}': the row data has {} results for x and at most {} outputs", spec.name, row.data.results.size(),
         spec.outputs.size());
  validate_program(spec, row.data, "row data", static_cast<int>(spec.inputs.size()) + spec.num_params,
                   row.data.results.size());
  for (const ir::ScalarInstr& s : row.data.instrs)
    if (ir::reads_element_index(s.op)) fail("kernel '{}': the row data draws random bits", spec.name);
  const bool affine = row.op == RowOp::layer_norm;
  const int n_in = static_cast<int>(spec.inputs.size());
  for (int k : {row.gamma, row.beta}) {
    if (!affine && k != -1) fail("kernel '{}': {} has no gamma or beta", spec.name, row_op_name(row.op));
    if (affine && (k < 0 || k >= n_in)) fail("kernel '{}': layer_norm's gamma or beta is input {} of {}", spec.name, k, n_in);
  }
}

void validate_body(const KernelSpec& spec) {
  if (spec.row) validate_row(spec);
  const int expected = static_cast<int>(spec.inputs.size()) + spec.num_params + (spec.row ? 1 : 0);
  validate_program(spec, spec.body, "body", expected, spec.outputs.size() - stored_by_row_data(spec));
  if (spec.row && ir::uses_element_index(spec.body))
    fail("kernel '{}': the body of a row kernel draws random bits", spec.name);
}

Layout classify(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  bool all_zero = true, row_major = true;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (strides[d] != 0) all_zero = false;
    if (strides[d] != expected) row_major = false;
    expected *= shape[d];
  }
  if (all_zero && !row_major) return Layout::scalar;
  return row_major ? Layout::contiguous : Layout::strided;
}

// By value even where the extent is 1 (the index there is always 0): a batch of one must
// not change the key of a kernel compiled for a larger batch.
StrideClass stride_class(int64_t stride) {
  if (stride == 0) return StrideClass::zero;
  return stride == 1 ? StrideClass::unit : StrideClass::general;
}

char layout_char(Layout l) {
  switch (l) {
    case Layout::contiguous: return 'c';
    case Layout::scalar: return 's';
    case Layout::strided: return 'g';
  }
  return '?';
}

char stride_char(StrideClass s) {
  switch (s) {
    case StrideClass::zero: return '0';
    case StrideClass::unit: return '1';
    case StrideClass::general: return 'n';
  }
  return '?';
}

// The key is written into one buffer: every compile computes it for each of a model's
// kernels (hundreds), and a string per piece showed in compile profiles.
using KeyBuffer = fmt::memory_buffer;

void append(KeyBuffer& b, std::string_view s) { b.append(s.data(), s.data() + s.size()); }

// An integer as "{}" writes it, without parsing a format string at run time.
template <class Int>  // signed or unsigned (philox seeds are uint64)
void append_digits(KeyBuffer& b, Int v) {
  const fmt::format_int digits(v);
  b.append(digits.data(), digits.data() + digits.size());
}

// " {}" (sep ' ') or ",{}" (sep ',') of an integer.
template <class Int>
void append_int(KeyBuffer& b, char sep, Int v) {
  b.push_back(sep);
  append_digits(b, v);
}

// fmt's "{:a}": C's %a ("0x1.8p+1", "-0x0p+0", "inf", "nan"). std::to_chars writes the
// same digits without the "0x".
void append_hex_float(KeyBuffer& b, char sep, double v) {
  b.push_back(sep);
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v, std::chars_format::hex);
  std::string_view t(text, ec == std::errc() ? end - text : 0);
  if (t.starts_with('-')) {
    b.push_back('-');
    t.remove_prefix(1);
  }
  if (!t.empty() && std::isxdigit(static_cast<unsigned char>(t[0])) && !t.starts_with("inf") && !t.starts_with("nan"))
    append(b, "0x");
  append(b, t);
}

void operand_key(KeyBuffer& b, const OperandSignature& o) {
  append(b, ir::dtype_name(o.dtype));
  b.push_back(':');
  b.push_back(layout_char(o.layout));
  for (StrideClass c : o.strides) b.push_back(stride_char(c));
}

// Exact and compact: constants print as hex floats so that no two differ in the key only
// by a rounding of their decimal form.
void body_key(KeyBuffer& b, const ir::ScalarProgram& p) {
  for (const ir::ScalarInstr& i : p.instrs) {
    append(b, ir::scalar_op_name(i.op));
    switch (i.op) {
      case ir::ScalarOp::input: append_int(b, ' ', i.index); break;
      case ir::ScalarOp::constant: append_hex_float(b, ' ', i.value); break;
      case ir::ScalarOp::round_to:
        append_int(b, ' ', i.a);
        b.push_back(' ');
        append(b, ir::dtype_name(i.dtype));
        break;
      case ir::ScalarOp::philox_bits24:
        append_int(b, ' ', i.seed);
        append_int(b, ' ', i.offset);
        break;
      // The step is an operand (a run-time value); seed, offset and stride are code.
      case ir::ScalarOp::philox_bits24_at:
        append_int(b, ' ', i.a);
        append_int(b, ' ', i.seed);
        append_int(b, ' ', i.offset);
        append_int(b, ' ', i.stride);
        break;
      default: {
        const int n = ir::scalar_op_arity(i.op);
        append_int(b, ' ', i.a);
        if (n > 1) append_int(b, ',', i.b);
        if (n > 2) append_int(b, ',', i.c);
      }
    }
    b.push_back(';');
  }
  append(b, "=>");
  for (size_t k = 0; k < p.results.size(); ++k) {
    if (k) b.push_back(',');
    append_digits(b, p.results[k]);
  }
}

// Which tile shape a staged transpose gets (TileShape), from the spec's two innermost
// extents and its transposed inputs' column strides.
void choose_tile(const KernelSpec& spec, KernelSignature& sig) {
  const int rank = sig.rank;
  if (rank < 2) return;
  for (const OperandSignature& o : sig.outputs)
    if (o.layout != Layout::contiguous) return;  // emit_tiles' interchanged loops
  std::vector<size_t> transposed;
  for (size_t k = 0; k < sig.inputs.size(); ++k)
    if (is_transposed(sig.inputs[k], rank)) transposed.push_back(k);
  if (transposed.empty()) return;
  const auto narrow = [](int64_t extent) { return extent >= kNarrowTileMin && extent <= kNarrowTileMax; };
  const int64_t rows = spec.shape[rank - 2], cols = spec.shape[rank - 1];
  sig.tile = TileShape::square;
  if (narrow(cols)) {
    sig.tile = TileShape::narrow_columns;
    sig.tile_extent = static_cast<int>(cols);
    return;
  }
  if (!narrow(rows)) return;
  // Sparse columns of so few rows have no whole tile (element copies, which the square
  // kernel has too): keyed as square, so that every kernel keyed narrow_rows reads dense.
  for (size_t k : transposed)
    if (spec.inputs[k].strides[rank - 1] != rows) return;
  sig.tile = TileShape::narrow_rows;
  sig.tile_extent = static_cast<int>(rows);
}

// "s" (square), "c<K>" (narrow columns) or "r<K>" (narrow rows).
void tile_key(KeyBuffer& b, const KernelSignature& sig) {
  switch (sig.tile) {
    case TileShape::none: return;
    case TileShape::square: b.push_back('s'); return;
    case TileShape::narrow_columns: b.push_back('c'); break;
    case TileShape::narrow_rows: b.push_back('r'); break;
  }
  append_digits(b, sig.tile_extent);
}

std::string tile_name(const KernelSignature& sig) {
  switch (sig.tile) {
    case TileShape::none: return "";
    case TileShape::square: return ", square tiles";
    case TileShape::narrow_columns: return fmt::format(", narrow-column tiles of {}", sig.tile_extent);
    case TileShape::narrow_rows: return fmt::format(", narrow-row tiles of {}", sig.tile_extent);
  }
  return "";
}

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::scalar: return "scalar";
    case Layout::strided: return "strided";
  }
  return "?";
}

}  // namespace

bool is_transposed(const OperandSignature& o, int rank) {
  return o.layout == Layout::strided && rank >= 2 && o.strides[rank - 1] == StrideClass::general &&
         o.strides[rank - 2] == StrideClass::unit;
}

const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::softmax: return "softmax";
    case RowOp::log_softmax: return "log_softmax";
    case RowOp::layer_norm: return "layer_norm";
    case RowOp::sum: return "sum";
    case RowOp::mean: return "mean";
    case RowOp::max: return "max";
    case RowOp::min: return "min";
  }
  return "?";
}

int64_t KernelSpec::num_elements() const { return ir::num_elements(shape); }

void KernelSpec::validate() const {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    fail("kernel '{}': rank {} exceeds the maximum of {}", name, shape.size(), kMaxRank);
  with_lazy_context([&] { return fmt::format("kernel '{}'", name); }, [&] { return ir::num_elements(shape); });
  if (compute != ir::DType::f32 && compute != ir::DType::f64)
    fail("kernel '{}': compute type {} is not f32 or f64", name, ir::dtype_name(compute));
  if (num_params < 0) fail("kernel '{}': negative parameter count {}", name, num_params);
  if (outputs.empty() && flags.empty()) fail("kernel '{}' has neither outputs nor flags", name);
  const int n_in = static_cast<int>(inputs.size());
  for (int k = 0; k < n_in; ++k) validate_operand(*this, inputs[k], k, false);
  for (size_t k = 0; k < outputs.size(); ++k) validate_operand(*this, outputs[k], n_in + static_cast<int>(k), true);
  const int n_operands = n_in + static_cast<int>(outputs.size());
  for (const FlagSpec& f : flags) {
    if (f.operands.empty()) fail("kernel '{}': flag '{}' covers no operand", name, f.name);
    for (int k : f.operands)
      if (k < 0 || k >= n_operands)
        fail("kernel '{}': flag '{}' names operand {} of {}", name, f.name, k, n_operands);
  }
  validate_body(*this);
}

std::string KernelSpec::cache_key() const { return signature(*this).key(); }

void coalesce_dimensions(KernelSpec& spec) {
  if (spec.shape.size() < 2 || spec.num_elements() == 0) return;
  std::vector<OperandSpec*> operands;
  for (OperandSpec& o : spec.inputs) operands.push_back(&o);
  for (OperandSpec& o : spec.outputs) operands.push_back(&o);
  for (const OperandSpec* o : operands)
    if (o->strides.size() != spec.shape.size()) return;  // validate() names the operand
  // Walk from the innermost dimension out, folding dimension d into the one after it. A row
  // kernel's innermost dimension is its row: only the dimensions outside it merge.
  for (size_t d = spec.shape.size() - (spec.row ? 2 : 1); d-- > 0;) {
    const int64_t outer = spec.shape[d], inner = spec.shape[d + 1];
    bool joins = true;
    for (const OperandSpec* o : operands)
      joins &= outer == 1 || inner == 1 || o->strides[d] == o->strides[d + 1] * inner;
    if (!joins) continue;
    for (OperandSpec* o : operands) {
      if (inner == 1) o->strides[d + 1] = o->strides[d];
      o->strides.erase(o->strides.begin() + static_cast<std::ptrdiff_t>(d));
    }
    spec.shape[d + 1] = outer * inner;
    spec.shape.erase(spec.shape.begin() + static_cast<std::ptrdiff_t>(d));
  }
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

KernelSignature signature(const KernelSpec& spec) {
  spec.validate();
  KernelSignature sig;
  sig.num_params = spec.num_params;
  sig.compute = spec.compute;
  sig.body = spec.body;
  for (const FlagSpec& f : spec.flags) sig.flags.push_back(f.operands);

  sig.row = spec.row;
  bool any_strided = false;
  int64_t reach = spec.num_elements();
  auto describe = [&](const OperandSpec& o) {
    OperandSignature s;
    s.dtype = o.dtype;
    s.layout = spec.row ? Layout::strided : classify(spec.shape, o.strides);
    if (s.layout == Layout::strided) {
      any_strided = true;
      for (size_t d = 0; d < spec.shape.size(); ++d) s.strides.push_back(stride_class(o.strides[d]));
      reach = std::max(reach, max_offset(spec.shape, o.strides));
    }
    return s;
  };
  for (const OperandSpec& o : spec.inputs) sig.inputs.push_back(describe(o));
  // The launchers take the streaming loop from here (runtime::CompiledKernel::streams); the
  // element count is capped first so that a planned shape past memory cannot overflow.
  const int64_t capped = std::min(spec.num_elements(), kStreamingOutputBytes + 1);
  int64_t output_bytes = 0;
  for (const OperandSpec& o : spec.outputs) {
    sig.outputs.push_back(describe(o));
    output_bytes += capped * static_cast<int64_t>(ir::dtype_size(o.dtype));
  }
  sig.streams = !spec.row && output_bytes > kStreamingOutputBytes;
  if (any_strided) {
    sig.rank = static_cast<int>(spec.shape.size());
    // Row kernels index in int64 always: with int32 offsets every column loop of every row
    // began with run-time overflow checks (LLVM's SCEV predicates), a quarter of a
    // 512-column row's work.
    sig.wide_index = reach >= kInt32Limit || spec.row;
    if (!spec.row) choose_tile(spec, sig);
  }
  return sig;
}

std::string KernelSignature::key() const {
  // "<compute>|r<rank>[w][s][|t<tile>]|p<params>|in <operands>|out <operands>|flags <lists>|<body>"
  // and for row kernels "|row <op> <x dtype> <y dtype> <constant> <gamma>,<beta> <data>"
  KeyBuffer b;
  append(b, ir::dtype_name(compute));
  append(b, "|r");
  append_digits(b, rank);
  if (wide_index) b.push_back('w');
  if (streams) b.push_back('s');
  if (tile != TileShape::none) {
    append(b, "|t");
    tile_key(b, *this);
  }
  append(b, "|p");
  append_digits(b, num_params);
  append(b, "|in ");
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k) b.push_back(' ');
    operand_key(b, inputs[k]);
  }
  append(b, "|out ");
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (k) b.push_back(' ');
    operand_key(b, outputs[k]);
  }
  append(b, "|flags ");
  for (size_t k = 0; k < flags.size(); ++k) {
    if (k) b.push_back(';');
    for (size_t j = 0; j < flags[k].size(); ++j) {
      if (j) b.push_back(',');
      append_digits(b, flags[k][j]);
    }
  }
  b.push_back('|');
  body_key(b, body);
  if (row) {
    append(b, "|row ");
    append(b, row_op_name(row->op));
    b.push_back(' ');
    append(b, ir::dtype_name(row->data_dtype));
    b.push_back(' ');
    append(b, ir::dtype_name(row->result_dtype));
    append_hex_float(b, ' ', row->constant);
    append_int(b, ' ', row->gamma);
    append_int(b, ',', row->beta);
    b.push_back(' ');
    body_key(b, row->data);
  }
  return fmt::to_string(b);
}

std::string print_kernel_spec(const KernelSpec& spec) {
  const KernelSignature sig = signature(spec);
  std::string s = fmt::format("kernel '{}' over {} ({} elements), compute {}, {} parameter(s), {} indexing{}{}\n",
                              spec.name, ir::shape_str(spec.shape), spec.num_elements(),
                              ir::dtype_name(spec.compute), spec.num_params,
                              sig.flat() ? "flat" : (sig.wide_index ? "int64" : "int32"), tile_name(sig),
                              sig.streams ? ", streaming loops" : "");
  auto line = [&](const char* role, const OperandSpec& o, const OperandSignature& os) {
    s += fmt::format("  {} '{}': {} strides [{}] {}\n", role, o.name, ir::dtype_name(o.dtype),
                     fmt::join(o.strides, ","), layout_name(os.layout));
  };
  for (size_t k = 0; k < spec.inputs.size(); ++k) line("in ", spec.inputs[k], sig.inputs[k]);
  for (size_t k = 0; k < spec.outputs.size(); ++k) line("out", spec.outputs[k], sig.outputs[k]);
  for (const FlagSpec& f : spec.flags) s += fmt::format("  flag '{}': any non-finite over operands {}\n", f.name, fmt::join(f.operands, ", "));
  if (const auto& row = spec.row) {
    s += fmt::format("  row {} over dimension {}: x ({}) =\n", row_op_name(row->op), spec.shape.size() - 1,
                     ir::dtype_name(row->data_dtype));
    s += ir::print_scalar_program(row->data);
    const bool constant = row->op <= RowOp::layer_norm;
    s += fmt::format("  y ({}) = {}(x{}{}); body (y is input {}{}) =\n", ir::dtype_name(row->result_dtype),
                     row_op_name(row->op),
                     constant ? fmt::format("{}{}", row->op == RowOp::layer_norm ? ", eps " : ", t ", row->constant) : "",
                     row->op == RowOp::layer_norm ? fmt::format(", gamma input {}, beta input {}", row->gamma, row->beta) : "",
                     spec.inputs.size() + spec.num_params, row_op_reduces(row->op) ? ", once a row" : "");
  }
  s += ir::print_scalar_program(spec.body);
  return s;
}

}  // namespace ampfuse::codegen
