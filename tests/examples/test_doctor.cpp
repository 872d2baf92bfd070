// The utilization doctor's rules (examples/doctor.h) on recorded and constructed runs, each rule at
// its threshold, and the doctor record read back. The fixtures in tests/examples/doctor/: cpu_*.jsonl
// are metrics files of real CPU runs (train_cnn and train_gpt with --doctor); gpu_*.jsonl are
// constructed in the record's format (see that folder's README.md): no GPU run is recorded yet.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/doctor.h"
#include "kernels/error.h"
#include "tests/temp_dir.h"

using namespace kiln;
using examples::Finding;
using examples::RunFacts;
using profile::Phase;

namespace {

std::string fixture(const std::string& name) { return std::string(KILN_DOCTOR_FIXTURES) + "/" + name; }

std::vector<std::string> rules(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& f : findings) out.push_back(f.rule);
  return out;
}

const Finding& find(const std::vector<Finding>& findings, const std::string& rule) {
  for (const Finding& f : findings) {
    if (f.rule == rule) return f;
  }
  FAIL("no finding " << rule);
  throw std::logic_error("unreachable");
}

void set(profile::StepTimes& t, Phase p, double ms) { t.phase_ms[static_cast<size_t>(p)] = ms; }

// A GPU run of 10 ms steps that no rule flags: busy GPU at full clock, bf16, half the memory.
RunFacts healthy_gpu() {
  RunFacts f;
  f.settings.gpu = true;
  f.settings.amp = "bf16";
  f.settings.tf32 = true;
  f.settings.workers = 4;
  f.settings.pin_memory = true;
  f.measured.steps.steps = 100;
  f.measured.steps.step_ms = 10;
  set(f.measured.steps, Phase::Forward, 3.5);
  set(f.measured.steps, Phase::Backward, 5.5);
  set(f.measured.steps, Phase::Optimizer, 0.5);
  for (int i = 0; i < 10; ++i) {
    monitor::GpuSample s;
    s.utilization = 95;
    s.sm_clock_mhz = 1980;
    s.memory_total_mb = 80000;
    f.measured.gpu.add(s);
  }
  f.measured.gpu.max_sm_clock_mhz = 1980;
  f.measured.peak_allocated_mb = 40000;
  f.measured.device_memory_mb = 80000;
  return f;
}

std::string temp_file(const test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream f(path);
  f << text;
  REQUIRE(f.good());
  return path;
}

}  // namespace

TEST_CASE("doctor: recorded and constructed runs get their findings", "[doctor]") {
  struct Case {
    const char* file;
    std::vector<std::string> rules;
  };
  const std::vector<Case> cases = {
      {"cpu_cnn_recorded.jsonl", {}},
      {"cpu_gpt_recorded.jsonl", {"optimizer"}},
      {"gpu_data_bound.jsonl", {"data-wait", "gpu-idle", "fp32-math", "memory-headroom"}},
      {"gpu_launch_bound.jsonl", {"gpu-idle", "channels-last", "memory-headroom"}},
      {"gpu_throttled.jsonl", {"autocast", "grad-accum", "recompute", "clock"}},
      {"gpu_healthy.jsonl", {}},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    const RunFacts facts = examples::facts_from_metrics(fixture(c.file));
    CHECK(rules(examples::diagnose(facts)) == c.rules);
  }
  // The evidence is the measurement: the recorded GPT's optimizer share, the data-bound run's wait.
  const RunFacts gpt = examples::facts_from_metrics(fixture("cpu_gpt_recorded.jsonl"));
  CHECK(gpt.measured.steps.steps == 200);
  CHECK(find(examples::diagnose(gpt), "optimizer").message.find("the optimizer is 43% of the step") == 0);
  const RunFacts data = examples::facts_from_metrics(fixture("gpu_data_bound.jsonl"));
  const Finding wait = find(examples::diagnose(data), "data-wait");
  CHECK(wait.message.find("data wait is 38% of the step (4.10 of 10.80 ms)") == 0);
  CHECK(wait.tips == std::vector<int>{2, 4, 24});
  const std::string report = examples::format_report(data, examples::diagnose(data));
  CHECK(report.find("doctor at step 2345, 2345 steps measured:") == 0);
  CHECK(report.find("GPU util 58% (min 20, max 100)") != std::string::npos);
  CHECK(report.find("memory: peak 900 MiB allocated of 81559 MiB (1%)") != std::string::npos);
}

TEST_CASE("doctor: each rule fires at its threshold and not below", "[doctor]") {
  CHECK(examples::diagnose(healthy_gpu()).empty());

  SECTION("data wait: 15% of the step, data and h2d together") {
    RunFacts f = healthy_gpu();
    set(f.measured.steps, Phase::DataWait, 1.0);
    set(f.measured.steps, Phase::HostToDevice, 0.49);
    CHECK(examples::diagnose(f).empty());
    set(f.measured.steps, Phase::HostToDevice, 0.5);
    const Finding x = find(examples::diagnose(f), "data-wait");
    CHECK(x.tips == std::vector<int>{2, 3, 24});  // workers already on, pinned: no tip 4
    CHECK(x.message.find("raise --workers above 4 (tip 2) or --prefetch (tip 3)") != std::string::npos);
    f.settings.pin_memory = false;
    CHECK(find(examples::diagnose(f), "data-wait").tips == std::vector<int>{2, 3, 4, 24});
    f.settings.gpu = false;  // pinning is about GPU copies
    CHECK(find(examples::diagnose(f), "data-wait").tips == std::vector<int>{2, 3, 24});
  }
  SECTION("host overhead: 20% of the step in no phase") {
    RunFacts f = healthy_gpu();
    f.measured.steps.step_ms = 9.5 / 0.81;  // other = 19%
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{});
    f.measured.steps.step_ms = 9.5 / 0.79;  // 21%
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"host-overhead"});
  }
  SECTION("optimizer: 20% of the step") {
    RunFacts f = healthy_gpu();
    set(f.measured.steps, Phase::Forward, 2.5);
    set(f.measured.steps, Phase::Optimizer, 1.9);
    CHECK(examples::diagnose(f).empty());
    set(f.measured.steps, Phase::Optimizer, 2.0);
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"optimizer"});
  }
  SECTION("an idle GPU: launch-bound below 10 ms steps, host-bound above; needs 5 samples") {
    RunFacts f = healthy_gpu();
    f.measured.gpu = {};
    for (int i = 0; i < 4; ++i) {
      monitor::GpuSample s;
      s.utilization = 30;
      f.measured.gpu.add(s);
    }
    CHECK(examples::diagnose(f).empty());  // 4 samples say too little
    monitor::GpuSample s;
    s.utilization = 30;
    f.measured.gpu.add(s);
    // 10 ms steps are long enough for the host to keep up: the GPU waits for something else.
    CHECK(find(examples::diagnose(f), "gpu-idle").message.find("waits for the host") != std::string::npos);
    f.measured.steps.step_ms = 9.9;
    set(f.measured.steps, Phase::Backward, 5.4);
    CHECK(find(examples::diagnose(f), "gpu-idle").message.find("launch-bound") != std::string::npos);
    f.settings.gpu = false;  // a CPU run's samples (there are none in practice) are not judged
    CHECK(examples::diagnose(f).empty());
  }
  SECTION("float32 math: without TF32 always; with TF32 when compute is half the step") {
    RunFacts f = healthy_gpu();
    f.settings.amp = "off";
    f.settings.tf32 = false;
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"fp32-math"});
    f.settings.tf32 = true;
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"autocast"});
    set(f.measured.steps, Phase::Forward, 1.4);
    set(f.measured.steps, Phase::Backward, 3.5);      // compute 49%
    set(f.measured.steps, Phase::DataWait, 1.4);      // and under every other threshold:
    set(f.measured.steps, Phase::Optimizer, 1.9);     // data 14%, optimizer 19%, other 18%
    CHECK(examples::diagnose(f).empty());
  }
  SECTION("channels-last: image models under autocast only") {
    RunFacts f = healthy_gpu();
    f.settings.channels_last = false;
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"channels-last"});
    f.settings.channels_last = true;
    CHECK(examples::diagnose(f).empty());
    f.settings.channels_last = false;
    f.settings.amp = "off";  // float32 convolutions: TF32 reads NCHW as fast
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"autocast"});
  }
  SECTION("memory: raise the batch below 25% of the card; grad-accum and recompute below 50%") {
    RunFacts f = healthy_gpu();
    f.settings.grad_accum = 2;
    f.settings.recompute = true;
    CHECK(examples::diagnose(f).empty());  // 50% of the card
    f.measured.peak_allocated_mb = 39000;
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"grad-accum", "recompute"});
    f.measured.peak_allocated_mb = 19000;
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"memory-headroom", "grad-accum", "recompute"});
    f.settings.gpu = false;  // the CPU has no card to fill
    CHECK(examples::diagnose(f).empty());
  }
  SECTION("clock: below 85% of the card's maximum while the GPU is busy") {
    RunFacts f = healthy_gpu();
    f.measured.gpu.sm_clock_mhz = {};
    f.measured.gpu.sm_clock_mhz.add(0.86 * 1980);
    CHECK(examples::diagnose(f).empty());
    f.measured.gpu.sm_clock_mhz = {};
    f.measured.gpu.sm_clock_mhz.add(0.84 * 1980);
    CHECK(rules(examples::diagnose(f)) == std::vector<std::string>{"clock"});
    f.measured.gpu.max_sm_clock_mhz = std::nan("");  // the card did not say its maximum
    CHECK(examples::diagnose(f).empty());
  }
  SECTION("no steps measured: nothing to judge") {
    RunFacts f = healthy_gpu();
    f.settings.tf32 = false;
    f.settings.amp = "off";
    f.measured.steps = {};
    CHECK(examples::diagnose(f).empty());
    CHECK(examples::format_report(f, {}).find("no steps measured: nothing to diagnose") != std::string::npos);
  }
}

TEST_CASE("doctor: a doctor record reads back to the same facts and findings", "[doctor]") {
  RunFacts f = healthy_gpu();
  f.settings.amp = "off";
  f.settings.channels_last = false;
  f.settings.grad_accum = 2;
  f.measured.step = 700;
  f.measured.gpu.name = "some GPU";
  f.measured.peak_allocated_mb = 12000;
  set(f.measured.steps, Phase::DataWait, 2.5);
  const std::vector<Finding> findings = examples::diagnose(f);
  REQUIRE(findings.size() == 4);

  examples::JsonLine settings;
  settings.integer("batch_size", 64).text("amp", "off").boolean("tf32", true).boolean("channels_last", false);
  settings.boolean("recompute", false).integer("grad_accum", 2).integer("workers", 4).integer("prefetch", 2);
  settings.boolean("pin_memory", true);
  const examples::JsonLine run =
      examples::JsonLine().text("record", "run").text("device", "cuda:0").object("settings", settings);
  const test::TempDir dir("kiln_doctor");
  const std::string path =
      temp_file(dir, "roundtrip.jsonl", run.str() + "\n" + examples::doctor_record(f, findings).str() + "\n");
  const RunFacts back = examples::facts_from_metrics(path);
  CHECK(back.measured.step == 700);
  CHECK(back.measured.steps.steps == 100);
  CHECK(back.measured.steps.step_ms == Approx(10));
  CHECK(back.measured.gpu.utilization.mean() == Approx(95));
  CHECK(back.measured.gpu.utilization.n == 10);
  CHECK(back.measured.gpu.name == "some GPU");
  CHECK(back.settings.grad_accum == 2);
  CHECK(back.settings.channels_last == std::optional<bool>(false));
  const std::vector<Finding> again = examples::diagnose(back);
  REQUIRE(again.size() == findings.size());
  for (size_t i = 0; i < again.size(); ++i) {
    CHECK(again[i].rule == findings[i].rule);
    CHECK(again[i].message == findings[i].message);
    CHECK(again[i].tips == findings[i].tips);
  }
  CHECK(examples::settings_from_run_record(run).workers == 4);
}

TEST_CASE("doctor: a metrics file it cannot use is an IOError naming the file and the line", "[doctor]") {
  const std::string run = R"({"record": "run", "device": "cpu", "settings": {"batch_size": 8}})";
  const std::string doctor = R"({"record": "doctor", "step": 4, "measured": {"steps": 4, "step_ms": 1.0,)"
                             R"( "phase_ms": {}, "gpu": {"samples": 0}}})";
  CHECK_THROWS_WITH(examples::facts_from_metrics("/nonexistent/metrics.jsonl"),
                    "cannot read /nonexistent/metrics.jsonl");
  const test::TempDir dir("kiln_doctor");
  const std::string torn = temp_file(dir, "torn.jsonl", run + "\n{\"record\": \"doc\n");
  CHECK_THROWS_AS(examples::facts_from_metrics(torn), IOError);
  CHECK_THROWS_WITH(examples::facts_from_metrics(torn), Catch::Contains(torn + " line 2 is not a JSON object"));
  const std::string no_doctor = temp_file(dir, "no_doctor.jsonl", run + "\n");
  CHECK_THROWS_WITH(examples::facts_from_metrics(no_doctor), Catch::Contains("has no \"doctor\" record"));
  const std::string no_run = temp_file(dir, "no_run.jsonl", doctor + "\n");
  CHECK_THROWS_WITH(examples::facts_from_metrics(no_run), Catch::Contains("has no \"run\" record"));
  const std::string both = temp_file(dir, "both.jsonl", run + "\n" + doctor + "\n");
  CHECK(examples::facts_from_metrics(both).measured.steps.steps == 4);
  CHECK(examples::facts_from_metrics(both, 4).measured.step == 4);
  CHECK_THROWS_WITH(examples::facts_from_metrics(both, 5), Catch::Contains("no \"doctor\" record at step 5"));
  const std::string wrong_doctor = R"({"record": "doctor", "step": 1, "measured": {"steps": "many"}})";
  const std::string wrong_type = temp_file(dir, "wrong.jsonl", run + "\n" + wrong_doctor + "\n");
  CHECK_THROWS_WITH(examples::facts_from_metrics(wrong_type), Catch::Contains("lacks a field or has the wrong type"));
  // A "record" or doctor "step" of another type: named with the line, not a bare library message.
  const std::string odd = temp_file(dir, "odd.jsonl", run + "\n{\"record\": 5}\n");
  CHECK_THROWS_WITH(examples::facts_from_metrics(odd), Catch::Contains(odd + " line 2: \"record\" is a number"));
  const std::string odd_step =
      temp_file(dir, "odd_step.jsonl", run + "\n" + R"({"record": "doctor", "step": "4"})" + "\n");
  CHECK_THROWS_WITH(examples::facts_from_metrics(odd_step, 4),
                    Catch::Contains(odd_step + " line 2: the doctor record's \"step\" is a string"));
}

TEST_CASE("doctor: a doctor record is read with the settings of the run that wrote it", "[doctor]") {
  // Stopped with --workers 0 and --doctor, resumed with --workers 7 without: the last doctor record
  // measured the first process, whose run record is the one before it.
  const std::string doctor = R"({"record": "doctor", "step": 4, "measured": {"steps": 4, "step_ms": 1.0,)"
                             R"( "phase_ms": {}, "gpu": {"samples": 0}}})";
  auto run_with = [](int workers) {
    return R"({"record": "run", "device": "cpu", "settings": {"batch_size": 8, "workers": )" +
           std::to_string(workers) + "}}";
  };
  const test::TempDir dir("kiln_doctor");
  const std::string resumed =
      temp_file(dir, "resumed.jsonl", run_with(0) + "\n" + doctor + "\n" + run_with(7) + "\n");
  CHECK(examples::facts_from_metrics(resumed).settings.workers == 0);
  const std::string measured_again = temp_file(
      dir, "again.jsonl", run_with(0) + "\n" + doctor + "\n" + run_with(7) + "\n" + doctor + "\n");
  CHECK(examples::facts_from_metrics(measured_again).settings.workers == 7);
}

TEST_CASE("run records stay valid JSON when a setting holds bytes that are not UTF-8", "[doctor]") {
  // A Latin-1 prompt or --out path: each stray byte becomes \u00XX; well-formed UTF-8 passes as it is.
  const std::string latin1 = "caf\xe9 \xff", utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5";
  const std::string cut = "\xe2\x82", surrogate = "\xed\xa0\x80", overlong = "\xc0\xaf";
  const examples::JsonLine line = examples::JsonLine()
                                      .text("latin1", latin1)
                                      .text("utf8", utf8)
                                      .text("cut", cut)
                                      .text("surrogate", surrogate)
                                      .text("overlong", overlong)
                                      .text("controls", std::string("a\"b\\c\n\x01", 8));
  CHECK(line.str().find("caf\\u00e9 \\u00ff") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(line.str());
  CHECK(j.at("latin1") == "caf\xc3\xa9 \xc3\xbf");  // the same code points, now in UTF-8
  CHECK(j.at("utf8") == utf8);
  CHECK(j.at("cut") == "\xc3\xa2\xc2\x82");
  CHECK(j.at("surrogate") == "\xc3\xad\xc2\xa0\xc2\x80");
  CHECK(j.at("overlong") == "\xc3\x80\xc2\xaf");
  CHECK(j.at("controls") == std::string("a\"b\\c\n\x01", 8));
}
