// The command-line flags of kiln's programs (examples, benchmarks, fuzz_cli): a thin layer that
// keeps CLI11 out of the programs' sources. CLI11 is header-only, so its App and Option were
// compiled again into each of the nearly twenty sources that declare or read flags, more than
// half of each one's compile time (more under the sanitizers). Here CLI11 is compiled once, in
// examples/flags.cpp (the kiln_flags library), and the programs see only the declarations below.
// The names follow CLI11's (add_option, transform, default_str, ...), so a reader of CLI11's
// documentation finds the same calls, with kiln's policy built in:
// - every flag's default is shown by --help, and a flag given twice takes its last value (so a
//   wrapper's defaults can be overridden by appending, as tools/demo.sh does);
// - numbers are parsed by kiln's checks (whole, real), not by CLI11, which reads "010" as octal,
//   wraps "-1" into an unsigned type and saturates an overflow;
// - parse() ends the program through ExitRequest, never std::exit: --help with code 0, a bad flag
//   with code 2 and one line saying what (run_main in examples/common.h turns it into the code).
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kiln::examples {

// The command line asked to end now with `code` (--help: 0; a bad flag: 2, its message printed).
struct ExitRequest {
  int code = 0;
};

// A check of a flag's text: returns "" to accept it (and may rewrite `text` to what the flag's
// variable then reads), or the reason it is refused. `desc` stands for the value in --help.
struct TextCheck {
  std::function<std::string(std::string&)> fn;
  std::string desc;
  std::string operator()(std::string& text) const { return fn(text); }
};

// The variables a flag can read into.
template <typename T, typename... U> constexpr bool kOneOf = (std::is_same_v<T, U> || ...);
template <typename T>
constexpr bool kFlagValue = kOneOf<T, std::string, int, int64_t, uint64_t, double, std::optional<std::string>,
                                   std::optional<int>, std::optional<int64_t>, std::optional<double>,
                                   std::vector<int>, std::vector<int64_t>, std::vector<double>,
                                   std::vector<std::string>>;
template <typename T> constexpr bool kSwitchValue = kOneOf<T, bool, std::optional<bool>>;

// One flag, as Flags::add_option and add_flag return it; each call returns the flag again.
class Option {
 public:
  explicit Option(CLI::Option* impl) : impl_(impl) {}
  // Runs `check` on each value before the flag's variable reads it (the check may rewrite it).
  Option* transform(const TextCheck& check);
  // Accepts only these values.
  Option* one_of(const std::vector<std::string>& values);
  // What --help shows as the default, instead of the variable's value.
  Option* default_str(const std::string& text);
  // What --help shows for the value (FILE, DIR, ...).
  Option* type_name(const std::string& name);
  // A list flag: each value is split at `sep` ("--workers 0,2,4").
  Option* delimiter(char sep);
  // A list flag given several times keeps every value (otherwise the last time wins).
  Option* take_all();
  Option* required();
  // Refuses the command line when both this flag and `other` are given.
  Option* excludes(Option* other);
  // How many times the flag was given.
  std::size_t count() const;

 private:
  CLI::Option* impl_;
};

// A program's flags.
class Flags {
 public:
  // `description` heads --help; `name` is the program's name in messages (empty: argv[0]).
  explicit Flags(const std::string& description, const std::string& name = "");
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // --name VALUE into `value`, or a positional argument when `name` has no leading '-'. T is one
  // of the types kFlagValue lists (flags.cpp compiles CLI11's conversion for each).
  template <typename T>
    requires kFlagValue<T>
  Option* add_option(const std::string& name, T& value, const std::string& help);
  // A switch (bool, or std::optional<bool> to tell "not given" apart); "--x,!--no-x" also adds
  // the negation.
  template <typename T>
    requires kSwitchValue<T>
  Option* add_flag(const std::string& name, T& value, const std::string& help);
  // A switch that runs `on_given` when given.
  Option* add_flag_callback(const std::string& name, std::function<void()> on_given, const std::string& help);

  // Reads the command line into the variables, or ends the program through ExitRequest: --help
  // prints the description and every flag with its default (code 0); anything wrong (a bad value,
  // an unknown flag, a missing value) prints what on stderr (code 2).
  void parse(int argc, const char* const* argv);

 private:
  Option* keep(CLI::Option* impl);
  std::unique_ptr<CLI::App> app_;
  std::deque<Option> options_;  // stable addresses for the handles given out
};

// A check for an integer flag of type T: plain decimal digits with an optional leading '-', the
// whole argument, within [lo, hi] (which default to T's range). It hands CLI11 the number
// rewritten in canonical decimal, which CLI11's own conversion then reads back exactly.
template <typename T>
  requires kOneOf<T, int, int64_t, uint64_t>
TextCheck whole(T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max());

// A number as a message shows it (printf's %g: 1e-3, 0.0004, 1e+308).
std::string format_number(double v);

// The command line as one string (the arguments joined by spaces), for the records of a run.
std::string command_line(int argc, const char* const* argv);

// Which ends of a real flag's range are included.
enum class Ends { closed, open_low, open_high, open };

// A check for a real flag: a finite decimal number, the whole argument, within [lo, hi] (or the
// open ends named by `ends`). Rewritten with 17 significant digits, which CLI11's conversion
// (through long double) reads back as the same double that std::from_chars parsed.
TextCheck real(double lo, double hi = INFINITY, Ends ends = Ends::closed);

}  // namespace kiln::examples
