// The LLVM IR emitter's internals, shared by its source files: kernel_emitter.cpp (arguments,
// one element, flags), flat_loops.cpp and strided_loops.cpp (the loop shapes). The public
// interface is codegen/llvm_emitter.h.
#pragma once

#include "codegen/kernel_spec.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ampfuse::codegen::detail {

using llvm::Value;

// Field numbers of KernelArgs (codegen/kernel_abi.h).
enum ArgField : unsigned { kData, kShape, kStrides, kParams, kFlags, kStreaming };

// Streaming loops start on 64-element boundaries of 64-byte aligned outputs: an aligned
// 64-byte line for every dtype, so every full-width vector store is aligned.
inline constexpr int64_t kStreamAlignElements = 64;
inline constexpr unsigned kStreamAlignBytes = 64;
// Marks the functions whose proven-aligned vector stores become non-temporal.
inline constexpr const char* kStreamingAttribute = "ampfuse-streaming";

// Tiled transposes walk the second-innermost dimension in blocks of at most this many
// elements: long inner loops, while a block's cache lines of the other operands (strided
// in that direction) still fit in L2 when they are revisited for the next column.
inline constexpr int64_t kTileBlock = 1024;
// Staged transposes (codegen/tiled_loops.cpp) gather blocks of at most this many elements
// of each strided input into a stack buffer: 16 KiB of f32, within the L1 cache.
inline constexpr int64_t kStageElements = 4096;

// Emits the functions of one kernel into a module; emit() picks the loop shape.
class KernelEmitter {
 public:
  KernelEmitter(const KernelSignature& sig, llvm::Module& module);
  void emit(const std::string& symbol);

 private:
  int num_inputs() const { return static_cast<int>(sig_.inputs.size()); }
  int num_operands() const { return num_inputs() + static_cast<int>(sig_.outputs.size()); }
  const OperandSignature& operand(int k) const {
    return k < num_inputs() ? sig_.inputs[k] : sig_.outputs[k - num_inputs()];
  }

  // Starts a kernel-signature function: its entry block loads the arguments.
  llvm::Function* begin_function(const std::string& name, llvm::GlobalValue::LinkageTypes linkage);
  void load_arguments();
  void make_alias_scopes();
  void emit_flat_loop(bool streaming);
  void emit_flat_dispatch(const std::string& symbol, llvm::Function* loop, llvm::Function* stream);
  void emit_strided();
  // Row kernels (codegen/row_loops.cpp): begin/end are rows; three passes over each row.
  void emit_rows();
  // Loads (tagged, widened) the inputs `p` reads at `offsets` (one per operand), then
  // `extra` after the parameters; returns what p's inputs bind to.
  std::vector<Value*> program_inputs(const ir::ScalarProgram& p, const std::vector<Value*>& offsets,
                                     const std::vector<Value*>& extra = {});
  // Transposes: whole slabs of the two innermost dimensions; emit_tiles interchanges the
  // loops (a transposed output), emit_staged_tiles transposes in registers.
  bool wants_tiles() const;
  // The slab loops of emit_tiles and emit_staged_tiles: a kernel's flags accumulate in
  // stack slots (LLVM promotes them back to registers). begin_slabs zeroes the slots and
  // leaves the insert point where [begin, end) is not empty; slab_element is emit_element
  // with the slots; end_slabs joins the empty case and stores the flags.
  struct SlabFlags {
    std::vector<llvm::AllocaInst*> slots;
    llvm::BasicBlock* exit = nullptr;
  };
  SlabFlags begin_slabs();
  void slab_element(const SlabFlags& flags, const std::vector<Value*>& offsets, Value* flat_index);
  void end_slabs(const SlabFlags& flags);
  void emit_tiles();
  void emit_tiled_dispatch(const std::string& symbol, llvm::Function* rows, llvm::Function* tiles);
  // Transposes whose outputs are all contiguous: blocks transposed in registers into stack
  // buffers, then a flat loop (codegen/tiled_loops.cpp).
  bool stages_tiles() const;
  bool is_transposed(int k) const;  // unit stride along rows (rank-2), general along columns
  void emit_staged_tiles();
  void stage_transposed(int k, Value* buf, Value* slab_off, Value* r0, Value* nr, Value* c0, Value* nc);
  void copy_elements(int k, Value* buf, Value* slab_off, Value* r0, Value* c0, Value* nc, Value* r_from, Value* r_to,
                     Value* c_from, Value* c_to);
  // Where load_tile prefetches: nowhere, kPrefetchBytes further down each column, or the
  // same columns' lines of the tile of the same shape at (row, col).
  struct TilePrefetch {
    enum Kind { none, down_columns, tile_at } kind = none;
    Value* row = nullptr;
    Value* col = nullptr;
  };
  Value* load_tile(int k, Value* slab_off, Value* row, Value* col, int64_t rows, int64_t cols, TilePrefetch prefetch);
  Value* concat(std::vector<Value*> parts);  // equal vectors, padded with poison to a power of two
  void tag_access(llvm::Instruction* inst, int k);
  void if_then(Value* cond, const std::function<void()>& then);
  // An empty `otherwise` makes it if_then.
  void if_else(Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise);
  // body(from, to) only when from < to.
  void guarded_loop_value(Value* from, Value* to, const std::function<void(Value*, Value*)>& body);
  // counted_loop that runs no iteration when from >= to.
  void guarded_loop(const char* name, Value* from, Value* to, Value* step, const std::function<void(Value*)>& body,
                    unsigned vector_width = 0, bool fold_tail = false);
  // for (iv = from; iv < to; iv += step) body(iv), for from < to (checked by the caller).
  // A nonzero vector_width asks the loop vectorizer for that many lanes; kScalarLoop keeps
  // the loop as written (neither vectorized, interleaved nor unrolled): for short remainder
  // loops whose vector forms would cost more compile time than they save run time.
  // `fold_tail` asks for the last partial vector as masked loads and stores instead of a
  // scalar remainder loop, and no interleaving: for short loops of costly bodies (a row
  // kernel's 100 columns would otherwise run 36 of them one by one).
  static constexpr unsigned kScalarLoop = 1;
  // Puts counted_loop's vector_width and fold_tail hints on the loop `latch` closes.
  void hint_loop(llvm::BranchInst* latch, unsigned vector_width, bool fold_tail);
  // The lanes that keep a streaming loop's stores full-width, for its width hint (0: none).
  // A 16-bit output narrowed from vectors of the preferred width is a truncating store
  // (vpmovdw), which has no non-temporal form: on Sapphire Rapids, where LLVM prefers 256
  // bits, no bf16 output was streamed. Vectors of twice the widest registers' 32-bit lanes
  // narrow to one full register. A body calling the C library stays scalar and gets no
  // hint (a width hint on a loop LLVM then cannot vectorize prints a remark on stderr).
  unsigned streaming_width() const;
  void counted_loop(const char* name, Value* from, Value* to, Value* step, const std::function<void(Value*)>& body,
                    unsigned vector_width = 0, bool fold_tail = false);
  // Offset of a strided operand's element: `base` plus index * stride for the listed dims.
  Value* strided_offset(int k, Value* base, const std::vector<std::pair<int, Value*>>& dims);
  // One element: loads at `offsets` (nullptr: element 0), the body, the stores, and the
  // flag accumulators updated from `flags_in`. `flat_index` (i64) is the element's flat
  // iteration index (what philox_bits24 reads).
  std::vector<Value*> emit_element(const std::vector<Value*>& offsets, Value* flat_index,
                                   const std::vector<Value*>& flags_in);
  void store_flags(const std::vector<Value*>& accumulators);
  Value* field(ArgField f);
  // Offset arithmetic in index_type_. Offsets are non-negative and below 2^31 (int32) or
  // 2^63 (validate() rejects more), so it never wraps; saying so lets LLVM widen and
  // analyse the strided accesses as affine.
  Value* to_index(Value* v) { return b_.CreateTrunc(v, index_type_, "", true, true); }
  Value* offset_add(Value* a, Value* b) { return b_.CreateAdd(a, b, "", true, true); }
  Value* offset_mul(Value* a, Value* b) { return b_.CreateMul(a, b, "", true, true); }

  const KernelSignature& sig_;
  llvm::LLVMContext& ctx_;
  llvm::Module& module_;
  llvm::IRBuilder<> b_;
  llvm::Type* compute_;
  llvm::Type* index_type_;  // i32 or i64, for strided offsets
  llvm::StructType* args_type_;
  llvm::FunctionType* fn_type_;
  llvm::Function* fn_ = nullptr;
  Value* begin_ = nullptr;
  Value* end_ = nullptr;
  Value* args_ = nullptr;
  std::vector<Value*> base_;                  // per operand
  std::vector<Value*> params_;                // in the compute type
  std::vector<Value*> shape_;                 // i64 extents (strided kernels)
  std::vector<std::vector<Value*>> strides_;  // per operand and dimension, index_type_
  std::vector<llvm::MDNode*> scope_, noalias_;
};

}  // namespace ampfuse::codegen::detail
