// Row kernels (KernelSpec::row): softmax, log_softmax, LayerNorm and the reductions over
// the innermost dimension, with the elementwise ops before them (RowSpec::data) and after
// them (the body) evaluated in the same passes.
//
// Per row: the outer multi-index and each operand's row offset once, then up to three
// column loops, each vectorized by LLVM's loop vectorizer:
//   softmax      max of x; sum of exp((x - max) / t); body(exp((x - max) / t) * (1 / sum))
//   log_softmax  max of x; sum of exp((x - max) / t); body((x - max) / t - log(sum))
//   layer_norm   sum of x; sum of (x - mean)^2;        body((x - mean) * (1 / std) * gamma + beta)
//   sum, mean    sum of x;                             body(sum or sum / n) once a row
//   max, min     the NaN-propagating maximum / minimum; body(y) once a row
// LayerNorm's and the reductions' sums add in f64 as the reference kernels do, softmax's in
// f32 as its reference does (docs/ops.md says why), all with `reassoc`, which is what lets
// them vectorize: the order differs from the reference's sequential loops (in f64
// invisible in all but the last bits of the rounded result). exp and log differ from the C
// library by their ULP bounds (codegen/vector_math.h; log_softmax's log of the sum is the C
// library's, once a row). A row holding a NaN gives NaN everywhere, as the reference's does.
//
// x is recomputed from the inputs in every pass instead of being kept: a row is at most a
// few hundred KiB and in cache by the second pass, and the recomputation is the handful of
// instructions of a cast or a bias add. exp is not: softmax rows of up to
// kRowScratchElements keep the sum pass's exponentials in a stack buffer for the last pass
// (each exp is about 4 vector instructions an element, twice what the rest of a pass
// costs).
#include "codegen/body_lowering.h"
#include "codegen/dtype_lowering.h"
#include "codegen/float_ops.h"
#include "codegen/kernel_emitter.h"
#include "codegen/vector_math.h"

namespace ampfuse::codegen::detail {

// 32 KiB of f32 on the stack of the thread running the kernel (OpenMP's default stacks are
// megabytes): the vocabulary softmax of a translation model (19581 columns) recomputes.
inline constexpr int64_t kRowScratchElements = 8192;
// Four interleaved vectors of 16 f32: the main loops' unit.
inline constexpr int64_t kRowBlock = 64;

std::vector<Value*> KernelEmitter::program_inputs(const ir::ScalarProgram& p, const std::vector<Value*>& offsets,
                                                  const std::vector<Value*>& extra) {
  std::vector<bool> needed(static_cast<size_t>(num_inputs()), false);
  for (const ir::ScalarInstr& s : p.instrs)
    if (s.op == ir::ScalarOp::input && s.index < num_inputs()) needed[s.index] = true;
  std::vector<Value*> values;
  for (int k = 0; k < num_inputs(); ++k) {
    if (!needed[k]) {
      values.push_back(llvm::UndefValue::get(compute_));  // never read
      continue;
    }
    llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
    llvm::LoadInst* raw = b_.CreateLoad(elem, b_.CreateInBoundsGEP(elem, base_[k], offsets[k]));
    tag_access(raw, k);
    values.push_back(widen_to_compute(b_, raw, operand(k).dtype, compute_));
  }
  values.insert(values.end(), params_.begin(), params_.end());
  values.insert(values.end(), extra.begin(), extra.end());
  return values;
}

void KernelEmitter::emit_rows() {
  const RowSpec& row = *sig_.row;
  const int rank = sig_.rank, last = rank - 1;
  FloatOps f(b_, compute_);
  // Accumulators live in stack slots of the entry block, which SROA turns back into the
  // loops' phis. LayerNorm's and the reductions' sums add in f64: an f32 sum of 2^20
  // values near 1000 was off by a percent.
  llvm::Type* wide = b_.getDoubleTy();
  llvm::AllocaInst* acc_max = b_.CreateAlloca(compute_, nullptr, "acc.max");
  llvm::AllocaInst* acc_sum = b_.CreateAlloca(wide, nullptr, "acc.sum");
  llvm::AllocaInst* acc_exp = b_.CreateAlloca(compute_, nullptr, "acc.exp");
  Value* scratch = row.op != RowOp::softmax && row.op != RowOp::log_softmax
                       ? nullptr
                       : b_.CreateAlloca(compute_, b_.getInt64(kRowScratchElements), "row.kept");
  Value* n = b_.CreateUIToFP(shape_[last], wide);  // the row length

  guarded_loop("row", begin_, end_, b_.getInt64(1), [&](Value* r) {
    std::vector<std::pair<int, Value*>> outer;
    Value* rest = r;
    for (int d = last - 1; d >= 0; --d) {
      Value* q = b_.CreateUDiv(rest, shape_[d]);
      outer.push_back({d, b_.CreateSub(rest, b_.CreateMul(q, shape_[d]))});
      rest = q;
    }
    std::vector<Value*> row_offset;
    for (int k = 0; k < num_operands(); ++k)
      row_offset.push_back(strided_offset(k, llvm::ConstantInt::get(index_type_, 0), outer));
    auto offsets_at = [&](Value* c) {
      std::vector<Value*> at;
      for (int k = 0; k < num_operands(); ++k) at.push_back(strided_offset(k, row_offset[k], {{last, c}}));
      return at;
    };
    // x at column c: the data program, rounded as the interpreter stores it. The first pass
    // (`first`) also stores the program's further results, the kernel's last outputs.
    const int stored_by_data = static_cast<int>(row.data.results.size()) - 1;
    auto x_at = [&](const std::vector<Value*>& at, bool first = false) {
      const std::vector<Value*> results = lower_scalar_program(b_, row.data, program_inputs(row.data, at), nullptr, compute_);
      for (int j = 0; first && j < stored_by_data; ++j) {
        const int k = num_operands() - stored_by_data + j;
        llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
        llvm::StoreInst* store = b_.CreateStore(narrow_from_compute(b_, results[1 + j], operand(k).dtype),
                                                b_.CreateInBoundsGEP(elem, base_[k], at[k]));
        tag_access(store, k);
      }
      Value* x = results[0];
      return row.data_dtype == ir::DType::f32 ? x : round_in_compute(b_, x, row.data_dtype);
    };
    // One pass over the row: body(c, offsets) for every column. Whole blocks of
    // kRowBlock columns in a loop LLVM vectorizes and interleaves freely, the rest in one
    // with masked vectors (a row of 100 would otherwise run 36 columns one by one).
    Value* blocks_end = b_.CreateAnd(shape_[last], b_.getInt64(-kRowBlock));
    auto columns = [&](const char* name, const std::function<void(Value*, const std::vector<Value*>&)>& body) {
      auto element = [&](Value* c) { body(c, offsets_at(c)); };
      guarded_loop(name, b_.getInt64(0), blocks_end, b_.getInt64(1), element);
      guarded_loop(name, blocks_end, shape_[last], b_.getInt64(1), element, 0, true);
    };
    // acc_max = maximum(acc_max, v) (or minimum), NaN-propagating; acc_sum += v in f64.
    auto take_max = [&](Value* v, llvm::Intrinsic::ID which = llvm::Intrinsic::maximum) {
      b_.CreateStore(b_.CreateBinaryIntrinsic(which, b_.CreateLoad(compute_, acc_max), v), acc_max);
    };
    auto add = [&](Value* v) {
      Value* next = b_.CreateFAdd(b_.CreateLoad(wide, acc_sum), v->getType() == wide ? v : b_.CreateFPExt(v, wide));
      llvm::cast<llvm::Instruction>(next)->setHasAllowReassoc(true);
      b_.CreateStore(next, acc_sum);
    };
    auto start_sum = [&] { b_.CreateStore(llvm::ConstantFP::get(wide, 0.0), acc_sum); };
    // The body at column c with y: every output stored.
    auto finish = [&](const std::vector<Value*>& at, Value* y) {
      if (row.result_dtype != ir::DType::f32) y = round_in_compute(b_, y, row.result_dtype);
      const std::vector<Value*> results =
          lower_scalar_program(b_, sig_.body, program_inputs(sig_.body, at, {y}), nullptr, compute_);
      for (size_t o = 0; o < results.size(); ++o) {
        const int k = num_inputs() + static_cast<int>(o);
        llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
        llvm::StoreInst* store =
            b_.CreateStore(narrow_from_compute(b_, results[o], operand(k).dtype), b_.CreateInBoundsGEP(elem, base_[k], at[k]));
        tag_access(store, k);
      }
    };

    if (row_op_reduces(row.op)) {
      // sum and mean add in f64 and round once, as the reference kernel does; the result
      // enters the body as f32, exactly (rounded to its dtype first, from f64).
      const bool select = row.op == RowOp::max || row.op == RowOp::min;
      if (select)
        b_.CreateStore(f.c(row.op == RowOp::max ? -kInf : kInf), acc_max);
      else
        start_sum();
      columns("reduce", [&](Value*, const std::vector<Value*>& at) {
        Value* x = x_at(at, true);
        if (select)
          take_max(x, row.op == RowOp::max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum);
        else
          add(x);
      });
      Value* y = b_.CreateLoad(select ? compute_ : wide, select ? acc_max : acc_sum);
      if (!select) {
        if (row.op == RowOp::mean) y = b_.CreateFDiv(y, n);
        y = b_.CreateFPTrunc(round_in_compute(b_, y, row.result_dtype), compute_);
      }
      finish(offsets_at(b_.getInt64(0)), y);
      return;
    }
    if (row.op == RowOp::layer_norm) {
      // mean and std as the reference computes them: f64 sums, rounded to f32 once.
      start_sum();
      columns("sum", [&](Value*, const std::vector<Value*>& at) { add(x_at(at, true)); });
      Value* mean = b_.CreateFPTrunc(b_.CreateFDiv(b_.CreateLoad(wide, acc_sum), n), compute_);
      start_sum();
      columns("squares", [&](Value*, const std::vector<Value*>& at) {
        Value* d = b_.CreateFPExt(f.sub(x_at(at), mean), wide);
        add(b_.CreateFMul(d, d));
      });
      Value* var = b_.CreateFDiv(b_.CreateLoad(wide, acc_sum), n);
      Value* eps = llvm::ConstantFP::get(wide, static_cast<double>(static_cast<float>(row.constant)));
      Value* std_dev = b_.CreateFPTrunc(b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFAdd(var, eps)), compute_);
      // One division a row, a multiply an element (a vector division takes 10-16 cycles).
      Value* inv_std = f.div(f.c(1), std_dev);
      columns("normalize", [&](Value*, const std::vector<Value*>& at) {
        auto load = [&](int k) {
          llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
          llvm::LoadInst* raw = b_.CreateLoad(elem, b_.CreateInBoundsGEP(elem, base_[k], at[k]));
          tag_access(raw, k);
          return widen_to_compute(b_, raw, operand(k).dtype, compute_);
        };
        Value* y = f.add(f.mul(f.mul(f.sub(x_at(at), mean), inv_std), load(row.gamma)), load(row.beta));
        finish(at, y);
      });
      return;
    }
    // softmax, log_softmax. Rows that fit the scratch buffer keep exp((x - max) / t) (or,
    // for log_softmax, (x - max) / t) from the sum's pass: the last pass then neither
    // recomputes x nor calls exp again.
    b_.CreateStore(f.c(-kInf), acc_max);
    columns("max", [&](Value*, const std::vector<Value*>& at) { take_max(x_at(at, true)); });
    Value* max = b_.CreateLoad(compute_, acc_max);
    Value* t = f.c(row.constant);
    const bool log = row.op == RowOp::log_softmax;
    auto shifted = [&](const std::vector<Value*>& at) { return f.div(f.sub(x_at(at), max), t); };
    // exp with its multiply-adds contracted into FMAs where the CPU has them (a third fewer
    // instructions: the row's bottleneck). The Cody-Waite reduction is exact either way and
    // Horner's steps round once instead of twice, so the 1-ulp bound still holds.
    auto exp = [&](Value* v) {
      const llvm::FastMathFlags plain = b_.getFastMathFlags();
      llvm::FastMathFlags contract;
      contract.setAllowContract();
      b_.setFastMathFlags(contract);
      Value* e = emit_transcendental(b_, ir::ScalarOp::exp, {v});
      b_.setFastMathFlags(plain);
      return e;
    };
    auto kept = [&](Value* c) { return b_.CreateInBoundsGEP(compute_, scratch, c); };
    auto passes = [&](bool keep) {
      // The exponentials add in f32: in (0, 1], positive, and in 64 vector lanes each lane
      // adds 1/64 of the row, so the sum is within (n / 64) * 2^-24 of exact, where the
      // reference's sequential sum is within n * 2^-24; an f64 sum made the whole kernel
      // 1.4-1.8x slower (bench/README.md, "Row kernels").
      b_.CreateStore(f.c(0), acc_exp);
      columns("sum", [&](Value* c, const std::vector<Value*>& at) {
        Value* v = shifted(at);
        Value* e = exp(v);
        if (keep) b_.CreateStore(log ? v : e, kept(c));
        Value* next = f.add(b_.CreateLoad(compute_, acc_exp), e);
        llvm::cast<llvm::Instruction>(next)->setHasAllowReassoc(true);
        b_.CreateStore(next, acc_exp);
      });
      // log_softmax takes the C library's log of the sum (once a row).
      Value* sum64 = b_.CreateFPExt(b_.CreateLoad(compute_, acc_exp), wide);
      Value* inv_sum = f.div(f.c(1), b_.CreateFPTrunc(sum64, compute_));
      Value* log_sum =
          log ? b_.CreateFPTrunc(emit_transcendental(b_, ir::ScalarOp::log, {sum64}), compute_) : nullptr;
      columns("out", [&](Value* c, const std::vector<Value*>& at) {
        Value* v = keep ? b_.CreateLoad(compute_, kept(c)) : (log ? shifted(at) : exp(shifted(at)));
        finish(at, log ? f.sub(v, log_sum) : f.mul(v, inv_sum));
      });
    };
    llvm::BasicBlock* short_row = llvm::BasicBlock::Create(ctx_, "row.kept", fn_);
    llvm::BasicBlock* long_row = llvm::BasicBlock::Create(ctx_, "row.recomputed", fn_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "row.done", fn_);
    b_.CreateCondBr(b_.CreateICmpULE(shape_[last], b_.getInt64(kRowScratchElements)), short_row, long_row);
    b_.SetInsertPoint(short_row);
    passes(true);
    b_.CreateBr(done);
    b_.SetInsertPoint(long_row);
    passes(false);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  });
  b_.CreateRetVoid();
}

}  // namespace ampfuse::codegen::detail
