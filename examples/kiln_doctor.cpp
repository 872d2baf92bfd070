// kiln_doctor: the utilization doctor's report of a recorded run (examples/doctor.h). Reads the
// settings and the last "doctor" record (or the one of --step) from a run's metrics.jsonl, which
// train_cnn and train_gpt write with --doctor, and prints the measurements and the tips that apply.
// Bad input (no file, no such record, a line that is not JSON) exits 2 with the reason.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "examples/common.h"
#include "examples/doctor.h"

using namespace kiln;

int main(int argc, char** argv) {
  return examples::run_main("kiln_doctor", [&] {
    std::string run;
    std::optional<int64_t> step;
    examples::Flags app("Prints the utilization doctor's report of a run recorded with --doctor.", "kiln_doctor");
    app.add_option("RUN", run, "the run's --out folder, or its metrics.jsonl")->required();
    app.add_option("--step", step, "the report written at this step (default: the last)")
        ->transform(examples::whole<int64_t>(0));
    app.parse(argc, argv);
    const std::string path =
        std::filesystem::is_directory(run) ? (std::filesystem::path(run) / "metrics.jsonl").string() : run;
    examples::RunFacts facts;
    try {
      facts = examples::facts_from_metrics(path, step);
    } catch (const IOError& e) {
      examples::input_error(e.what());
    }
    const std::vector<examples::Finding> findings = examples::diagnose(facts);
    std::printf("%s", examples::format_report(facts, findings).c_str());
    return 0;
  });
}
