// ampfuse's public C++ API in one include, for programs built against an installed ampfuse
// (README.md, "Use ampfuse from C++"):
//
//   graphs    ir::GraphBuilder, MXNet *-symbol.json import and export, the text format,
//             ir::infer_types
//   AMP       engine::convert_for_amp and its options
//   running   engine::Executable (plan, compile, run), runtime::interpret (the reference)
//   tensors   runtime::Tensor (own memory, or a framework's wrapped without a copy), .npy I/O,
//             MXNet .params files (runtime::read_mxnet_params, write_mxnet_params)
//   training  engine::Block (hybridize), AMP scopes, engine::LossScaler, engine::Optimizer
//             (SGD/Adam/AdamW as generated multi-tensor kernels)
//   errors    ampfuse::Error, the exception ampfuse throws for anything it cannot do
//
// The headers below include each other as "ir/graph.h", "engine/...", "runtime/..." (the
// package puts their directory on the include path too), and none of them includes a header
// of ampfuse's dependencies (LLVM, oneDNN, fmt, nlohmann_json): the install test checks both.
#pragma once

#include "ampfuse/version.h"

#include "ir/exception.h"

#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"

#include "engine/lower.h"

#include "engine/execution/executor.h"
#include "runtime/interpreter.h"
#include "runtime/mxnet_params.h"
#include "runtime/npy.h"
#include "runtime/tensor.h"

#include "engine/api/amp_scope.h"
#include "engine/api/block.h"
#include "engine/api/loss_scaler.h"
#include "engine/training/optimizer.h"
#include "engine/training/trainer.h"
