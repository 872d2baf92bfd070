// The programs' flags (examples/flags.h): each kind of variable read from the command line, kiln's
// number checks, the last value winning, lists, choices, exclusions, and the two ways parse() ends
// a program (--help with 0, a bad flag with 2). The programs' own flags are tested by running them
// (tests/examples.cmake) and fuzzed by fuzz/fuzz_cli.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "examples/flags.h"
#include "examples/precision_options.h"
#include "examples/run_record.h"

using kiln::examples::Ends;
using kiln::examples::ExitRequest;
using kiln::examples::Flags;
using kiln::examples::Option;

namespace {

// Parses `args` (after the program name); the exit code parse() asked for, or -1 when it returned.
int parse(Flags& flags, std::vector<std::string> args) {
  std::vector<const char*> argv{"prog"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    flags.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const ExitRequest& e) {
    return e.code;
  }
  return -1;
}

// The check's verdict on `text`: the text it hands on when it accepts, or "refused: " + why.
std::string verdict(const kiln::examples::TextCheck& check, std::string text) {
  const std::string why = check(text);
  return why.empty() ? text : "refused: " + why;
}

}  // namespace

TEST_CASE("flags: each kind of variable reads its value, and flags left out keep theirs", "[flags]") {
  Flags flags("test", "prog");
  std::string s = "keep";
  int i = 7;
  int64_t l = 0;
  uint64_t u = 0;
  double d = 0;
  std::optional<int64_t> ol;
  std::optional<double> od;
  std::optional<std::string> os;
  std::optional<int> oi;
  std::vector<int64_t> vl;
  std::vector<std::string> vs;
  bool b = false;
  std::optional<bool> ob;
  flags.add_option("--s", s, "");
  flags.add_option("--i", i, "");
  flags.add_option("--l", l, "")->transform(kiln::examples::whole<int64_t>());
  flags.add_option("--u", u, "")->transform(kiln::examples::whole<uint64_t>());
  flags.add_option("--d", d, "")->transform(kiln::examples::real(-1, 1));
  flags.add_option("--ol", ol, "");
  flags.add_option("--od", od, "");
  flags.add_option("--os", os, "");
  flags.add_option("--oi", oi, "");
  flags.add_option("--vl", vl, "")->delimiter(',');
  flags.add_option("--vs", vs, "")->take_all();
  flags.add_flag("--b", b, "");
  flags.add_flag("--ob,!--no-ob", ob, "");
  REQUIRE(parse(flags, {"--l", "-9000000000", "--u", "18446744073709551615", "--d", "0.25", "--ol", "3", "--vl",
                        "1,2,3", "--vs", "a", "--vs", "b", "--b", "--no-ob", "--os", "x"}) == -1);
  CHECK(s == "keep");
  CHECK(i == 7);
  CHECK(l == -9000000000);
  CHECK(u == 18446744073709551615ull);
  CHECK(d == 0.25);
  CHECK(ol == std::optional<int64_t>(3));
  CHECK_FALSE(od.has_value());
  CHECK(os == std::optional<std::string>("x"));
  CHECK_FALSE(oi.has_value());
  CHECK(vl == std::vector<int64_t>{1, 2, 3});
  CHECK(vs == std::vector<std::string>{"a", "b"});
  CHECK(b);
  CHECK(ob == std::optional<bool>(false));
}

TEST_CASE("flags: a flag given twice takes its last value, and count says how often it was given", "[flags]") {
  Flags flags("test", "prog");
  int64_t n = 0;
  std::string name;
  Option* n_flag = flags.add_option("--n", n, "")->transform(kiln::examples::whole<int64_t>(1));
  Option* name_flag = flags.add_option("--name", name, "");
  REQUIRE(parse(flags, {"--n", "4", "--name", "a", "--n", "9"}) == -1);
  CHECK(n == 9);
  CHECK(name == "a");
  CHECK(n_flag->count() == 2);
  CHECK(name_flag->count() == 1);
}

TEST_CASE("flags: bad values, unknown flags, choices, exclusions and missing required ones end with code 2",
          "[flags]") {
  const std::vector<std::vector<std::string>> bad = {
      {"--n", "0"},       {"--n", "+5"},  {"--n", "5x"},    {"--n", "9223372036854775808"}, {"--n"},
      {"--x", "nan"},     {"--x", "1"},   {"--x", "-0.5"},  {"--mode", "fast"},             {"--on", "--off"},
      {"--unknown"},      {"RUN", "extra"}, {},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    INFO("args: " << joined);
    Flags flags("test", "prog");
    int64_t n = 1;
    double x = 0;
    std::string mode = "slow", run;
    bool on = false, off = false;
    flags.add_option("--n", n, "")->transform(kiln::examples::whole<int64_t>(1));
    flags.add_option("--x", x, "")->transform(kiln::examples::real(0, 1, Ends::open));
    flags.add_option("--mode", mode, "")->one_of({"slow", "exact"});
    Option* on_flag = flags.add_flag("--on", on, "");
    on_flag->excludes(flags.add_flag("--off", off, ""));
    const bool with_run = args.empty() || args[0] == "RUN";
    if (with_run) flags.add_option("RUN", run, "")->required();
    std::vector<std::string> argv = args;
    if (with_run && !argv.empty()) argv[0] = "a-run";
    CHECK(parse(flags, argv) == 2);
  }
}

TEST_CASE("flags: --help ends with code 0", "[flags]") {
  Flags flags("test", "prog");
  int64_t n = 1;
  flags.add_option("--n", n, "a number")->transform(kiln::examples::whole<int64_t>(1))->default_str("one");
  CHECK(parse(flags, {"--help"}) == 0);
  CHECK(n == 1);
}

TEST_CASE("flags: whole and real accept the canonical spelling of an in-range number only", "[flags]") {
  using kiln::examples::real;
  using kiln::examples::whole;
  CHECK(verdict(whole<int>(-3, 3), "-3") == "-3");
  CHECK(verdict(whole<int>(-3, 3), "-0") == "0");
  CHECK(verdict(whole<int>(-3, 3), "0003") == "3");  // decimal, not octal
  CHECK(verdict(whole<int>(-3, 3), "4").rfind("refused: expects a whole number from -3 to 3", 0) == 0);
  CHECK(verdict(whole<uint64_t>(), "-1").rfind("refused", 0) == 0);  // no wrap-around
  CHECK(verdict(whole<int>(), "2147483648").rfind("refused", 0) == 0);  // no saturation
  CHECK(verdict(whole<int64_t>(1), " 1").rfind("refused: expects a positive whole number", 0) == 0);
  CHECK(verdict(real(0, 1), "1e-1") == "0.10000000000000001");
  CHECK(verdict(real(0, 1), "1") == "1");
  CHECK(verdict(real(0, 1, Ends::open_high), "1").rfind("refused: expects a number in [0, 1)", 0) == 0);
  CHECK(verdict(real(0, INFINITY, Ends::open_low), "0") == "refused: expects a positive number, got '0'");
  CHECK(verdict(real(0), "inf").rfind("refused", 0) == 0);
  CHECK(verdict(real(-1, 1), "").rfind("refused", 0) == 0);
}

TEST_CASE("flags: command_line joins the arguments with spaces", "[flags]") {
  const char* argv[] = {"bin/prog", "--n", "3", "two words"};
  CHECK(kiln::examples::command_line(4, argv) == "bin/prog --n 3 two words");
  CHECK(kiln::examples::command_line(0, argv).empty());
}

TEST_CASE("flags: --cuda-graph refuses every flag that profiles phases, --doctor-every included", "[flags]") {
  // Checked with a CUDA device named, as a GPU run would be (no GPU is touched).
  for (const std::string flag : {"--profile", "--doctor", "--doctor-every"}) {
    INFO(flag);
    kiln::examples::PrecisionOptions p;
    p.cuda_graph = true;
    p.profile = flag == "--profile";
    p.doctor = flag == "--doctor";
    p.doctor_every = flag == "--doctor-every" ? 5 : 0;
    CHECK_THROWS_WITH(kiln::examples::check_cuda_graph(p, kiln::Device::cuda(0)),
                      Catch::Contains("--cuda-graph replays") && Catch::Contains(flag + " cannot split"));
  }
  kiln::examples::PrecisionOptions eager;
  eager.doctor_every = 5;
  CHECK_NOTHROW(kiln::examples::check_cuda_graph(eager, kiln::Device::cuda(0)));
}

// A checkpoint keeps the run record's scalar settings; a resume names each it changes.
TEST_CASE("JsonLine's scalars and changed_settings", "[examples]") {
  namespace examples = kiln::examples;
  examples::JsonLine s;
  s.text("amp", "fp16").real("lr", 6e-4, "%g").integer("batch", 8).boolean("tf32", true).real("x", NAN);
  s.integers("list", {1, 2}).object("inner", examples::JsonLine().integer("k", 1));
  const std::map<std::string, std::string> want{
      {"amp", "fp16"}, {"lr", "0.0006"}, {"batch", "8"}, {"tf32", "true"}, {"x", "null"}};
  CHECK(s.scalars() == want);  // lists and objects are not settings
  std::map<std::string, std::string> now = want;
  CHECK(examples::changed_settings(want, now, {}).empty());
  now["amp"] = "off";
  now["lr"] = "0.001";
  now.erase("tf32");
  now["new"] = "1";
  CHECK(examples::changed_settings(want, now, {"lr"}) ==
        std::vector<std::string>{"amp: fp16 -> off", "new: (none) -> 1", "tf32: true -> (none)"});
}
