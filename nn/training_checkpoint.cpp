// Training checkpoints on top of safetensors. Loading parses and checks the whole file (metadata,
// key sets, shapes, dtypes) before it changes anything, so a bad checkpoint leaves the model,
// optimizer and generators as they were; generator states are plain host values and are restored
// without touching CUDA, which save only queries when kiln::cuda::is_available().
#include "nn/training_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/random.h"
#include "kernels/error.h"
#include "kernels/log.h"
#include "nn/safetensors.h"

namespace kiln::nn {
namespace {

using json = nlohmann::json;

constexpr const char* kVersionKey = "kiln.checkpoint_version";
constexpr const char* kModelTypeKey = "kiln.model_type";
constexpr const char* kStepKey = "kiln.step";
constexpr const char* kDataPositionKey = "kiln.data_position";
constexpr const char* kDataFingerprintKey = "kiln.data_fingerprint";
// Written only when the loop records settings; optional in format version 2.
constexpr const char* kSettingsKey = "kiln.settings";
constexpr const char* kHasOptimizerKey = "kiln.has_optimizer";
// Written only when a scaler is saved; a checkpoint without it has no scaler state.
constexpr const char* kHasScalerKey = "kiln.has_scaler";
constexpr const char* kRngKey = "kiln.rng";
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kScalerPrefix = "scaler.";
// default_generator keeps one generator per CUDA device index below this bound.
constexpr int kMaxCudaGenerators = 16;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IOError("load_checkpoint: " + path + ": " + what);
}

template <typename T> bool parse_decimal(const std::string& s, T& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

json generator_json(Device device) {
  PhiloxState s = default_generator(device).state();
  // Decimal strings: a uint64 seed does not survive JSON readers that use doubles.
  return {{"seed", std::to_string(s.seed)}, {"offset", std::to_string(s.offset)}};
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}


// The JSON metadata values. nlohmann's accessors are only used after type checks, but any json
// exception that still escapes becomes an IOError like every other malformed field.
std::map<std::string, int64_t> parse_data_position(const std::string& path, const std::string& text) {
  std::map<std::string, int64_t> out;
  try {
    json pos = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (pos.is_discarded() || !pos.is_object()) fail(path, "data_position is not a JSON object");
    for (const auto& [k, v] : pos.items()) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
        // type_name, not dump(): a crafted value could nest deeply enough to exhaust the stack.
        fail(path, "data_position \"" + k + "\" is a " + std::string(v.type_name()) + ", not a 64-bit integer");
      }
      out[k] = v.get<int64_t>();
    }
  } catch (const json::exception& e) {
    fail(path, std::string("malformed data_position: ") + e.what());
  }
  return out;
}

// A JSON object of strings (the data fingerprint, the settings), `what` naming it in errors.
std::map<std::string, std::string> parse_string_map(const std::string& path, const char* what,
                                                    const std::string& text) {
  std::map<std::string, std::string> out;
  try {
    json fp = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (fp.is_discarded() || !fp.is_object()) fail(path, std::string(what) + " is not a JSON object");
    for (const auto& [k, v] : fp.items()) {
      if (!v.is_string()) {
        fail(path, std::string(what) + " \"" + k + "\" is a " + std::string(v.type_name()) + ", not a string");
      }
      out[k] = v.get<std::string>();
    }
  } catch (const json::exception& e) {
    fail(path, std::string("malformed ") + what + ": " + e.what());
  }
  return out;
}

// Every key of either side must agree; the error lists each difference.
void check_same_data(const std::string& path, const std::map<std::string, std::string>& saved,
                     const std::map<std::string, std::string>& expected) {
  std::string diffs;
  auto describe = [](const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::string("(none)") : "\"" + it->second + "\"";
  };
  std::vector<std::string> keys;
  for (const auto& kv : saved) keys.push_back(kv.first);
  for (const auto& kv : expected)
    if (!saved.count(kv.first)) keys.push_back(kv.first);
  for (const auto& k : keys) {
    if (describe(saved, k) == describe(expected, k)) continue;
    diffs += (diffs.empty() ? "" : "; ") + k + ": checkpoint " + describe(saved, k) + ", this run " +
             describe(expected, k);
  }
  if (!diffs.empty()) {
    throw Error("load_checkpoint: " + path + ": the checkpoint's data position refers to other data than this run's (" +
                diffs + ")");
  }
}

// Names and counts of the floating tensors holding NaN or infinity.
std::string non_finite_report(const std::map<std::string, Tensor>& tensors, const std::string& prefix) {
  std::string report;
  for (const auto& [name, t] : tensors) {
    if (!t.is_floating_point()) continue;
    int64_t bad = 0;
    for (double v : t.to_vector_double())
      if (!std::isfinite(v)) ++bad;
    if (bad > 0) {
      report += (report.empty() ? "" : ", ") + prefix + name + " (" + std::to_string(bad) + " of " +
                std::to_string(t.numel()) + ")";
    }
  }
  return report;
}

std::vector<std::pair<Device, PhiloxState>> parse_generators(const std::string& path, const std::string& text) {
  std::vector<std::pair<Device, PhiloxState>> out;
  try {
    const json rng = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (rng.is_discarded() || !rng.is_object()) fail(path, "generator states are not a JSON object");
    for (const auto& [dev, v] : rng.items()) {
      Device device;
      if (dev == "cpu") {
        device = Device::cpu();
      } else {
        int index = -1;
        if (!starts_with(dev, "cuda:") || !parse_decimal(dev.substr(5), index) || index < 0 ||
            index >= kMaxCudaGenerators) {
          fail(path, "generator state for unknown device \"" + dev + "\"");
        }
        device = Device::cuda(index);
      }
      PhiloxState s;
      auto seed = v.is_object() ? v.find("seed") : v.end();
      auto offset = v.is_object() ? v.find("offset") : v.end();
      if (seed == v.end() || offset == v.end() || !seed->is_string() || !offset->is_string() ||
          !parse_decimal(seed->get<std::string>(), s.seed) || !parse_decimal(offset->get<std::string>(), s.offset)) {
        fail(path, "generator state for \"" + dev + "\" needs \"seed\" and \"offset\" as decimal strings");
      }
      out.emplace_back(device, s);
    }
    if (!rng.contains("cpu")) fail(path, "no generator state for the CPU");
  } catch (const json::exception& e) {
    fail(path, std::string("malformed generator states: ") + e.what());
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const Module& model, const optim::Checkpointable* optimizer,
                     const TrainingState& state, const amp::GradScaler* scaler) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : model.state_dict()) tensors[kModelPrefix + name] = t;
  const size_t model_tensors = tensors.size();
  if (optimizer) {
    for (const auto& [key, t] : optimizer->state_dict()) tensors[kOptimPrefix + key] = t;
  }
  const size_t optimizer_tensors = tensors.size() - model_tensors;
  if (scaler) {
    for (const auto& [key, t] : scaler->state_dict()) tensors[kScalerPrefix + key] = t;
  }
  const size_t scaler_tensors = tensors.size() - model_tensors - optimizer_tensors;

  json rng = json::object();
  rng["cpu"] = generator_json(Device::cpu());
  // Only a machine with CUDA can have drawn on a CUDA generator; elsewhere CUDA is not touched.
  if (cuda::is_available()) {
    int n = std::min(cuda::device_count(), kMaxCudaGenerators);
    for (int i = 0; i < n; ++i) rng[Device::cuda(i).str()] = generator_json(Device::cuda(i));
  }

  std::string position, fingerprint, settings;
  try {
    position = json(state.data_position).dump();
    fingerprint = json(state.data_fingerprint).dump();
    if (!state.settings.empty()) settings = json(state.settings).dump();
  } catch (const json::exception&) {
    throw Error("save_checkpoint: " + path +
                ": a data_position, data_fingerprint or settings string is not valid UTF-8");
  }
  std::map<std::string, std::string> metadata{
      {kVersionKey, std::to_string(kCheckpointVersion)},
      {kModelTypeKey, model.type_name()},
      {kStepKey, std::to_string(state.step)},
      {kDataPositionKey, position},
      {kDataFingerprintKey, fingerprint},
      {kHasOptimizerKey, optimizer ? "1" : "0"},
      {kRngKey, rng.dump()},
  };
  if (scaler) metadata[kHasScalerKey] = "1";
  if (!settings.empty()) metadata[kSettingsKey] = settings;
  const uint64_t bytes = detail::write_safetensors(path, tensors, metadata);
  KILN_LOG(Info, "save_checkpoint: step " + std::to_string(state.step) + ", " + std::to_string(tensors.size()) +
                     " tensors (" + std::to_string(model_tensors) + " model, " + std::to_string(optimizer_tensors) +
                     " optimizer, " + std::to_string(scaler_tensors) + " scaler), " + format_bytes(bytes) +
                     " written to " + path);
}

int64_t TrainingState::position(const std::string& key, int64_t lo, int64_t hi, const std::string& path) const {
  auto it = data_position.find(key);
  if (it == data_position.end()) throw Error("load_checkpoint: " + path + ": the data position has no \"" + key + "\"");
  if (it->second < lo || it->second > hi) {
    throw Error("load_checkpoint: " + path + ": data position \"" + key + "\" is " + std::to_string(it->second) +
                ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "] for this run");
  }
  return it->second;
}

TrainingState load_checkpoint(const std::string& path, Module& model, optim::Checkpointable* optimizer,
                              const std::map<std::string, std::string>& expected_data, amp::GradScaler* scaler) {
  SafetensorsFile file(path);
  const auto& meta = file.metadata();
  auto field = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) fail(path, std::string("not a kiln training checkpoint: metadata has no \"") + key + "\"");
    return it->second;
  };

  // --- metadata, parsed completely before anything is restored ---------------------------------
  int version = 0;
  if (!parse_decimal(field(kVersionKey), version)) fail(path, "bad checkpoint version \"" + field(kVersionKey) + "\"");
  if (version != kCheckpointVersion) {
    fail(path, "checkpoint format version " + std::to_string(version) + ", this kiln reads version " +
                   std::to_string(kCheckpointVersion));
  }
  TrainingState state;
  if (!parse_decimal(field(kStepKey), state.step) || state.step < 0) fail(path, "bad step \"" + field(kStepKey) + "\"");

  state.data_position = parse_data_position(path, field(kDataPositionKey));
  state.data_fingerprint = parse_string_map(path, "data_fingerprint", field(kDataFingerprintKey));
  if (auto it = meta.find(kSettingsKey); it != meta.end()) {
    state.settings = parse_string_map(path, "settings", it->second);
  }
  // kiln writes a checksum for every tensor; a checkpoint without them was altered by hand.
  for (const auto& [name, e] : file.entries()) {
    if (!file.checksums().count(name)) fail(path, "tensor '" + name + "' has no checksum");
  }

  const std::string& has_opt = field(kHasOptimizerKey);
  if (has_opt != "0" && has_opt != "1") fail(path, "bad has_optimizer \"" + has_opt + "\"");
  if (optimizer && has_opt != "1") {
    throw Error("load_checkpoint: " + path + ": the checkpoint holds no optimizer state, but an optimizer was given");
  }

  auto has_scaler_it = meta.find(kHasScalerKey);
  const std::string has_scaler = has_scaler_it == meta.end() ? "0" : has_scaler_it->second;
  if (has_scaler != "0" && has_scaler != "1") fail(path, "bad has_scaler \"" + has_scaler + "\"");
  if (scaler && has_scaler != "1") {
    throw Error("load_checkpoint: " + path +
                ": the checkpoint holds no GradScaler state (its run trained without loss scaling), but a GradScaler "
                "was given to restore; resume in the precision the checkpoint was trained in");
  }

  const std::vector<std::pair<Device, PhiloxState>> generators = parse_generators(path, field(kRngKey));

  // --- tensors: split by prefix and match against the model ---------------------------------
  std::map<std::string, Tensor> all = file.load_all(Device::cpu());
  std::map<std::string, Tensor> model_state, optim_state, scaler_state;
  for (auto& [name, t] : all) {
    if (starts_with(name, kModelPrefix)) model_state[name.substr(6)] = t;
    else if (starts_with(name, kOptimPrefix)) optim_state[name.substr(6)] = t;
    else if (starts_with(name, kScalerPrefix)) scaler_state[name.substr(7)] = t;
    else fail(path, "tensor '" + name + "' is neither model.*, optim.* nor scaler.*");
  }
  if (!scaler_state.empty() && has_scaler != "1") fail(path, "scaler.* tensors without has_scaler");

  std::map<std::string, Tensor> own = model.state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    auto it = model_state.find(name);
    if (it == model_state.end()) {
      missing.push_back(kModelPrefix + name);
    } else if (it->second.sizes() != t.sizes() || it->second.dtype() != t.dtype()) {
      mismatched.push_back(kModelPrefix + name + " (checkpoint " + shape_str(it->second.sizes()) + " " +
                           dtype_name(it->second.dtype()) + ", model " + shape_str(t.sizes()) + " " +
                           dtype_name(t.dtype()) + ")");
    }
  }
  for (const auto& [name, t] : model_state)
    if (!own.count(name)) unexpected.push_back(kModelPrefix + name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string saved_type = meta.count(kModelTypeKey) ? meta.at(kModelTypeKey) : "?";
    std::string msg = "load_checkpoint: " + path + ": checkpoint of a " + saved_type + " does not match this " +
                      model.type_name() + ":";
    if (!missing.empty()) msg += " missing " + join(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected " + join(unexpected) + ";";
    if (!mismatched.empty()) msg += " shape or dtype mismatch for " + join(mismatched) + ";";
    throw Error(msg);
  }

  // Then the data: a checkpoint of this model trained on other data continues at a meaningless place.
  if (!expected_data.empty()) check_same_data(path, state.data_fingerprint, expected_data);

  const std::string non_finite = non_finite_report(model_state, kModelPrefix);
  if (!non_finite.empty()) {
    KILN_LOG(Warn, "load_checkpoint: " + path + ": the model holds non-finite values: " + non_finite +
                       " (saved from a run that diverged?)");
  }

  // The scaler's state is checked here and restored after the optimizer's, so that a refusal by
  // either leaves everything as it was.
  if (scaler) {
    try {
      scaler->check_state_dict(scaler_state);
    } catch (const Error& e) {
      throw Error("load_checkpoint: " + path + ": " + e.what());
    }
  }

  // --- restore: the optimizer first, because its load is the one step that can still refuse ----
  if (optimizer) optimizer->load_state_dict(optim_state);
  if (scaler) scaler->load_state_dict(scaler_state);
  model.load_state_dict(model_state, /*strict=*/true);
  for (const auto& [device, s] : generators) default_generator(device).set_state(s);
  KILN_LOG(Info, "load_checkpoint: step " + std::to_string(state.step) + ", " + std::to_string(all.size()) +
                     " tensors (" + std::to_string(model_state.size()) + " model, " +
                     std::to_string(optim_state.size()) + " optimizer, " + std::to_string(scaler_state.size()) +
                     " scaler), " + format_bytes(file.file_size()) + " read from " + path + " (a " +
                     model.type_name() + ")");
  return state;
}

}  // namespace kiln::nn
