// External ops through oneDNN 2.6 (the v2 API): convolution and deconvolution, the
// convolution weight gradient (_backward_Convolution_weight), matmul-like ops, pooling,
// softmax and LayerNorm, channels-first and channels-last; a training step's
// _BatchNorm_train (batch statistics, then the moving ones in C++), _backward_Pooling (max
// and avg) and sum/mean (runtime/onednn/onednn_training.cpp); the gradients of softmax and
// log_softmax (_backward_softmax at temperature 1, not softmin) and of LayerNorm over the
// last axis (_backward_LayerNorm: dx, dgamma, dbeta), onednn_norm_backward.cpp. Where
// oneDNN has only a reference loop for a reduction's axes (per-channel sums of NCHW data,
// column sums) a vectorized f32 loop of ours runs it instead ("ampfuse:vectorized_sum"),
// behind the same interface. Builders in other files of this folder share onednn_builders.h.
//
// Dtypes: f32 runs natively. bf16 runs natively where this CPU's oneDNN has a non-reference
// implementation for it (AVX-512 and up; oneDNN accumulates in f32 and its bf16 conversions
// flush subnormals, which the compute paths accept). Otherwise (AVX2: oneDNN 2.6 has no bf16
// CPU kernels at all) bf16 and f16 run as f32 compute: the low-precision inputs are widened
// exactly, the f32 primitive runs, and the outputs are rounded with ir/lowp.h (nearest even,
// subnormals kept) - the reference interpreter's own semantics. Either way results differ
// from the reference by summation order only (tested with a tolerance, not bit for bit).
// f64 and integer types are refused (the reference computes f64 in f64).
//
// Primitives are created once per (op, attributes, shapes, dtypes) and cached.
#pragma once

#include "ir/graph.h"
#include "runtime/tensor.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ampfuse::runtime {

// Whether oneDNN runs `node` with these input types here (op, dtype and attribute
// combinations it has; e.g. LayerNorm only over the last axis, no sum/lp pooling). Exact:
// true means onednn_run works. A oneDNN failure other than "unimplemented" while creating
// the primitive is a bug, not a refusal: it throws ampfuse::Error naming the node and
// oneDNN's status.
bool onednn_supports(const ir::Node& node, std::span<const TensorType> inputs);

// Why onednn_supports is false ("" when it is true).
std::string onednn_refusal(const ir::Node& node, std::span<const TensorType> inputs);

// Whether oneDNN runs `node` by widening its bf16/f16 operands to f32 (no native kernel for
// them here). The executor then makes the casts graph nodes (engine/passes/compute_in_f32.h)
// so that they fuse with the kernels around the node.
bool onednn_computes_in_f32(const ir::Node& node, std::span<const TensorType> inputs);

// Whether oneDNN 2.6's primitive for `node` may give another result than the reference
// kernel where its data (input 0) holds NaN or +-Inf: max pooling gives a number for a
// window holding NaN (the interpreter's max propagates it) and its gradient gives that
// window's gradient to another element than the reference's (its last); softmax leaves a
// row holding NaN NaN in only some of its elements. The executor guards such a node: where
// its data is not all finite it runs the reference kernel instead (docs/ops.md, "NaN
// through oneDNN").
bool onednn_differs_on_nonfinite(const ir::Node& node);

// A convolution's weights in the (blocked) layout its primitive wants, kept by the caller
// between runs of one node: the first onednn_execute with it reorders the weights it is
// given and keeps them; later calls with the same weight buffer reuse them (from any thread);
// calls with another buffer run without it. Give one only for weights whose contents do
// not change while they stay bound (engine::ExecutorOptions::constant_params). Other ops
// ignore it. It keeps a copy per primitive the node may run with: the one made for a team
// of threads and the one made for a solo run (runtime/team_policy.h), whose layouts may
// differ.
struct OnednnWeightCache {
  Tensor source;  // the weights it was filled from (kept alive, so their address stays theirs)
  std::shared_ptr<void> reordered[2];  // a dnnl::memory each: [0] for teams, [1] solo
  std::mutex mutex;                    // held while filling
  std::atomic<bool> filled[2] = {false, false};
};

// A node oneDNN runs, with its primitive created: what an executor keeps per node so that
// a run neither looks the primitive up nor formats its key.
struct OnednnPrimitive;

// The primitive for `node` with these input types, or null when !onednn_supports.
std::shared_ptr<const OnednnPrimitive> onednn_primitive(const ir::Node& node, std::span<const TensorType> inputs);

// Runs `node` through its primitive; `inputs` have the types it was made for, `outputs`
// arrive allocated with the node's types. Thread-safe. In a run that goes solo
// (runtime/team_policy.h) a primitive made for a team of threads is replaced by one made for
// one thread (created on first need: oneDNN divides a primitive's work among the threads it
// was made for, so it cannot simply run on fewer), if that one computes the same bits on a
// probe input; otherwise the op keeps its team, so that results never depend on the choice. Throws ampfuse::Error naming the
// node and oneDNN's status when oneDNN fails.
void onednn_execute(const OnednnPrimitive& primitive, const ir::Node& node, std::span<const Tensor> inputs,
                    std::span<Tensor> outputs, OnednnWeightCache* weights = nullptr);

// onednn_primitive and onednn_execute in one call (tests, one-off runs). Throws
// ampfuse::Error (naming the node, and the reason) if !onednn_supports.
void onednn_run(const ir::Node& node, std::span<const Tensor> inputs, std::span<Tensor> outputs);

// The implementation oneDNN picked for `node` ("jit:avx2", "brgconv:avx512_core_bf16",
// "ref:any"...), creating the primitive if needed; "" when unsupported. Low-precision nodes
// computed in f32 carry a suffix: "jit:avx2 (bf16 as f32)". Pooling of channels-first data
// that oneDNN only has a plain loop for runs in its channel-blocked layout, between two
// reorders: "jit:avx2 (via nChw8c)".
std::string onednn_impl_name(const ir::Node& node, std::span<const TensorType> inputs);

// Whether `impl` (onednn_impl_name) is one of oneDNN's unvectorized loops: "ref:...",
// "bnorm_ref:..." and "simple...", such as "simple_nchw:any" pooling. Run reports flag
// those on hot paths.
bool onednn_impl_is_slow(std::string_view impl);

// Makes the primitives that onednn_primitive will be asked for, for these nodes with these
// input types, on threads of its own while the caller goes on with other work. A model's
// distinct convolutions take 0.2-1 ms each to make (oneDNN generates their kernels then):
// most of a compile whose kernels and plan come from the disk cache (bench/README.md, "Disk
// kernel cache"). Each is made for the OpenMP thread count of the thread that constructs
// this, so it is the primitive that thread would have made. Nothing is reported here: a node
// that fails fails again in onednn_primitive, which reports it. The nodes must outlive this.
class OnednnPrefetch {
 public:
  struct Item {
    const ir::Node* node;
    std::vector<TensorType> inputs;
  };
  explicit OnednnPrefetch(std::vector<Item> items);
  // Helps with what is left, and returns when every primitive is made.
  void wait();
  // Returns once the primitives started are made; those not started are not made.
  ~OnednnPrefetch();
  OnednnPrefetch(const OnednnPrefetch&) = delete;
  OnednnPrefetch& operator=(const OnednnPrefetch&) = delete;

 private:
  struct Work;
  std::shared_ptr<Work> work_;
  std::vector<std::thread> threads_;
};

// How many primitives were created (cache misses) in this process.
size_t onednn_primitives_created();

}  // namespace ampfuse::runtime
