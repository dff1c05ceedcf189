// Staged transposes: blocks of a [rows, columns] slab gathered into the output's order by
// in-register shuffles, then computed by a flat loop.
//
// A transposed operand has unit stride along the rows (dimension rank-2) and a large one
// along the columns (rank-1), while the outputs run along the columns. Any walk reads one
// of them against its order; here the transposed input is read in vectors along its rows
// (one vector per column), transposed in registers with shufflevector and written to a
// stack buffer in the output's order, which the flat loop then reads like any contiguous
// operand. That loop is the flat kernel's (LLVM vectorizes the body, casts included), so
// only the transposition differs from a copy. Shapes of tile (V = the f32 lanes of the
// vectors the loop vectorizer forms, 8 on AVX2, 16 on AVX-512; 16 for f32 tiles on any
// AVX-512 CPU, see tile_lanes):
//   square        V x V tiles, log2(V) rounds of interleaving pairs of vectors;
//   narrow cols   a slab of K = 2..4 columns (NCHW -> NHWC with C = 3): K vectors of V rows
//                 interleaved into one vector of V*K in output order;
//   narrow rows   a block of K = 2..4 rows with dense columns (NHWC -> NCHW with C = 3):
//                 one load of V*K elements split into K vectors of V;
// whatever no whole tile covers is copied element by element. A kernel carries one of the
// shapes, the one its signature names (codegen::TileShape, from the extents it was compiled
// for): all of them made it about 7x slower to compile. Other strided inputs (a broadcast
// bias) are copied into a buffer of their own by a plain loop.
#include "codegen/kernel_emitter.h"
#include "codegen/dtype_lowering.h"
#include "codegen/llvm_target.h"

#include <algorithm>

namespace ampfuse::codegen::detail {

namespace {

// How far ahead along a column the square and narrow-column tiles prefetch: four blocks of
// 64 f32 rows (2048 measured no different).
constexpr int64_t kPrefetchBytes = 1024;

// The vector lanes of one tile side for elements of `bytes`: the f32 width the loop
// vectorizer uses, except that f32 tiles fill the widest registers, LLVM's preference
// aside: with 512-bit vectors a tile column is one whole 64-byte line, read by one load.
// (On Sapphire Rapids, where LLVM stops at 256 bits, 16 x 16 f32 tiles made NCHW -> NHWC
// with C = 64 about 10 % faster than 8 x 8 ones; 16-bit tiles of 16 lanes made the
// reverse transpose slower.)
int64_t vectorizer_lanes() { return std::max(4, target_vector_bits() / 32); }
int64_t tile_lanes(size_t bytes) { return bytes == 4 ? std::max(4, target_register_bits() / 32) : vectorizer_lanes(); }

llvm::SmallVector<int, 64> iota_mask(int n) {
  llvm::SmallVector<int, 64> m;
  for (int i = 0; i < n; ++i) m.push_back(i);
  return m;
}

}  // namespace

bool KernelEmitter::stages_tiles() const {
  for (const OperandSignature& o : sig_.outputs)
    if (o.layout != Layout::contiguous) return false;
  return true;
}

bool KernelEmitter::is_transposed(int k) const { return codegen::is_transposed(operand(k), sig_.rank); }

void KernelEmitter::if_then(Value* cond, const std::function<void()>& then) { if_else(cond, then, nullptr); }

void KernelEmitter::if_else(Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) {
  llvm::BasicBlock* yes = llvm::BasicBlock::Create(ctx_, "then", fn_);
  llvm::BasicBlock* no = otherwise ? llvm::BasicBlock::Create(ctx_, "else", fn_) : nullptr;
  llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "endif", fn_);
  b_.CreateCondBr(cond, yes, no ? no : after);
  b_.SetInsertPoint(yes);
  then();
  b_.CreateBr(after);
  if (no) {
    b_.SetInsertPoint(no);
    otherwise();
    b_.CreateBr(after);
  }
  b_.SetInsertPoint(after);
}

void KernelEmitter::guarded_loop(const char* name, Value* from, Value* to, Value* step,
                                 const std::function<void(Value*)>& body, unsigned vector_width, bool fold_tail) {
  if_then(b_.CreateICmpULT(from, to), [&] { counted_loop(name, from, to, step, body, vector_width, fold_tail); });
}

void KernelEmitter::guarded_loop_value(Value* from, Value* to, const std::function<void(Value*, Value*)>& body) {
  if_then(b_.CreateICmpULT(from, to), [&] { body(from, to); });
}

Value* KernelEmitter::concat(std::vector<Value*> parts) {
  auto* part_type = llvm::cast<llvm::FixedVectorType>(parts[0]->getType());
  size_t count = 1;
  while (count < parts.size()) count *= 2;
  parts.resize(count, llvm::PoisonValue::get(part_type));
  while (parts.size() > 1) {
    const int n = static_cast<int>(llvm::cast<llvm::FixedVectorType>(parts[0]->getType())->getNumElements());
    std::vector<Value*> next;
    for (size_t i = 0; i < parts.size(); i += 2) next.push_back(b_.CreateShuffleVector(parts[i], parts[i + 1], iota_mask(2 * n)));
    parts = std::move(next);
  }
  return parts[0];
}

// A tile of operand k: `cols` vectors of `rows` elements, vector j holding rows
// [row, row+rows) of column col+j (contiguous: unit row stride). Loaded as one vector of
// rows*cols elements, column after column, each column's load with its prefetch.
Value* KernelEmitter::load_tile(int k, Value* slab_off, Value* row, Value* col, int64_t rows, int64_t cols,
                                TilePrefetch prefetch) {
  llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
  const int rank = sig_.rank;
  std::vector<Value*> parts;
  for (int64_t j = 0; j < cols; ++j) {
    Value* off = strided_offset(k, slab_off, {{rank - 2, row}, {rank - 1, b_.CreateNUWAdd(col, b_.getInt64(j))}});
    llvm::LoadInst* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(elem, static_cast<unsigned>(rows)),
                                             b_.CreateInBoundsGEP(elem, base_[k], off), llvm::Align(1));
    tag_access(v, k);
    parts.push_back(v);
    // Dozens of columns are read at once, more streams than the hardware prefetchers
    // follow. A prefetch never faults, so running past the end of the tensor is harmless
    // (hence no inbounds).
    if (prefetch.kind == TilePrefetch::none) continue;
    Value* ahead = nullptr;
    if (prefetch.kind == TilePrefetch::down_columns) {
      ahead = b_.CreateGEP(b_.getInt8Ty(), v->getPointerOperand(), b_.getInt64(kPrefetchBytes));
    } else {
      Value* at = strided_offset(k, slab_off, {{rank - 2, prefetch.row}, {rank - 1, b_.CreateAdd(prefetch.col, b_.getInt64(j))}});
      ahead = b_.CreateGEP(elem, base_[k], at);
    }
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()}, {ahead, b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
  }
  return concat(parts);
}

void KernelEmitter::tag_access(llvm::Instruction* inst, int k) {
  inst->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[k]);
  inst->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[k]);
}

// buf[r * nc + c] = operand k at (r0 + r, c0 + c) for r in [r_from, r_to), c in [c_from, c_to).
void KernelEmitter::copy_elements(int k, Value* buf, Value* slab_off, Value* r0, Value* c0, Value* nc, Value* r_from,
                                  Value* r_to, Value* c_from, Value* c_to) {
  llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
  const int rank = sig_.rank;
  guarded_loop("copy.row", r_from, r_to, b_.getInt64(1), [&](Value* r) {
    guarded_loop("copy.col", c_from, c_to, b_.getInt64(1), [&](Value* c) {
      Value* off = strided_offset(k, slab_off, {{rank - 2, b_.CreateNUWAdd(r0, r)}, {rank - 1, b_.CreateNUWAdd(c0, c)}});
      llvm::LoadInst* v = b_.CreateLoad(elem, b_.CreateInBoundsGEP(elem, base_[k], off));
      tag_access(v, k);
      b_.CreateStore(v, b_.CreateInBoundsGEP(elem, buf, b_.CreateNUWAdd(b_.CreateNUWMul(r, nc), c)));
    }, kScalarLoop);
  }, kScalarLoop);
}

// Operand k's block [r0, r0+nr) x [c0, c0+nc) into buf, row-major with row length nc, by
// the kernel's tile shape (sig_.tile: each kernel carries only its own). A block the shape
// does not fit (the rows of a slab split between threads) is copied element by element.
void KernelEmitter::stage_transposed(int k, Value* buf, Value* slab_off, Value* r0, Value* nr, Value* c0, Value* nc) {
  llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
  const int64_t V = tile_lanes(ir::dtype_size(operand(k).dtype));
  const int64_t K = sig_.tile_extent;
  Value* zero = b_.getInt64(0);
  Value* v = b_.getInt64(V);
  auto store_at = [&](Value* value, Value* at) {
    b_.CreateAlignedStore(value, b_.CreateInBoundsGEP(elem, buf, at), llvm::Align(1));
  };
  // The narrow tile when `fits`, else the whole block element by element.
  auto narrow_or_copy = [&](Value* fits, const std::function<void()>& tile) {
    if_else(fits, tile, [&] { copy_elements(k, buf, slab_off, r0, c0, nc, zero, nr, zero, nc); });
  };
  Value* nr_full = b_.CreateAnd(nr, b_.getInt64(-V));
  Value* nc_full = b_.CreateAnd(nc, b_.getInt64(-V));

  // Narrow columns: K vectors of V rows -> one vector [row][col]. (K >= V, 4-lane tiles,
  // takes the square tiles.)
  if (sig_.tile == TileShape::narrow_columns && K < V) {
    narrow_or_copy(b_.CreateICmpEQ(nc, b_.getInt64(K)), [&] {
      guarded_loop("tile.rows", zero, nr_full, v, [&](Value* r) {
        Value* tile = load_tile(k, slab_off, b_.CreateNUWAdd(r0, r), c0, V, K, {TilePrefetch::down_columns});
        llvm::SmallVector<int, 64> mask;
        for (int64_t i = 0; i < V; ++i)
          for (int64_t j = 0; j < K; ++j) mask.push_back(static_cast<int>(j * V + i));
        store_at(b_.CreateShuffleVector(tile, mask), b_.CreateNUWMul(r, b_.getInt64(K)));
      });
      copy_elements(k, buf, slab_off, r0, c0, nc, nr_full, nr, zero, nc);
    });
    return;
  }
  // Narrow rows with dense columns (stride K: an NHWC tensor's pixels): one load of V*K
  // elements split into K vectors of V, one per row. The signature keys this shape only
  // for dense columns; the check keeps a kernel right whatever strides it is called with.
  if (sig_.tile == TileShape::narrow_rows && K < V) {
    Value* dense = b_.CreateICmpEQ(strides_[k][sig_.rank - 1], llvm::ConstantInt::get(index_type_, K));
    narrow_or_copy(b_.CreateAnd(b_.CreateICmpEQ(nr, b_.getInt64(K)), dense), [&] {
      guarded_loop("tile.cols", zero, nc_full, v, [&](Value* c) {
        Value* tile = load_tile(k, slab_off, r0, b_.CreateNUWAdd(c0, c), K * V, 1, {});
        for (int64_t i = 0; i < K; ++i) {
          llvm::SmallVector<int, 64> mask;
          for (int64_t j = 0; j < V; ++j) mask.push_back(static_cast<int>(j * K + i));
          store_at(b_.CreateShuffleVector(tile, mask), b_.CreateNUWAdd(b_.CreateNUWMul(b_.getInt64(i), nc), c));
        }
      });
      copy_elements(k, buf, slab_off, r0, c0, nc, zero, nr, nc_full, nc);
    });
    return;
  }
  // Square V x V tiles: log2(V) rounds of zipping vector i with vector i + V/2 transpose
  // V column vectors into V row vectors; `tile` holds rows r.., columns c.. of the block.
  auto transpose_tile = [&](Value* tile, Value* r, Value* c) {
    std::vector<Value*> x;
    for (int64_t j = 0; j < V; ++j) {
      llvm::SmallVector<int, 64> part;
      for (int64_t i = 0; i < V; ++i) part.push_back(static_cast<int>(j * V + i));
      x.push_back(b_.CreateShuffleVector(tile, part));
    }
    llvm::SmallVector<int, 64> lo, hi;
    for (int64_t i = 0; i < V / 2; ++i) {
      lo.append({static_cast<int>(i), static_cast<int>(V + i)});
      hi.append({static_cast<int>(V / 2 + i), static_cast<int>(V + V / 2 + i)});
    }
    for (int64_t half = V; half > 1; half /= 2) {
      std::vector<Value*> y;
      for (int64_t i = 0; i < V / 2; ++i) {
        y.push_back(b_.CreateShuffleVector(x[i], x[i + V / 2], lo));
        y.push_back(b_.CreateShuffleVector(x[i], x[i + V / 2], hi));
      }
      x = std::move(y);
    }
    for (int64_t i = 0; i < V; ++i)
      store_at(x[i], b_.CreateNUWAdd(b_.CreateNUWMul(b_.CreateNUWAdd(r, b_.getInt64(i)), nc), c));
  };
  auto square_tiles = [&](TilePrefetch::Kind kind) {
    Value* next_block_right = b_.CreateICmpULT(b_.CreateNUWAdd(c0, nc), shape_[sig_.rank - 1]);
    guarded_loop("tile.cols", zero, nc_full, v, [&](Value* c) {
      guarded_loop("tile.rows", zero, nr_full, v, [&](Value* r) {
        Value* row = b_.CreateNUWAdd(r0, r);
        TilePrefetch prefetch{kind};
        if (kind == TilePrefetch::tile_at) {
          Value* next_c = b_.CreateNUWAdd(c, v);
          Value* in_block = b_.CreateICmpULT(next_c, nc_full);
          Value* block_row = b_.CreateSelect(next_block_right, row, b_.CreateAdd(row, nr));
          Value* block_col = b_.CreateSelect(next_block_right, b_.CreateNUWAdd(c0, nc), zero);
          prefetch.row = b_.CreateSelect(in_block, row, block_row);
          prefetch.col = b_.CreateSelect(in_block, b_.CreateNUWAdd(c0, next_c), block_col);
        }
        transpose_tile(load_tile(k, slab_off, row, b_.CreateNUWAdd(c0, c), V, V, prefetch), r, c);
      });
    });
  };
  // Where the columns lie a page or more apart (an NCHW plane each), a tile prefetches the
  // one a group of V columns to its right (past the block's last group, the next block's
  // first), which the loop reaches nr / V tiles later. Prefetching kPrefetchBytes down every
  // column instead kept four blocks' lines of every column in flight, and with a
  // power-of-two column stride (planes of 128 x 128 f32, 64 KiB apart) the lines at one row
  // all fall into the same L2 sets: 64 columns' lines evicted one another before they were
  // read (NCHW -> NHWC with C = 64 took 1.6-1.9x as long as at H*W = 16400, with 8 x 8
  // tiles as well as 16 x 16). Columns closer than that (an NHWC pixel's channels) are read
  // as one stream, which the prefetch down the columns keeps ahead of (the reverse transpose
  // was slower with the other).
  const int64_t page_elements = 4096 / static_cast<int64_t>(ir::dtype_size(operand(k).dtype));
  if_else(b_.CreateICmpUGE(strides_[k][sig_.rank - 1], llvm::ConstantInt::get(index_type_, page_elements)),
          [&] { square_tiles(TilePrefetch::tile_at); }, [&] { square_tiles(TilePrefetch::down_columns); });
  copy_elements(k, buf, slab_off, r0, c0, nc, nr_full, nr, zero, nc);
  copy_elements(k, buf, slab_off, r0, c0, nc, zero, nr_full, nc_full, nc);
}

// [begin, end) is a whole number of rows (of `cols` elements), not necessarily of slabs: with
// a batch of one a slab is the whole image plane, split between threads. For each slab
// touched, over its rows in the range, blocks of at most kStageElements
// (nr rows of nc columns, nc the whole row when it fits); per block, every strided input
// staged, then one flat loop per contiguous stretch of the outputs (the whole block when it
// spans whole rows, else one per row).
void KernelEmitter::emit_staged_tiles() {
  const int rank = sig_.rank;
  // Blocks are whole tiles of every staged input.
  int64_t V = vectorizer_lanes();
  for (int k = 0; k < num_inputs(); ++k)
    if (operand(k).layout == Layout::strided) V = std::max(V, tile_lanes(ir::dtype_size(operand(k).dtype)));
  // Stack buffers: one block of each strided input, in the output's order.
  std::vector<Value*> buffers(static_cast<size_t>(num_inputs()), nullptr);
  for (int k = 0; k < num_inputs(); ++k) {
    if (operand(k).layout != Layout::strided) continue;
    llvm::AllocaInst* a = b_.CreateAlloca(storage_type(ctx_, operand(k).dtype), b_.getInt64(kStageElements));
    a->setAlignment(llvm::Align(64));
    buffers[k] = a;
  }
  const SlabFlags flags = begin_slabs();
  Value* rows = shape_[rank - 2];
  Value* cols = shape_[rank - 1];
  Value* slab = b_.CreateMul(rows, cols);
  Value* one = b_.getInt64(1);
  // Block shape: up to 64 rows (whole lines of the transposed input: 256 bytes of f32),
  // columns filling the buffer with them, then rows, a multiple of V, filling what is left.
  Value* row_target = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, rows, b_.getInt64(64));
  // A block narrower than the slab is a multiple of 64 columns, so that its output stretches
  // start on 64-element boundaries (whole streaming stores) when the slab does.
  Value* fitting = b_.CreateUDiv(b_.getInt64(kStageElements), row_target);
  Value* rounded = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umax, b_.CreateAnd(fitting, b_.getInt64(-64)), b_.getInt64(64));
  Value* block_cols = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, cols,
                                               b_.CreateSelect(b_.CreateICmpULE(cols, fitting), cols, rounded));
  Value* fill = b_.CreateAnd(b_.CreateUDiv(b_.getInt64(kStageElements), block_cols), b_.getInt64(-V));
  Value* block_rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umax, fill, b_.getInt64(V));
  Value* whole_rows = b_.CreateICmpEQ(block_cols, cols);
  Value* streaming = sig_.streams ? b_.CreateICmpNE(field(kStreaming), b_.getInt64(0)) : nullptr;
  const unsigned stream_width = streaming_width();
  // A stretch's streaming part starts where every output is on a 64-byte line: 16 elements
  // when the narrowest output is f32, not kStreamAlignElements (the flat kernels' bound for
  // any dtype). Output rows of H*W = 28*28 or 14*14 are not 64 elements apart, and a
  // 64-element stretch split at a 64-element boundary ran half its elements in the loops'
  // scalar remainders (NHWC -> NCHW at H*W = 784 took twice as long as at 3136).
  size_t narrowest = 8;
  for (const OperandSignature& o : sig_.outputs) narrowest = std::min(narrowest, ir::dtype_size(o.dtype));
  const int64_t stream_align = static_cast<int64_t>(kStreamAlignBytes / narrowest);
  Value* first_row = b_.CreateUDiv(begin_, cols);
  Value* last_row = b_.CreateUDiv(end_, cols);
  Value* last_slab = b_.CreateUDiv(b_.CreateAdd(last_row, b_.CreateSub(rows, one)), rows);
  counted_loop("slab", b_.CreateUDiv(first_row, rows), last_slab, one, [&](Value* q) {
    Value* slab_row = b_.CreateNUWMul(q, rows);
    Value* r_begin = b_.CreateSub(b_.CreateBinaryIntrinsic(llvm::Intrinsic::umax, first_row, slab_row), slab_row);
    Value* r_end = b_.CreateSub(b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, last_row, b_.CreateNUWAdd(slab_row, rows)),
                                slab_row);
    std::vector<std::pair<int, Value*>> outer;
    Value* rest = q;
    for (int d = rank - 3; d >= 0; --d) {
      Value* quotient = b_.CreateUDiv(rest, shape_[d]);
      outer.emplace_back(d, b_.CreateSub(rest, b_.CreateMul(quotient, shape_[d])));
      rest = quotient;
    }
    std::vector<Value*> slab_offset(static_cast<size_t>(num_operands()), nullptr);
    for (int k = 0; k < num_operands(); ++k)
      if (operand(k).layout == Layout::strided)
        slab_offset[k] = strided_offset(k, llvm::ConstantInt::get(index_type_, 0), outer);
    Value* slab_start = b_.CreateMul(q, slab);
    counted_loop("block.rows", r_begin, r_end, block_rows, [&](Value* r0) {
      Value* nr = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, block_rows, b_.CreateSub(r_end, r0));
      counted_loop("block.cols", b_.getInt64(0), cols, block_cols, [&](Value* c0) {
        Value* nc = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, block_cols, b_.CreateSub(cols, c0));
        for (int k = 0; k < num_inputs(); ++k) {
          if (!buffers[k]) continue;
          if (is_transposed(k))
            stage_transposed(k, buffers[k], slab_offset[k], r0, nr, c0, nc);
          else
            copy_elements(k, buffers[k], slab_offset[k], r0, c0, nc, b_.getInt64(0), nr, b_.getInt64(0), nc);
        }
        // The block's outputs: one stretch of nr * nc when the block spans whole rows,
        // else nr stretches of nc, cols apart.
        Value* stretches = b_.CreateSelect(whole_rows, one, nr);
        Value* length = b_.CreateSelect(whole_rows, b_.CreateNUWMul(nr, nc), nc);
        Value* first = b_.CreateNUWAdd(slab_start, b_.CreateNUWAdd(b_.CreateNUWMul(r0, cols), c0));
        counted_loop("stretch", b_.getInt64(0), stretches, one, [&](Value* s) {
          Value* out0 = b_.CreateNUWAdd(first, b_.CreateNUWMul(s, cols));
          Value* buf0 = b_.CreateNUWMul(s, nc);
          std::vector<Value*> saved = base_;
          for (int k = 0; k < num_inputs(); ++k)
            if (buffers[k]) base_[k] = buffers[k];
          auto elements = [&](Value* from, Value* to, unsigned width) {
            // j: the element's flat index (its outputs' offset), i: its place in the stretch.
            counted_loop("element", from, to, one, [&](Value* j) {
              Value* flat = j;
              Value* i = b_.CreateNUWSub(j, out0);
              std::vector<Value*> offsets;
              for (int k = 0; k < num_operands(); ++k) {
                if (k < num_inputs() && buffers[k])
                  offsets.push_back(b_.CreateNUWAdd(buf0, i));
                else
                  offsets.push_back(operand(k).layout == Layout::scalar ? nullptr : flat);
              }
              slab_element(flags, offsets, flat);
            }, width);
          };
          // With args->streaming (outputs 64-byte aligned and too large to cache), the part
          // of the stretch from its first boundary of 64-byte lines on is its own loop, whose
          // vector stores LLVM can prove aligned: mark_streaming_stores makes them
          // non-temporal, as in the flat kernels. Compiled only where the signature streams.
          Value* out_end = b_.CreateNUWAdd(out0, length);
          if (!streaming) {
            elements(out0, out_end, 0);
            base_ = saved;
            return;
          }
          llvm::BasicBlock* plain = llvm::BasicBlock::Create(ctx_, "stretch.plain", fn_);
          llvm::BasicBlock* split = llvm::BasicBlock::Create(ctx_, "stretch.stream", fn_);
          llvm::BasicBlock* joined = llvm::BasicBlock::Create(ctx_, "stretch.end", fn_);
          b_.CreateCondBr(streaming, split, plain);
          b_.SetInsertPoint(plain);
          elements(out0, out_end, 0);
          b_.CreateBr(joined);
          b_.SetInsertPoint(split);
          for (int k = num_inputs(); k < num_operands(); ++k)
            b_.CreateAlignmentAssumption(module_.getDataLayout(), base_[k], kStreamAlignBytes);
          Value* boundary = b_.CreateAnd(b_.CreateAdd(out0, b_.getInt64(stream_align - 1)), b_.getInt64(-stream_align));
          guarded_loop_value(out0, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, boundary, out_end),
                             [&](Value* from, Value* to) { elements(from, to, 0); });
          guarded_loop_value(boundary, out_end, [&](Value* from, Value* to) { elements(from, to, stream_width); });
          b_.CreateBr(joined);
          b_.SetInsertPoint(joined);
          base_ = saved;
        });
      });
    });
  });
  end_slabs(flags);
}

}  // namespace ampfuse::codegen::detail
