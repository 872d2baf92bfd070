// libFuzzer target for the examples' command lines: the input, split at NUL bytes, is the argument
// list given to train_cnn's and train_gpt's own parse_options (examples/train_*_options.h, the code
// the programs run) and to the number checks of examples/flags.h. A parse may accept the
// arguments or refuse them the examples' way (ExitRequest: --help or a bad flag; InputError: a
// value that does not fit, such as --device cuda without a GPU); anything else is a finding. An
// accepted integer or real must also read back as the text it came from, which catches a validator
// that lets CLI11 reinterpret a number (octal, wrap-around, saturation).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "examples/common.h"
#include "examples/train_cnn_options.h"
#include "examples/train_gpt_options.h"
#include "fuzz/fuzz_common.h"

namespace {

// The refusals print to stderr, tens of thousands of times a second; they go to /dev/null while a
// parse runs (stderr is reassigned), and findings go to the real stderr.
std::FILE* g_real_stderr = nullptr;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(g_real_stderr ? g_real_stderr : stderr, "fuzz_cli: FINDING: %s\n", what.c_str());
  std::abort();
}

// Runs a parse; the examples' two ways of refusing, and kiln::Error, are the expected outcomes.
template <class F> void parse(const char* program, F&& f) {
  try {
    kiln::fuzz::expect_kiln_errors_only("fuzz_cli", [&] {
      try {
        f();
      } catch (const kiln::examples::ExitRequest& e) {
        if (e.code != 0 && e.code != 2) {
          finding(std::string(program) + ": exit request with code " + std::to_string(e.code));
        }
      } catch (const kiln::examples::InputError&) {
      }
    });
  } catch (...) {
    finding(std::string(program) + ": an exception escaped the harness");
  }
}

// The options the programs would run with must be inside their flags' documented ranges.
void check_cnn(const kiln::examples::cnn::Options& o) {
  if (o.epochs < 1 || o.batch_size < 1 || !(o.lr > 0) || !(o.weight_decay >= 0) ||
      (o.train_limit && *o.train_limit < 1) || (o.test_limit && *o.test_limit < 1) ||
      (o.min_accuracy && !(*o.min_accuracy >= 0 && *o.min_accuracy <= 1)) ||
      (o.stop_at_step && *o.stop_at_step < 1) || (o.max_minutes && !(*o.max_minutes > 0))) {
    finding("train_cnn accepted options outside their ranges");
  }
}

void check_gpt(const kiln::examples::gpt::Options& o) {
  if (o.n_layer < 1 || o.n_head < 1 || o.n_embd < 1 || o.n_embd % o.n_head != 0 || o.block_size < 1 ||
      o.batch_size < 1 || o.max_iters < 0 || o.warmup_iters < 0 || o.warmup_iters > o.max_iters ||
      o.eval_interval < 1 || o.eval_iters < 1 || !(o.lr > 0) || !(o.min_lr >= 0) ||
      !(o.dropout >= 0 && o.dropout < 1) || !(o.beta2 >= 0 && o.beta2 < 1) || !(o.grad_clip >= 0) ||
      !(o.temperature > 0) || o.top_k < 0 || o.sample_tokens < 0) {
    finding("train_gpt accepted options outside their ranges");
  }
}

// One validator on one argument: accepted text must be the canonical spelling of an in-range value.
void check_validators(const std::string& arg) {
  std::string text = arg;
  if (kiln::examples::whole<int64_t>(1)(text).empty()) {
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (v < 1 || std::to_string(v) != text) finding("whole<int64_t>(1) accepted '" + arg + "' as '" + text + "'");
  }
  text = arg;
  if (kiln::examples::real(0, 1, kiln::examples::Ends::open_high)(text).empty()) {
    const double v = std::strtod(text.c_str(), nullptr);
    if (!(v >= 0 && v < 1)) finding("real(0, 1) accepted '" + arg + "' as '" + text + "'");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  // --help prints to stdout: tens of thousands of times a second it would drown libFuzzer's lines.
  if (!std::freopen("/dev/null", "w", stdout)) std::abort();
  g_real_stderr = stderr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return -1;  // command lines are short; longer inputs only slow the search
  std::vector<std::string> args{"prog"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  const int argc = static_cast<int>(argv.size());

  static std::FILE* null_stream = std::fopen("/dev/null", "w");
  stderr = null_stream;
  parse("train_cnn", [&] { check_cnn(kiln::examples::cnn::parse_options(argc, argv.data())); });
  parse("train_gpt", [&] { check_gpt(kiln::examples::gpt::parse_options(argc, argv.data())); });
  stderr = g_real_stderr;
  for (size_t i = 1; i < args.size(); ++i) check_validators(args[i]);
  return 0;
}
