// Trains SmallCNN or a CIFAR-style ResNet on Fashion-MNIST with AdamW and a cosine schedule, reading
// batches through kiln's DataLoader, writes metrics, checkpoints and the final model to --out, and
// resumes mid-epoch exactly. Non-obvious decision: every random choice is reproducible from saved
// integers (the epoch's permutation is a host Fisher-Yates seeded from (seed, epoch); augmentation
// on the CPU draws from per-sample generators keyed by (seed, epoch, image), and on the GPU, like
// dropout, from kiln's device generator, which the checkpoint restores), so a resumed run matches an
// uninterrupted one bit for bit, whatever --workers is.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/transforms.h"
#include "dist/ddp.h"
#include "dist/sync_batch_norm.h"
#include "examples/common.h"
#include "examples/distributed.h"
#include "examples/doctor.h"
#include "examples/graphed_step.h"
#include "examples/mixed_precision.h"
#include "examples/run_record.h"
#include "examples/train_cnn_options.h"
#include "nn/optim/adamw.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;
using examples::Clock;
using examples::format_duration;
using examples::seconds_since;
using examples::cnn::Options;
using examples::cnn::parse_options;

namespace {

// Fashion-MNIST's training-set mean and standard deviation of pixel values in [0, 1].
constexpr double kMean = 0.2860, kStd = 0.3530;

// The training images as stored (uint8) behind a DataLoader, and the test set normalized on the
// device (evaluation reads it whole, in chunks).
struct Data {
  std::shared_ptr<data::FashionMnistDataset> train;
  Tensor x_test, y_test;
  // What a checkpoint's loop position refers to: the training images and labels it shuffles.
  std::map<std::string, std::string> fingerprint;
};

// What every training image goes through: with --augment a random 2-pixel pad-and-crop and a
// horizontal flip, then normalization; fused into one pass (data/transforms.h), which runs per
// sample in the loader's threads on the CPU and as one kernel per batch on the GPU.
data::transforms::Compose train_transform(const Options& opt) {
  namespace T = data::transforms;
  std::vector<T::Step> steps;
  if (opt.augment) {
    steps.emplace_back(T::RandomCrop(28, 2));
    steps.emplace_back(T::RandomHorizontalFlip());
  }
  steps.emplace_back(T::Normalize({kMean}, {kStd}));
  return T::Compose(std::move(steps), ImageLayout::CHW,
                    opt.precision.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

Data load_data(const Options& opt, Device device, const data::transforms::Compose& transform) {
  Data d;
  try {
    // On the CPU the loader's threads transform each sample; on the GPU the batch kernel does.
    data::Transform per_sample;
    if (!device.is_cuda()) per_sample = transform;
    d.train = std::make_shared<data::FashionMnistDataset>(opt.data_dir, "train", opt.train_limit.value_or(-1),
                                                          per_sample);
    const data::FashionMnistDataset test(opt.data_dir, "t10k", opt.test_limit.value_or(-1));
    d.x_test = ((test.images().to(DType::Float32) / 255.0 - kMean) / kStd).to(device);
    d.y_test = test.labels().to(device);
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  d.fingerprint = d.train->fingerprint();
  return d;
}

// Batches per epoch on this rank: all of them, or with --ddp a DistributedSampler's share (padded
// to a multiple of the ranks) in batches of batch / ranks.
int64_t rank_batches(int64_t n, int64_t batch, const dist::ProcessGroup* group) {
  if (group == nullptr) return (n + batch - 1) / batch;
  const int64_t ranks = group->size(), share = (n + ranks - 1) / ranks, local = batch / ranks;
  return (share + local - 1) / local;
}

// The initial weights come from kiln's generator, seeded by --seed just before.
std::shared_ptr<nn::UnaryModule> build_model(const Options& opt, Device device) {
  manual_seed(opt.seed);
  std::shared_ptr<nn::UnaryModule> model;
  if (opt.model == "resnet") {
    nn::ResNetConfig cfg;
    cfg.in_channels = 1;
    cfg.recompute = opt.precision.recompute;
    model = std::make_shared<nn::ResNet>(cfg);
  } else {
    nn::SmallCNNConfig cfg;
    cfg.dropout = opt.dropout;
    model = std::make_shared<nn::SmallCNN>(cfg);
  }
  model->to(device);
  if (opt.precision.channels_last) model->to(MemoryFormat::ChannelsLast);
  model->train();
  return model;
}

// --optimizer over the model's decay groups; with --zero (a group given), ZeRO of it over the ranks.
examples::ExampleOptimizer build_optimizer(const Options& opt, const nn::Module& model, dist::ProcessGroup* group) {
  const bool adamw = opt.optimizer == "adamw";
  return examples::ExampleOptimizer(
      nn::optim::decay_groups(model.named_parameters(), opt.lr, opt.weight_decay),
      [adamw](std::vector<nn::optim::ParamGroup> groups) -> std::unique_ptr<nn::optim::Optimizer> {
        if (adamw) return std::make_unique<nn::optim::AdamW>(std::move(groups));
        return std::make_unique<nn::optim::SGD>(std::move(groups), /*momentum=*/0.9, /*dampening=*/0.0,
                                                /*nesterov=*/true);
      },
      opt.zero ? group : nullptr, examples::zero_options(opt.bucket_bytes, opt.zero_stage, opt.comm_dtype));
}

// Held-out accuracy: eval mode (BatchNorm running statistics, no dropout), no autograd.
double test_accuracy(nn::UnaryModule& model, const Data& d, const examples::PrecisionOptions& precision) {
  NoGradGuard no_grad;
  std::optional<AutocastGuard> autocast;  // evaluate in the precision the run trains in
  if (const std::optional<DType> dt = precision.amp_dtype()) autocast.emplace(d.x_test.device().type, *dt);
  model.eval();
  Tensor correct = zeros({}, TensorOptions(DType::Int64, d.x_test.device()));
  const int64_t chunk = 500;
  for (int64_t start = 0; start < d.x_test.size(0); start += chunk) {
    const int64_t len = std::min(chunk, d.x_test.size(0) - start);
    Tensor pred = argmax(model(d.x_test.narrow(0, start, len)), 1);
    correct = correct + sum(eq(pred, d.y_test.narrow(0, start, len)));
  }
  model.train();
  return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(d.x_test.size(0));
}

int64_t float_bits(float v) { return static_cast<int64_t>(std::bit_cast<uint32_t>(v)); }
float bits_float(int64_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b)); }

// Where the loop is: what a checkpoint carries besides the weights, the optimizer and the
// generators. The next batch to train is (epoch, batch); loss_sum is that epoch's so far (with
// --ddp, of this rank's batches: the epoch's loss is the mean of the ranks' sums).
struct Loop {
  int64_t step = 0, epoch = 0, batch = 0;
  float first_loss = 0;  // the very first batch's (with --ddp, the ranks' mean), for the "did the loss fall" check
  Tensor loss_sum;       // on the device
};

// The epoch's loss sum in a checkpoint: "loss_sum_bits", the ranks' mean (a process's own sum
// without --ddp), which a resume over any number of ranks continues from; and with --ddp "ranks" and
// each rank's own sum ("loss_sum_bits_<rank>"), which a resume over as many ranks continues bit
// for bit. A collective under --ddp: every rank saves at the same step.
void put_loss_sums(std::map<std::string, int64_t>& position, const Tensor& loss_sum, dist::ProcessGroup* group) {
  if (group == nullptr) {
    position["loss_sum_bits"] = float_bits(loss_sum.item<float>());
    return;
  }
  Tensor gathered = empty({group->size()}, TensorOptions(loss_sum.dtype(), loss_sum.device()));
  group->all_gather(gathered, loss_sum.view({1}))->wait();
  const Tensor all = gathered.to(Device::cpu());
  double mean = 0;
  for (int64_t r = 0; r < group->size(); ++r) {
    const float v = all[r].item<float>();
    position["loss_sum_bits_" + std::to_string(r)] = float_bits(v);
    mean += v / static_cast<double>(group->size());
  }
  position["loss_sum_bits"] = float_bits(static_cast<float>(mean));
  position["ranks"] = group->size();
}

// This rank's loss sum from a checkpoint written by put_loss_sums.
float loss_sum_from(const nn::TrainingState& st, const std::string& path, const dist::ProcessGroup* group) {
  const int64_t ranks = st.data_position.count("ranks") ? st.position("ranks", 2, INT32_MAX, path) : 1;
  const bool own = group != nullptr && ranks > 1 && ranks == group->size();
  const std::string key = own ? "loss_sum_bits_" + std::to_string(group->rank()) : "loss_sum_bits";
  return bits_float(st.position(key, 0, UINT32_MAX, path));
}

// `run_settings`: the run record's settings, kept so that a resume can say what it changes.
void save_checkpoint(const std::string& path, const nn::Module& model, const nn::optim::Checkpointable& optimizer,
                     const nn::amp::GradScaler* scaler, const Options& opt, const Data& data, const Loop& loop,
                     const examples::JsonLine& run_settings, dist::ProcessGroup* group) {
  const int64_t train_size = data.train->size();
  nn::TrainingState st;
  st.step = loop.step;
  st.data_fingerprint = data.fingerprint;
  st.data_position = {{"epoch", loop.epoch},
                      {"batch", loop.batch},
                      {"seed", static_cast<int64_t>(opt.seed)},
                      {"batch_size", opt.batch_size},
                      {"train_size", train_size},
                      {"epochs", opt.epochs},
                      {"first_loss_bits", float_bits(loop.first_loss)}};
  put_loss_sums(st.data_position, loop.loss_sum, group);
  st.settings = run_settings.scalars();
  nn::save_checkpoint(path, model, &optimizer, st, scaler);
}

// Restores --resume into the model and optimizer and returns the loop position; the run continues
// the saved run's shuffling, so its seed replaces --seed. A checkpoint of other training data or
// another batch size, or whose loop position does not fit this run, is bad input; other settings
// (`run_settings`, this run's) that change the training's numbers are named in a note.
Loop resume_from(Options& opt, nn::Module& model, nn::optim::Checkpointable& optimizer, nn::amp::GradScaler* scaler,
                 const Data& data, Device device, int64_t batches_per_epoch, const examples::JsonLine& run_settings,
                 const dist::ProcessGroup* group) {
  const int64_t train_size = data.train->size();
  nn::TrainingState st;
  Loop loop;
  try {
    st = nn::load_checkpoint(opt.resume, model, &optimizer, data.fingerprint, scaler);
    const int64_t batch_size = st.position("batch_size", 1, INT64_MAX, opt.resume);
    const int64_t saved_train_size = st.position("train_size", 1, INT64_MAX, opt.resume);
    if (batch_size != opt.batch_size || saved_train_size != train_size) {
      examples::input_error("--resume: the checkpoint was trained with batch size " + std::to_string(batch_size) +
                            " on " + std::to_string(saved_train_size) + " images; got " +
                            std::to_string(opt.batch_size) + " on " + std::to_string(train_size));
    }
    const std::vector<std::string> changed =
        examples::changed_settings(st.settings, run_settings.scalars(),
                                   {"seed", "batch_size", "epochs", "workers", "prefetch", "pin_memory", "recompute",
                                    "bucket_mb", "bucket_view", "model", "parameters", "train_images", "test_images"});
    if (!st.settings.empty() && !changed.empty()) examples::note_changed_settings(opt.resume, changed);
    const int64_t epochs = st.position("epochs", 1, INT32_MAX, opt.resume);
    if (epochs != opt.epochs) {
      std::printf("note: the checkpoint's run had %lld epochs, this one %d: the schedule changes\n",
                  static_cast<long long>(epochs), opt.epochs);
    }
    // seed is a uint64 stored in an int64: every value is one.
    opt.seed = static_cast<uint64_t>(st.position("seed", INT64_MIN, INT64_MAX, opt.resume));
    loop.epoch = st.position("epoch", 0, INT32_MAX, opt.resume);
    loop.batch = st.position("batch", 0, batches_per_epoch - 1, opt.resume);
    if (st.step != loop.epoch * batches_per_epoch + loop.batch) {
      examples::input_error("--resume " + opt.resume + ": step " + std::to_string(st.step) + " is not epoch " +
                            std::to_string(loop.epoch) + " times " + std::to_string(batches_per_epoch) +
                            " batches plus batch " + std::to_string(loop.batch));
    }
    loop.step = st.step;
    loop.first_loss = bits_float(st.position("first_loss_bits", 0, UINT32_MAX, opt.resume));
    loop.loss_sum = zeros({}, TensorOptions(DType::Float32, device));
    loop.loss_sum.fill_(static_cast<double>(loss_sum_from(st, opt.resume, group)));
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  std::printf("resumed from %s at epoch %lld, batch %lld (step %lld)\n", opt.resume.c_str(),
              static_cast<long long>(loop.epoch + 1), static_cast<long long>(loop.batch),
              static_cast<long long>(loop.step));
  return loop;
}

examples::JsonLine settings(const Options& opt, Device device, int64_t train_images, int64_t test_images,
                            int64_t parameters) {
  examples::JsonLine s;
  s.text("model", opt.model).integer("parameters", parameters).integer("epochs", opt.epochs);
  s.integer("batch_size", opt.batch_size).text("optimizer", opt.optimizer).real("lr", opt.lr, "%g");
  s.real("weight_decay", opt.weight_decay, "%g").boolean("augment", opt.augment);
  s.text("amp", opt.precision.amp).boolean("tf32", device.is_cuda() && opt.precision.tf32);
  s.boolean("channels_last", opt.precision.channels_last).boolean("recompute", opt.precision.recompute);
  s.boolean("cudnn_benchmark", device.is_cuda() && opt.precision.cudnn_benchmark);
  s.integer("grad_accum", opt.precision.grad_accum).boolean("zero", opt.zero).integer("zero_stage", opt.zero_stage);
  s.real("bucket_mb", opt.bucket_mb, "%g").text("comm_dtype", opt.comm_dtype ? dtype_name(*opt.comm_dtype) : "own");
  s.boolean("bucket_view", opt.bucket_view).boolean("ddp", opt.ddp).boolean("sync_bn", opt.ddp && opt.sync_bn);
  if (opt.model == "small-cnn") s.real("dropout", opt.dropout, "%g");
  const data::DataLoaderOptions lo = opt.loader.loader_options(device, examples::cnn::kDefaultWorkers);
  s.integer("workers", lo.num_workers).integer("prefetch", lo.prefetch_factor).boolean("pin_memory", lo.pin_memory);
  return s.integer("train_images", train_images).integer("test_images", test_images).unsigned_integer("seed", opt.seed);
}

// What this process trained, for the summary record.
struct Totals {
  int64_t images = 0;
  double train_seconds = 0;  // training only, evaluation left out
  double best_accuracy = -1;
  int64_t best_epoch = 0;
};

examples::JsonLine epoch_record(const Loop& loop, double train_loss, double accuracy, double images_per_s,
                                double seconds) {
  // %.9g: a float32 loss round-trips, so the resume test can compare lines exactly.
  return examples::JsonLine()
      .text("record", "epoch")
      .integer("epoch", loop.epoch + 1)
      .integer("step", loop.step)
      .real("train_loss", train_loss, "%.9g")
      .real("test_accuracy", accuracy, "%.4f")
      .real("images_per_s", images_per_s, "%.1f")
      .real("seconds", seconds, "%.2f");
}

examples::JsonLine summary_record(bool finished, const Loop& loop, double accuracy, const Totals& t,
                                  int64_t test_images, double wall_seconds) {
  examples::JsonLine s;
  s.text("record", "summary").boolean("finished", finished).integer("epochs", loop.epoch).integer("steps", loop.step);
  // A run stopped before its first epoch ended has not been evaluated: null, not a made-up number.
  if (accuracy >= 0) {
    s.real("final_test_accuracy", accuracy, "%.4f");
  } else {
    s.null("final_test_accuracy");
  }
  if (t.best_accuracy >= 0) s.real("best_test_accuracy", t.best_accuracy, "%.4f").integer("best_epoch", t.best_epoch);
  s.integer("test_images", test_images).integer("images", t.images);
  s.real("images_per_s", t.train_seconds > 0 ? static_cast<double>(t.images) / t.train_seconds : 0, "%.1f");
  s.real("train_seconds", t.train_seconds, "%.2f").real("wall_seconds", wall_seconds, "%.2f");
  return examples::add_host_usage(s);
}

// --- what the run prints ----------------------------------------------------------------------------

void print_banner(const Options& opt, Device device, const nn::Module& model, int64_t train_images) {
  std::printf("%s on Fashion-MNIST (%s): %lld parameters, %lld training images, %d epochs, batch %lld, %s lr %g "
              "wd %g, augmentation %s; %s; %s\n",
              model.type_name().c_str(), device.str().c_str(), static_cast<long long>(model.num_parameters()),
              static_cast<long long>(train_images), opt.epochs, static_cast<long long>(opt.batch_size),
              opt.optimizer == "adamw" ? "AdamW" : "SGD", opt.lr, opt.weight_decay, opt.augment ? "on" : "off",
              examples::precision_str(opt.precision, device).c_str(),
              opt.loader.str(device, examples::cnn::kDefaultWorkers).c_str());
  std::fflush(stdout);
}

// The progress line during an epoch (its loss read waits for the device, so it is drawn rarely).
std::string progress_line(const Options& opt, const Loop& loop, int64_t batches_per_epoch, int64_t total_steps,
                          const Totals& totals, double mean_loss, double seconds) {
  const double ips = static_cast<double>(totals.images) / seconds;
  const double left = static_cast<double>(total_steps - loop.step) * static_cast<double>(opt.batch_size) / ips;
  char line[256];
  std::snprintf(line, sizeof line, "epoch %lld/%d  batch %lld/%lld  loss %.4f  %.0f images/s  ETA %s",
                static_cast<long long>(loop.epoch + 1), opt.epochs, static_cast<long long>(loop.batch),
                static_cast<long long>(batches_per_epoch),
                mean_loss, ips, format_duration(left).c_str());
  return line;
}

void print_epoch(const Options& opt, const Loop& loop, double train_loss, double accuracy, double seconds,
                 double train_seconds, double images_per_s, double total_seconds) {
  std::printf("epoch %lld/%d  train loss %.4f  test accuracy %.4f  %.1f s (%.1f s evaluating)  %.0f images/s"
              "  (total %s)\n",
              static_cast<long long>(loop.epoch + 1), opt.epochs, train_loss, accuracy, seconds,
              seconds - train_seconds, images_per_s, format_duration(total_seconds).c_str());
  std::fflush(stdout);
}

void print_result(const Options& opt, const Loop& loop, double accuracy, int64_t test_images, double seconds) {
  std::printf("held-out (t10k) accuracy %.4f on %lld images after %d epochs (%lld steps) in %s\n", accuracy,
              static_cast<long long>(test_images), opt.epochs, static_cast<long long>(loop.step),
              format_duration(seconds).c_str());
}

// --min-accuracy's verdict on a finished run: the accuracy, and the last epoch's mean loss against
// the very first batch's (the loss must have fallen).
int verdict(const Options& opt, double accuracy, const Loop& loop, double last_train_loss, bool trained) {
  if (!opt.min_accuracy) return 0;
  int status = 0;
  if (accuracy < *opt.min_accuracy) {
    std::printf("FAIL: accuracy %.4f is below --min-accuracy %.4f\n", accuracy, *opt.min_accuracy);
    status = 1;
  }
  if (trained && !(last_train_loss < 0.5 * loop.first_loss)) {
    std::printf("FAIL: the training loss did not fall (first batch %.4f, last epoch %.4f)\n", loop.first_loss,
                last_train_loss);
    status = 1;
  }
  return status;
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const auto t_launch = Clock::now();  // the first step's latency counts from here
  Options opt = parse_options(argc, argv);
  Device device = examples::choose_device(opt.device);
  examples::check_cuda_graph(opt.precision, device);
  // --ddp: every rank runs this program on its share of each batch (examples/distributed.h).
  dist::ProcessGroup* group = examples::start_ddp(opt.ddp, device, opt.batch_size, opt.out, opt.precision.grad_accum);
  const data::transforms::Compose transform = train_transform(opt);
  const Data data = load_data(opt, device, transform);
  const int64_t n = data.train->size(), n_test = data.x_test.size(0);
  const int64_t batches_per_epoch = rank_batches(n, opt.batch_size, group);
  const int64_t total_steps = batches_per_epoch * opt.epochs;
  if (opt.stop_at_step && *opt.stop_at_step > total_steps) {  // it would never come: the run would not split
    examples::input_error("--stop-at-step " + std::to_string(*opt.stop_at_step) + " is past the run's last step " +
                          std::to_string(total_steps) + " (" + std::to_string(opt.epochs) + " epochs of " +
                          std::to_string(batches_per_epoch) + " batches)");
  }

  examples::apply_math_switches(opt.precision);
  auto model = build_model(opt, device);
  examples::ExampleOptimizer optimizers = build_optimizer(opt, *model, group);
  nn::optim::Optimizer& optimizer = optimizers.stepping();
  // DDP first (or ZeRO-1, above): every rank starts from rank 0's weights, and each backward's
  // gradients are averaged.
  std::optional<dist::DistributedDataParallel> ddp;
  if (group && opt.sync_bn) dist::convert_sync_batchnorm(*model, *group);
  if (group && !opt.zero) {
    ddp.emplace(model, *group, examples::ddp_options(opt.bucket_bytes, opt.comm_dtype, opt.bucket_view));
  }
  examples::TrainStep train_step(opt.precision, device, optimizer, model->parameters(), /*grad_clip=*/0.0);
  if (ddp) train_step.set_ddp(&*ddp);
  train_step.set_zero(optimizers.zero());
  std::optional<examples::GraphedStep> graphed;  // --cuda-graph
  if (opt.precision.cuda_graph) {
    graphed.emplace(device, examples::kGraphWarmupSteps, [&optimizer] { optimizer.count_replayed_step(); });
  }
  // A short warmup: Adam's first steps move every weight by about lr, whatever its gradient's size.
  const int64_t warmup = std::min<int64_t>(100, total_steps / 20);
  nn::optim::WarmupCosine schedule(optimizer, opt.lr, warmup, total_steps, opt.lr / 100);

  examples::make_out_dir(opt.out);
  const std::string checkpoint_path = (fs::path(opt.out) / "checkpoint.safetensors").string();
  Loop loop{0, 0, 0, 0, zeros({}, TensorOptions(DType::Float32, device))};
  if (!opt.resume.empty()) {
    loop = resume_from(opt, *model, optimizers.state(), train_step.scaler(), data, device, batches_per_epoch,
                       settings(opt, device, n, n_test, model->num_parameters()), group);
    if (opt.stop_at_step && *opt.stop_at_step <= loop.step) {
      examples::input_error("--stop-at-step " + std::to_string(*opt.stop_at_step) + " is not after the checkpoint's "
                            "step " + std::to_string(loop.step));
    }
    schedule.set_step(loop.step);
  }
  const int64_t first_step = loop.step + 1;  // this process's first
  examples::MetricsFile metrics((fs::path(opt.out) / "metrics.jsonl").string(),
                                opt.resume.empty() ? std::nullopt : std::optional<int64_t>(loop.step));
  const examples::JsonLine run_settings = settings(opt, device, n, n_test, model->num_parameters());  // resumed seed
  const examples::JsonLine run_record = examples::run_record("train_cnn", argc, argv, device, opt.resume, run_settings);
  metrics.write(run_record);
  // --profile and --doctor: the phases of each step, marked here and by train_step.
  examples::RunProfile run_profile(opt.precision, device, run_record);
  profile::StepProfiler& profiler = run_profile.steps();
  train_step.set_profiler(run_profile.profiler());
  if (ddp) ddp->set_profiler(run_profile.profiler());  // the all-reduces backward waits for: comm
  if (auto* zero = optimizers.zero()) zero->set_profiler(run_profile.profiler());  // likewise its reduce-scatters
  print_banner(opt, device, *model, n);

  // Shuffled every epoch by data::epoch_permutation(n, seed, epoch), as train_cnn always has; with
  // --ddp this rank's share of that order, in batches of batch-size / ranks.
  data::DataLoaderOptions loader_options = opt.loader.loader_options(device, examples::cnn::kDefaultWorkers);
  loader_options.batch_size = opt.batch_size;
  loader_options.shuffle = true;
  loader_options.seed = opt.seed;
  if (group) {
    if (const int64_t r = n % group->size(); r != 0) {
      std::printf("note: %lld training images do not split evenly over %d ranks: the sampler repeats %lld of them "
                  "so that every rank gets as many, and the run differs from one process's\n",
                  static_cast<long long>(n), group->size(), static_cast<long long>(group->size() - r));
    }
    loader_options.batch_size = opt.batch_size / group->size();
    loader_options.shuffle = false;
    loader_options.sampler =
        std::make_shared<data::DistributedSampler>(n, group->size(), group->rank(), /*shuffle=*/true, opt.seed);
  }
  data::DataLoader loader(data.train, loader_options);
  loader.set_position({loop.epoch, loop.batch});
  data::DevicePrefetcher batches(loader, device);

  const auto t_start = Clock::now();
  examples::Progress progress;
  examples::RateWindow rate;  // for the train records
  Totals totals;
  double accuracy = -1, last_train_loss = 0;
  bool stop = false;
  for (; loop.epoch < opt.epochs && !stop; ++loop.epoch, loop.batch = 0) {
    const auto t_epoch = Clock::now();
    if (loop.batch == 0) loop.loss_sum.zero_();
    int64_t images_this_epoch = 0;
    // The loader's epoch ends with the last batch (nullopt), in step with loop.batch.
    for (;;) {
      profiler.begin(profile::Phase::DataWait);  // with the prefetcher's copy to the GPU
      const std::optional<data::Example> batch = batches.next();
      if (!batch) {
        profiler.abandon_step();
        break;
      }
      const int64_t len = batch->data.size(0);
      // On the GPU the batch arrives as uint8 and is augmented and normalized there, in one kernel.
      const Tensor xb = device.is_cuda() ? transform.apply_batch(batch->data) : batch->data;
      // The step on inputs {images, labels}: run as it is, or through the graph on static copies.
      auto step = [&](const std::vector<Tensor>& in) {
        return train_step.run(in[0].size(0), [&](int64_t start, int64_t rows) {
          return cross_entropy((*model)(in[0].narrow(0, start, rows)), in[1].narrow(0, start, rows));
        });
      };
      Tensor loss = graphed ? graphed->run({xb, batch->target}, step) : step({xb, batch->target});
      schedule.step();
      profiler.end_step();
      ++loop.step;
      ++loop.batch;
      loop.loss_sum.add_(loss.detach());
      if (loop.step == 1) {
        Tensor first = loss.detach().clone();
        if (group) group->all_reduce(first, dist::ReduceOp::Avg)->wait();  // the same on every rank
        loop.first_loss = first.item<float>();  // waits for the step
        examples::check_finite_loss(loop.first_loss, "step 1");
      }
      if (loop.step == first_step) examples::report_first_step(metrics, progress, loop.step, loss, t_launch);
      const int64_t images = group ? len * group->size() : len;  // the global batch, with --ddp
      images_this_epoch += images;
      totals.images += images;
      rate.items += static_cast<double>(images);
      if (opt.precision.log_every > 0 && loop.step % opt.precision.log_every == 0) {
        metrics.write(examples::train_record(loop.step, loss.item<double>(), schedule.lr_at(loop.step - 1),
                                             "images_per_s", rate.take_rate(), device));
      }
      if (run_profile.doctor_due(loop.step)) {
        progress.end_line();
        run_profile.doctor_report(loop.step, /*final=*/false, metrics);
      }

      // Every rank must stop at the same step, and each has its own clock: --max-minutes is the
      // ranks' agreement (examples::any_rank), --stop-at-step the same number everywhere.
      stop = (opt.stop_at_step && loop.step == *opt.stop_at_step) ||
             (opt.max_minutes && examples::any_rank(group, seconds_since(t_start) >= *opt.max_minutes * 60));
      if (progress.due() || stop) {
        const double mean_loss = loop.loss_sum.item<double>() / static_cast<double>(loop.batch);  // waits
        examples::check_finite_loss(mean_loss, "step " + std::to_string(loop.step));
        progress.print(progress_line(opt, loop, batches_per_epoch, total_steps, totals, mean_loss,
                                     seconds_since(t_start)));
      }
      if (stop && loop.batch < batches_per_epoch) {  // mid-epoch: save the position and leave
        totals.train_seconds += seconds_since(t_epoch);
        save_checkpoint(checkpoint_path, *model, optimizers.state(), train_step.scaler(), opt, data, loop, run_settings,
                        group);
        progress.end_line();
        run_profile.doctor_report(loop.step, /*final=*/true, metrics);
        std::printf("stopped at step %lld (epoch %lld, batch %lld); continue with --resume %s\n",
                    static_cast<long long>(loop.step), static_cast<long long>(loop.epoch + 1),
                    static_cast<long long>(loop.batch), checkpoint_path.c_str());
        metrics.write(summary_record(false, loop, accuracy, totals, n_test, seconds_since(t_start)));
        return 0;
      }
    }
    // The epoch's end (also when stopping there): evaluate, record, checkpoint the next position.
    Tensor epoch_loss = loop.loss_sum.clone();
    if (group) group->all_reduce(epoch_loss, dist::ReduceOp::Avg)->wait();  // every rank's batches
    last_train_loss = epoch_loss.item<double>() / static_cast<double>(batches_per_epoch);
    examples::check_finite_loss(last_train_loss, "the end of epoch " + std::to_string(loop.epoch + 1));
    const double train_secs = seconds_since(t_epoch);  // the item() above waited for the device
    const double ips = static_cast<double>(images_this_epoch) / train_secs;
    totals.train_seconds += train_secs;
    accuracy = test_accuracy(*model, data, opt.precision);
    if (accuracy > totals.best_accuracy) {
      totals.best_accuracy = accuracy;
      totals.best_epoch = loop.epoch + 1;
    }
    const double secs = seconds_since(t_epoch);
    progress.end_line();
    print_epoch(opt, loop, last_train_loss, accuracy, secs, train_secs, ips, seconds_since(t_start));
    metrics.write(epoch_record(loop, last_train_loss, accuracy, ips, secs));
    if (run_profile.profiling()) {  // the epoch's steps, averaged
      const profile::StepTimes times = run_profile.take_profile();
      std::printf("  profile: %s\n", times.str().c_str());
      metrics.write(examples::profile_record(times, loop.step).integer("epoch", loop.epoch + 1));
    }
    const Loop next{loop.step, loop.epoch + 1, 0, loop.first_loss, loop.loss_sum};
    save_checkpoint(checkpoint_path, *model, optimizers.state(), train_step.scaler(), opt, data, next, run_settings,
                    group);
    rate.restart();  // the evaluation and the checkpoint are not training
  }

  if (accuracy < 0) accuracy = test_accuracy(*model, data, opt.precision);  // a resume of a finished run trains nothing
  nn::save_safetensors((fs::path(opt.out) / "model.safetensors").string(), model->state_dict());
  const bool finished = loop.step >= total_steps;
  run_profile.doctor_report(loop.step, /*final=*/true, metrics);
  metrics.write(summary_record(finished, loop, accuracy, totals, n_test, seconds_since(t_start)));
  if (!finished) {
    std::printf("stopped after epoch %lld with test accuracy %.4f; continue with --resume %s\n",
                static_cast<long long>(loop.epoch), accuracy, checkpoint_path.c_str());
    return 0;
  }
  print_result(opt, loop, accuracy, n_test, seconds_since(t_start));
  examples::print_memory(opt.precision, device);
  return verdict(opt, accuracy, loop, last_train_loss, totals.images > 0);
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("train_cnn", [&] { return run(argc, argv); });
}
