// Writes gpu_bench's case list (bench/case_list.h) as JSON lines without CUDA, so CI can check that
// tools/torch_peer.py maps every case (`torch_peer.py --check-cases FILE`); the same list as
// `gpu_bench --list-cases --json FILE` on a CUDA build.
//   usage: bench_cases --json FILE [--elements N]
#include <cstdio>

#include "bench/case_list.h"
#include "examples/flags.h"

int main(int argc, char** argv) {
  kiln::examples::Flags app("Writes gpu_bench's case list, built from the op table, as JSON lines.", "bench_cases");
  std::string json;
  int64_t elements = int64_t(1) << 26;
  app.add_option("--json", json, "write the case list here")->required();
  app.add_option("--elements", elements, "elements per memory-bound tensor (a positive multiple of 1024)")
      ->transform(kiln::examples::whole<int64_t>(1024, int64_t{1} << 40));
  try {
    app.parse(argc, argv);
  } catch (const kiln::examples::ExitRequest& e) {
    return e.code;
  }
  const std::string err = kiln::bench::write_case_list(json, elements);
  if (!err.empty()) {
    std::fprintf(stderr, "bench_cases: %s\n", err.c_str());
    return 1;
  }
  std::printf("wrote %s\n", json.c_str());
  return 0;
}
