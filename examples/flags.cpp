// examples/flags.h over CLI11: the one source of kiln that compiles CLI11.
#include "examples/flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <memory>
#include <system_error>
#include <utility>

namespace kiln::examples {

namespace {

CLI::Validator validator(const TextCheck& check) { return CLI::Validator(check.fn, check.desc); }

// CLI11's help, less the value a negated flag stores: "--tf32,--no-tf32" rather than
// "--tf32,--no-tf32{false}", which read as if the flag's default were false.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, is_positional);
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
      const size_t close = name.find('}', open);
      if (close == std::string::npos) break;
      name.erase(open, close - open + 1);
    }
    return name;
  }
};

}  // namespace

Option* Option::transform(const TextCheck& check) {
  impl_->transform(validator(check));
  return this;
}

Option* Option::one_of(const std::vector<std::string>& values) {
  impl_->check(CLI::IsMember(values));
  return this;
}

Option* Option::default_str(const std::string& text) {
  impl_->default_str(text);
  return this;
}

Option* Option::type_name(const std::string& name) {
  impl_->type_name(name);
  return this;
}

Option* Option::delimiter(char sep) {
  impl_->delimiter(sep);
  return this;
}

Option* Option::take_all() {
  impl_->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return this;
}

Option* Option::required() {
  impl_->required();
  return this;
}

Option* Option::excludes(Option* other) {
  impl_->excludes(other->impl_);
  return this;
}

std::size_t Option::count() const { return impl_->count(); }

Flags::Flags(const std::string& description, const std::string& name)
    : app_(std::make_unique<CLI::App>(description, name)) {
  app_->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_->formatter(std::make_shared<HelpFormatter>());
  app_->get_formatter()->column_width(34);
}

Flags::~Flags() = default;

Option* Flags::keep(CLI::Option* impl) { return &options_.emplace_back(impl); }

template <typename T>
  requires kFlagValue<T>
Option* Flags::add_option(const std::string& name, T& value, const std::string& help) {
  return keep(app_->add_option(name, value, help));
}

template <typename T>
  requires kSwitchValue<T>
Option* Flags::add_flag(const std::string& name, T& value, const std::string& help) {
  return keep(app_->add_flag(name, value, help));
}

Option* Flags::add_flag_callback(const std::string& name, std::function<void()> on_given, const std::string& help) {
  return keep(app_->add_flag_callback(name, std::move(on_given), help));
}

void Flags::parse(int argc, const char* const* argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    throw ExitRequest{app_->exit(e)};
  } catch (const CLI::ParseError& e) {
    const std::string prog = app_->get_name();
    std::fprintf(stderr, "%s: %s\n(%s --help lists the flags and their defaults)\n", prog.c_str(), e.what(),
                 prog.c_str());
    throw ExitRequest{2};
  }
}

std::string command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) line += ' ';
    line += argv[i];
  }
  return line;
}

// The types of flags.h's kFlagValue and kSwitchValue.
#define KILN_FLAG_VALUE(T) template Option* Flags::add_option<T>(const std::string&, T&, const std::string&);
KILN_FLAG_VALUE(std::string)
KILN_FLAG_VALUE(int)
KILN_FLAG_VALUE(int64_t)
KILN_FLAG_VALUE(uint64_t)
KILN_FLAG_VALUE(double)
KILN_FLAG_VALUE(std::optional<std::string>)
KILN_FLAG_VALUE(std::optional<int>)
KILN_FLAG_VALUE(std::optional<int64_t>)
KILN_FLAG_VALUE(std::optional<double>)
KILN_FLAG_VALUE(std::vector<int>)
KILN_FLAG_VALUE(std::vector<int64_t>)
KILN_FLAG_VALUE(std::vector<double>)
KILN_FLAG_VALUE(std::vector<std::string>)
#undef KILN_FLAG_VALUE
template Option* Flags::add_flag<bool>(const std::string&, bool&, const std::string&);
template Option* Flags::add_flag<std::optional<bool>>(const std::string&, std::optional<bool>&, const std::string&);

template <typename T>
  requires kOneOf<T, int, int64_t, uint64_t>
TextCheck whole(T lo, T hi) {
  const std::string at_most = " (at most " + std::to_string(hi) + ")";
  std::string desc = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::string says = "expects a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (hi == std::numeric_limits<T>::max() && (lo == 0 || lo == 1)) {
    desc = lo == 1 ? "POSITIVE" : "NONNEGATIVE";
    says = std::string("expects a ") + (lo == 1 ? "positive" : "non-negative") + " whole number" + at_most;
  }
  auto fn = [lo, hi, says](std::string& text) -> std::string {
    T v{};
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);  // base 10, no '+', no spaces
    if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) return says + ", got '" + text + "'";
    text = std::to_string(v);
    return "";
  };
  return TextCheck{fn, desc};
}
template TextCheck whole<int>(int, int);
template TextCheck whole<int64_t>(int64_t, int64_t);
template TextCheck whole<uint64_t>(uint64_t, uint64_t);

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

TextCheck real(double lo, double hi, Ends ends) {
  const bool lo_open = ends == Ends::open_low || ends == Ends::open;
  const bool hi_open = ends == Ends::open_high || ends == Ends::open || std::isinf(hi);
  const auto num = format_number;
  std::string desc = (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
  if (std::isinf(hi)) {
    desc = lo == 0 && lo_open ? "POSITIVE" : lo == 0 ? "NONNEGATIVE" : (lo_open ? ">" : ">=") + num(lo);
  }
  std::string says = desc == "POSITIVE"      ? "expects a positive number"
                     : desc == "NONNEGATIVE" ? "expects a number >= 0"
                                             : "expects a number in " + desc;
  auto fn = [lo, hi, lo_open, hi_open, says](std::string& text) -> std::string {
    double v = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    const bool in_range = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || !in_range) {
      return says + ", got '" + text + "'";
    }
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    text = buf;
    return "";
  };
  return TextCheck{fn, desc};
}

}  // namespace kiln::examples
