// fold_batchnorm: an inference BatchNorm right after a Convolution becomes the convolution's
// weights and bias.
//
// At inference BatchNorm is a per-channel affine map, BN(v) = v * s + t, and a convolution
// is linear in its weights, so BN(conv(x, w) + b) = conv(x, w * s) + BN(b):
//
//   %c = Convolution(%x, %w, %b)
//   %y = BatchNorm(%c, gamma, beta, mean, var)
//     ->  %y = Convolution(%x, %w * s[oc], BN(%b))
//
// with BN applied to a per-channel vector of shape [C], s = BN'(1) where BN' is the same
// BatchNorm with mean and beta 0, and BN(0) as the bias when the convolution has none.
// The new weight and bias are computed by BatchNorm nodes on [C] vectors, so the math of
// BatchNorm stays in its scalar recipe alone. The BatchNorm then costs no pass over memory at
// all, even when no elementwise op follows it to fuse with (conv -> BN -> conv or pooling).
// The new operands are computed from the parameters alone, so
// ExecutorOptions::constant_params computes them once. They are computed in f32 and the
// weight rounded once to its dtype; the bias stays f32 (a Convolution may take a bias wider
// than its data). The result differs from the unfolded graph by rounding only (the order of
// operations changes), so the executor applies the pass only when asked
// (ExecutorOptions::fold_batchnorm).
//
// A BatchNorm is folded when: its data is output 0 of a Convolution (not Deconvolution) that
// nothing else reads and that is not a graph output; it normalizes the convolution's channel
// axis; it has one output (no output_mean_var); and the convolution's weight and bias and the
// BatchNorm's parameters are computed from param/aux variables only (otherwise folding would
// add work to every run). The folded Convolution takes the BatchNorm's name (it computes that
// value; graph outputs keep their names); the nodes of its new operands are named
// "<bn>_scale", "<bn>_folded_weight" and "<bn>_folded_bias" and the like.
#pragma once

#include "ir/graph.h"

namespace ampfuse::engine {

// Folds every BatchNorm that qualifies (above) into the Convolution before it. Types must be
// inferred; they are inferred again for the new nodes. Returns the number folded.
int fold_batchnorm(ir::Graph& g);

}  // namespace ampfuse::engine
