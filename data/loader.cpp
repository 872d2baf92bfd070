// The DataLoader. The caller's thread owns the epoch (its batch list and position); workers only
// turn (epoch, batch index, sample indices) tasks into batches and file them under their index.
// Every task carries the generation of the epoch run it belongs to: ending a run (its end, a
// set_position, an error, the destructor) bumps the generation, so whatever the workers still
// finish for the old run is dropped instead of delivered. Workers that are not persistent are
// started together for one run (a cohort) and told to stop together at its end. An error or a
// timeout does not wait for them: a worker can only stop between samples, and one stuck in a get()
// would hold the error back until that get() returned, or forever. Their cohort is retired instead
// (joined once all of its threads have exited, or by the destructor) and the error thrown at once.
#include "data/loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/cuda/runtime.h"
#include "core/ops/copy.h"
#include "core/ops/factory.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/log.h"

namespace kiln::data {

struct DataLoader::Shared {
  struct Task {
    uint64_t generation;
    int64_t epoch, batch;
    std::vector<int64_t> indices;
  };
  struct Result {
    Example batch;
    std::exception_ptr error;
  };
  // Workers started together, and told to stop together.
  struct Cohort {
    bool stop = false;            // under the mutex
    std::atomic<int64_t> exited{0};  // threads of the cohort that have returned
    std::vector<std::thread> threads;
    bool all_exited() const { return exited.load() == static_cast<int64_t>(threads.size()); }
    void join() {
      for (std::thread& t : threads) t.join();
    }
  };
  std::mutex mutex;
  std::condition_variable work_ready, result_ready;
  std::deque<Task> queue;
  std::map<int64_t, Result> results;       // by batch index, for the current generation only
  std::atomic<uint64_t> generation{0};     // written under the mutex; read without it to cancel early
  std::unique_ptr<Cohort> workers;         // the running cohort, if any
  // Cohorts told to stop but not joined (after an error or a timeout); only the loader's own thread
  // touches this list.
  std::vector<std::unique_ptr<Cohort>> retired;
};

namespace {

// The same kind of kiln::Error as `error`, with `context` in front of its message; anything else
// becomes a plain kiln::Error.
[[noreturn]] void rethrow_with_context(const std::exception_ptr& error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const IndexError& e) {
    throw IndexError(context + e.what());
  } catch (const IOError& e) {
    throw IOError(context + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(context + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(context + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(context + e.what());
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(context + e.what());
  } catch (const AutogradError& e) {
    throw AutogradError(context + e.what());
  } catch (const std::exception& e) {
    throw Error(context + e.what());
  } catch (...) {
    throw Error(context + "an exception that is not a std::exception");
  }
}

// One field of the batch: the samples' tensors stacked along a new first dimension.
Tensor stack_field(std::vector<Example>& samples, Tensor Example::*field, const char* name, bool pin) {
  const Tensor& first = samples[0].*field;
  const bool defined = first.defined();
  for (size_t i = 1; i < samples.size(); ++i) {
    const Tensor& t = samples[i].*field;
    if (t.defined() != defined) {
      throw Error(std::string("default_collate: the ") + name + " of sample 0 is " +
                  (defined ? "defined" : "undefined") + " but that of sample " + std::to_string(i) + " is not");
    }
    if (!defined) continue;
    if (t.sizes() != first.sizes()) {
      throw ShapeError(std::string("default_collate: the ") + name + " of sample " + std::to_string(i) + " is " +
                       shape_str(t.sizes()) + " but that of sample 0 is " + shape_str(first.sizes()));
    }
    if (t.dtype() != first.dtype()) {
      throw DTypeError(std::string("default_collate: the ") + name + " of sample " + std::to_string(i) + " is " +
                       dtype_name(t.dtype()) + " but that of sample 0 is " + dtype_name(first.dtype()));
    }
  }
  if (!defined) return Tensor();
  // The batch keeps its samples' layout when they share one dense layout (an image decoded as HWC and
  // permuted to [C, H, W] makes a channels-last batch, as a conv on the GPU reads it best): each
  // sample's block is copied as it lies. Samples of other layouts are made contiguous first.
  bool same_layout = first.is_non_overlapping_and_dense();
  for (size_t i = 1; i < samples.size() && same_layout; ++i) {
    same_layout = (samples[i].*field).strides() == first.strides();
  }
  Shape shape{static_cast<int64_t>(samples.size())}, strides{first.numel()};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  const Shape sample_strides = same_layout ? first.strides() : contiguous_strides(first.sizes());
  strides.insert(strides.end(), sample_strides.begin(), sample_strides.end());
  Tensor out = pin ? empty_pinned(shape, strides, first.dtype())
                   : empty_strided(shape, strides, TensorOptions(first.dtype()));
  const size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  auto* dst = static_cast<unsigned char*>(out.data_ptr());
  for (size_t i = 0; i < samples.size(); ++i) {
    Tensor t = samples[i].*field;
    if (!t.is_cpu()) {
      throw DeviceError(std::string("default_collate: the ") + name + " of sample " + std::to_string(i) + " is on " +
                        t.device().str() + "; datasets return CPU tensors (move batches to the device after)");
    }
    if (!same_layout && !t.is_contiguous()) t = t.contiguous();
    if (bytes > 0) std::memcpy(dst + i * bytes, t.data_ptr(), bytes);  // dense: a block from its first element
  }
  return out;
}

// Which dataset samples a batch holds, for an error about one of them by its place in the batch:
// "its samples 0.. are dataset samples 3, 4, 5", the first 32 of a larger batch.
std::string batch_samples(const std::vector<int64_t>& indices) {
  constexpr size_t kShown = 32;
  std::string out = "its samples 0.. are dataset samples ";
  for (size_t i = 0; i < indices.size() && i < kShown; ++i) out += (i ? ", " : "") + std::to_string(indices[i]);
  if (indices.size() > kShown) out += ", ... (" + std::to_string(indices.size()) + " in all)";
  return out;
}

// The batch of `indices` (batch `batch` of `epoch`), each sample read with its own generator; nullopt
// when `cancelled` turns true between samples (the run it was for has ended). A failure is rethrown
// with the sample, batch and epoch in front of its message.
std::optional<Example> read_batch(const Dataset& dataset, const DataLoaderOptions& options, int64_t epoch,
                                  int64_t batch, const std::vector<int64_t>& indices,
                                  const std::function<bool()>& cancelled) {
  std::vector<Example> samples;
  samples.reserve(indices.size());
  for (int64_t index : indices) {
    if (cancelled && cancelled()) return std::nullopt;
    try {
      SampleGeneratorScope generator(options.seed, epoch, index);
      samples.push_back(dataset.get(index));
    } catch (...) {
      rethrow_with_context(std::current_exception(), "DataLoader: sample " + std::to_string(index) + " (batch " +
                                                         std::to_string(batch) + " of epoch " +
                                                         std::to_string(epoch) + "): ");
    }
  }
  try {
    return options.collate(samples, options.pin_memory);
  } catch (...) {
    rethrow_with_context(std::current_exception(), "DataLoader: collating batch " + std::to_string(batch) +
                                                       " of epoch " + std::to_string(epoch) + " (" +
                                                       batch_samples(indices) + "): ");
  }
}

}  // namespace

Example default_collate(std::vector<Example>& samples, bool pin) {
  if (samples.empty()) throw Error("default_collate: no samples to collate");
  NoGradGuard no_grad;
  return {stack_field(samples, &Example::data, "data", pin), stack_field(samples, &Example::target, "target", pin)};
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)), shared_(std::make_shared<Shared>()) {
  if (!dataset_) throw Error("DataLoader: no dataset given");
  const auto& o = options_;
  if (o.batch_size < 1) throw Error("DataLoader: batch_size must be at least 1, got " + std::to_string(o.batch_size));
  if (o.num_workers < 0 || o.num_workers > 1024) {
    throw Error("DataLoader: num_workers must be in [0, 1024], got " + std::to_string(o.num_workers));
  }
  if (o.prefetch_factor < 1 || o.prefetch_factor > kMaxPrefetchFactor) {
    throw Error("DataLoader: prefetch_factor must be in [1, " + std::to_string(kMaxPrefetchFactor) + "], got " +
                std::to_string(o.prefetch_factor));
  }
  // Past 1e9 s (32 years) the wait's deadline would overflow the clock's nanoseconds.
  if (!(o.timeout >= 0 && o.timeout <= 1e9)) {
    throw Error("DataLoader: timeout must be 0 (wait forever) or a number of seconds up to 1e9, got " +
                num_str(o.timeout));
  }
  if (o.sampler && o.shuffle) {
    throw Error("DataLoader: shuffle and a sampler are exclusive (the sampler decides the order)");
  }
  if (o.pin_memory && !cuda::is_available()) {
    KILN_LOG(Warn, "DataLoader: pin_memory is ignored: " + cuda::unavailable_reason());
    options_.pin_memory = false;
  }
  if (!options_.collate) options_.collate = default_collate;
  const int64_t n = dataset_->size();
  if (o.sampler) {
    sampler_ = o.sampler;
  } else if (o.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(n, o.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(n);
  }
}

DataLoader::~DataLoader() {
  Shared& sh = *shared_;
  {
    std::lock_guard<std::mutex> lk(sh.mutex);
    if (sh.workers) sh.workers->stop = true;
    ++sh.generation;
    sh.queue.clear();
  }
  sh.work_ready.notify_all();
  if (sh.workers) sh.workers->join();
  for (auto& cohort : sh.retired) cohort->join();
}

int64_t DataLoader::size() const { return BatchSampler(*sampler_, options_.batch_size, options_.drop_last).size(); }

int64_t DataLoader::live_workers() const {
  std::lock_guard<std::mutex> lk(shared_->mutex);
  return shared_->workers ? static_cast<int64_t>(shared_->workers->threads.size()) : 0;
}

void DataLoader::start_epoch() {
  sampler_->set_epoch(position_.epoch);
  batches_ = BatchSampler(*sampler_, options_.batch_size, options_.drop_last).batches();
  submitted_ = std::min<int64_t>(position_.batch, static_cast<int64_t>(batches_.size()));
  in_epoch_ = true;
  if (options_.num_workers == 0) return;
  Shared& sh = *shared_;
  // Retired cohorts whose threads have all returned join at once; a stuck one stays retired.
  std::erase_if(sh.retired, [](const std::unique_ptr<Shared::Cohort>& cohort) {
    if (!cohort->all_exited()) return false;
    cohort->join();
    return true;
  });
  if (!sh.workers) {
    auto cohort = std::make_unique<Shared::Cohort>();
    Shared::Cohort* mine = cohort.get();  // owned by Shared (running or retired) until joined
    // Each worker reads through the same const dataset; what it may change is its own.
    std::shared_ptr<Shared> shared = shared_;
    std::shared_ptr<const Dataset> dataset = dataset_;
    const DataLoaderOptions options = options_;
    try {
      for (int64_t w = 0; w < options_.num_workers; ++w) {
        cohort->threads.emplace_back([shared, dataset, options, mine] {
          cpu::SerialScope serial;  // the workers are the parallelism
          Shared& s = *shared;
          for (;;) {
            Shared::Task task;
            {
              std::unique_lock<std::mutex> lk(s.mutex);
              s.work_ready.wait(lk, [&] { return mine->stop || !s.queue.empty(); });
              if (mine->stop) break;
              task = std::move(s.queue.front());
              s.queue.pop_front();
            }
            Shared::Result result;
            try {
              std::optional<Example> batch = read_batch(*dataset, options, task.epoch, task.batch, task.indices,
                                                        [&] { return s.generation != task.generation; });
              if (!batch) continue;
              result.batch = std::move(*batch);
            } catch (...) {
              result.error = std::current_exception();
            }
            {
              std::lock_guard<std::mutex> lk(s.mutex);
              if (s.generation != task.generation) continue;
              s.results[task.batch] = std::move(result);
            }
            s.result_ready.notify_all();
          }
          ++mine->exited;
        });
      }
    } catch (const std::exception& e) {  // the system refused a thread: stop and join the ones started
      {
        std::lock_guard<std::mutex> lk(sh.mutex);
        mine->stop = true;
      }
      sh.work_ready.notify_all();
      cohort->join();
      in_epoch_ = false;
      batches_.clear();
      throw Error("DataLoader: could not start worker " + std::to_string(cohort->threads.size() + 1) + " of " +
                  std::to_string(options_.num_workers) + ": " + e.what());
    }
    std::lock_guard<std::mutex> lk(sh.mutex);
    sh.workers = std::move(cohort);
  }
}

void DataLoader::stop_epoch(bool join) {
  in_epoch_ = false;
  batches_.clear();
  if (options_.num_workers == 0) return;
  Shared& sh = *shared_;
  std::unique_ptr<Shared::Cohort> ending;
  {
    std::lock_guard<std::mutex> lk(sh.mutex);
    ++sh.generation;
    sh.queue.clear();
    sh.results.clear();
    if (!options_.persistent_workers && sh.workers) {
      sh.workers->stop = true;
      ending = std::move(sh.workers);
    }
  }
  if (!ending) return;
  sh.work_ready.notify_all();
  if (join) {
    ending->join();
  } else {
    sh.retired.push_back(std::move(ending));
  }
}

std::optional<Example> DataLoader::next() {
  if (!in_epoch_) start_epoch();
  const auto batches = static_cast<int64_t>(batches_.size());
  if (position_.batch >= batches) {
    stop_epoch();
    position_ = {position_.epoch + 1, 0};
    return std::nullopt;
  }
  const int64_t index = position_.batch;
  if (options_.num_workers == 0) {
    Example batch;
    try {
      batch = *read_batch(*dataset_, options_, position_.epoch, index, batches_[static_cast<size_t>(index)], {});
    } catch (...) {
      stop_epoch();
      throw;
    }
    ++position_.batch;
    return batch;
  }
  Shared& sh = *shared_;
  Shared::Result result;
  {
    std::unique_lock<std::mutex> lk(sh.mutex);
    // prefetch_factor batches per worker in flight: while this call waits, the awaited batch and the
    // ones after it; once it has its batch, one more is queued, so that the caller's work on it
    // overlaps the reading of as many batches (PyTorch's DataLoader keeps the same count).
    const int64_t window = options_.num_workers * options_.prefetch_factor;
    auto submit_below = [&](int64_t end) {
      bool queued = false;
      while (submitted_ < batches && submitted_ < end) {
        sh.queue.push_back(
            {sh.generation.load(), position_.epoch, submitted_, batches_[static_cast<size_t>(submitted_)]});
        ++submitted_;
        queued = true;
      }
      if (queued) sh.work_ready.notify_all();
    };
    submit_below(index + window);
    auto ready = [&] { return sh.results.count(index) > 0; };
    if (options_.timeout > 0) {
      const auto limit = std::chrono::duration<double>(options_.timeout);
      if (!sh.result_ready.wait_for(lk, limit, ready)) {
        lk.unlock();
        stop_epoch(/*join=*/false);
        throw Error("DataLoader: batch " + std::to_string(index) + " of epoch " + std::to_string(position_.epoch) +
                    " was not ready after the timeout of " + num_str(options_.timeout) + " s (" +
                    std::to_string(options_.num_workers) + " workers); is a dataset's get() stuck?");
      }
    } else {
      sh.result_ready.wait(lk, ready);
    }
    auto it = sh.results.find(index);
    result = std::move(it->second);
    sh.results.erase(it);
    if (!result.error) submit_below(index + 1 + window);
  }
  if (result.error) {
    stop_epoch(/*join=*/false);
    std::rethrow_exception(result.error);
  }
  ++position_.batch;
  return std::move(result.batch);
}

void DataLoader::set_position(LoaderPosition p) {
  if (p.epoch < 0 || p.batch < 0 || p.batch > size()) {
    throw IndexError("DataLoader: position (epoch " + std::to_string(p.epoch) + ", batch " + std::to_string(p.batch) +
                     ") is outside [0, " + std::to_string(size()) + "] batches per epoch");
  }
  if (in_epoch_) stop_epoch();
  position_ = p;
  ++repositions_;
}

std::map<std::string, int64_t> DataLoader::state() const {
  return {{"loader_epoch", position_.epoch},
          {"loader_batch", position_.batch},
          {"loader_seed", static_cast<int64_t>(options_.seed)},
          {"loader_batch_size", options_.batch_size},
          {"loader_dataset_size", dataset_->size()},
          {"loader_batches_per_epoch", size()}};
}

void DataLoader::load_state(const std::map<std::string, int64_t>& state) {
  auto get = [&](const char* key) {
    auto it = state.find(key);
    if (it == state.end()) throw Error(std::string("DataLoader::load_state: the state has no '") + key + "'");
    return it->second;
  };
  const auto check = [&](const char* key, int64_t expected, const char* what) {
    const int64_t saved = get(key);
    if (saved != expected) {
      throw Error(std::string("DataLoader::load_state: the saved loader had ") + what + " " + std::to_string(saved) +
                  ", this one " + std::to_string(expected));
    }
  };
  check("loader_seed", static_cast<int64_t>(options_.seed), "seed");
  check("loader_batch_size", options_.batch_size, "batch size");
  check("loader_dataset_size", dataset_->size(), "dataset size");
  // Another sampler (a DistributedSampler of another world size), or drop_last changed, cuts the
  // epoch into other batches: the saved position would name other samples.
  check("loader_batches_per_epoch", size(), "batches per epoch");
  set_position({get("loader_epoch"), get("loader_batch")});
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) { batch_ = loader_->next(); }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  batch_ = loader_->next();
  return *this;
}

}  // namespace kiln::data
