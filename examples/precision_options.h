// The training examples' precision, memory and observability flags: --amp, --tf32, --channels-last,
// --cudnn-benchmark, --recompute, --grad-accum, --memory (what they do: examples/mixed_precision.h), --cuda-graph
// (examples/graphed_step.h), --profile, --doctor, --doctor-every and --log-every (examples/doctor.h,
// run_record.h). In a header of their own, as the rest of the examples' options, so the command-line
// fuzzer parses exactly what the programs do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/cuda/runtime.h"
#include "core/device.h"
#include "examples/common.h"

namespace kiln::examples {

// Eager steps before --cuda-graph captures: the first creates the optimizer's state, library
// handles and cuDNN's plans; all of them measure the memory the capture reserves.
inline constexpr int64_t kGraphWarmupSteps = 3;

struct PrecisionOptions {
  std::string amp = "off";  // off, bf16, fp16
  bool tf32 = true;
  bool channels_last = false;
  bool cudnn_benchmark = false;  // --cudnn-benchmark: cuDNN times its algorithms once per shape
  bool recompute = false;
  int64_t grad_accum = 1;
  bool memory = false;
  bool cuda_graph = false;   // --cuda-graph: the whole step captured once and replayed
  bool profile = false;      // --profile: the step profiler (core/profiler.h)
  bool doctor = false;       // --doctor: the utilization doctor (examples/doctor.h)
  int64_t doctor_every = 0;  // its report every N steps too; 0: at the end only
  int64_t log_every = 50;    // a "train" record every N steps; 0: none

  std::optional<DType> amp_dtype() const {
    if (amp == "bf16") return DType::BFloat16;
    if (amp == "fp16") return DType::Float16;
    return std::nullopt;
  }
  // float16 needs loss scaling; bfloat16 has float32's range and does not.
  bool loss_scaling() const { return amp == "fp16"; }
};

// Adds the flags; --channels-last only where the model has 4-d activations (`image_model`).
inline void add_precision_options(Flags& app, PrecisionOptions& p, bool image_model) {
  app.add_option("--amp", p.amp,
                 "mixed precision: autocast matmuls/convs/attention to bf16, or to fp16 with dynamic loss scaling; "
                 "off keeps float32")
      ->one_of({"off", "bf16", "fp16"});
  app.add_flag("--tf32,!--no-tf32", p.tf32,
               "TF32 tensor-core math for float32 matmuls and convolutions on the GPU (default on; no effect on "
               "the CPU)");
  if (image_model) {
    app.add_flag("--channels-last", p.channels_last,
                 "keep weights and activations in NHWC, the layout tensor-core convolutions read");
    app.add_flag("--cudnn-benchmark", p.cudnn_benchmark,
                 "let cuDNN time its convolution algorithms once per shape and keep the fastest, instead of its "
                 "heuristic's pick (GPU only; no effect on the CPU)");
  }
  app.add_flag("--recompute", p.recompute,
               "activation recompute: keep only each block's input and run the block again in backward");
  app.add_option("--grad-accum", p.grad_accum,
                 "compute each step's batch as K micro-batches of batch-size/K (less activation memory)")
      ->transform(whole<int64_t>(1, 1 << 20));
  app.add_flag("--memory", p.memory, "print the device allocator's memory summary at the end");
  app.add_flag("--cuda-graph", p.cuda_graph,
               "after " + std::to_string(kGraphWarmupSteps) +
                   " eager steps, capture the whole training step as a CUDA graph and replay it (GPU only)");
  app.add_flag("--profile", p.profile,
               "time each step's phases (data, forward, backward, optimizer) and print their means");
  app.add_flag("--doctor", p.doctor,
               "at the end, report where the steps' time went, GPU utilization and memory, and the tips that apply");
  app.add_option("--doctor-every", p.doctor_every, "--doctor, and a report of the last N steps every N steps")
      ->transform(whole<int64_t>(1, int64_t{1} << 40))
      ->default_str("none");
  app.add_option("--log-every", p.log_every,
                 "write a train record (the step's loss, lr, throughput, memory) to metrics.jsonl every N steps; 0: "
                 "none")
      ->transform(whole<int64_t>(0, int64_t{1} << 40));
}

// --cuda-graph needs a GPU, and a step that is one graph launch: the profiler's phases inside it
// cannot be timed. (--ddp's NCCL all-reduces are captured with the step: docs/cuda-graphs.md.)
inline void check_cuda_graph(const PrecisionOptions& p, Device device) {
  if (!p.cuda_graph) return;
  if (!device.is_cuda()) input_error("--cuda-graph needs a CUDA device; this run is on " + device.str());
  if (p.profile || p.doctor || p.doctor_every > 0) {
    input_error(std::string("--cuda-graph replays forward, backward and the optimizer as one launch, which ") +
                (p.profile ? "--profile" : p.doctor ? "--doctor" : "--doctor-every") +
                " cannot split into phases: profile an eager run");
  }
}

// Every micro-batch needs a row: --grad-accum at most --batch-size.
inline void check_grad_accum(const PrecisionOptions& p, int64_t batch_size) {
  if (p.grad_accum > batch_size) {
    input_error("--grad-accum " + std::to_string(p.grad_accum) + " is larger than --batch-size " +
                std::to_string(batch_size) + ": every micro-batch needs at least one row");
  }
}

inline void apply_math_switches(const PrecisionOptions& p) {
  cuda::math_switches().allow_tf32_matmul = p.tf32;
  cuda::math_switches().allow_tf32_cudnn = p.tf32;
  cuda::math_switches().cudnn_benchmark = p.cudnn_benchmark;
}

// A summary of the flags for the examples' banners.
inline std::string precision_str(const PrecisionOptions& p, Device device) {
  std::string s = "amp " + p.amp + ", tf32 " + (device.is_cuda() && p.tf32 ? "on" : "off");
  if (p.channels_last) s += ", channels-last";
  if (p.cudnn_benchmark && device.is_cuda()) s += ", cuDNN benchmark";
  if (p.recompute) s += ", recompute";
  if (p.grad_accum > 1) s += ", grad-accum " + std::to_string(p.grad_accum);
  if (p.cuda_graph) s += ", CUDA graph";
  return s;
}

}  // namespace kiln::examples
