// gpu_bench's cases, built from the op table's bench specs (OpRow::bench): the device-to-device
// copy ceiling first (gpu_bench's own, not an op), then memory-bound cases dtype by dtype, then
// compute-bound ones in table order, so every ceiling precedes the cases measured against it.
// Needs no GPU: bench_cases and `gpu_bench --list-cases` write it for tools/torch_peer.py.
#pragma once

#include <string>
#include <vector>

#include "tests/op_table/op_table.h"

namespace kiln::bench {

struct ListedCase {
  std::string name;
  DType dtype;
  test::BenchSetup setup;
  const test::OpRow* row = nullptr;       // nullptr for the copy ceiling
  const test::BenchCase* spec = nullptr;  // nullptr for the copy ceiling
  std::string op, args;                   // the torch call tools/torch_peer.py makes
  int64_t set_bytes = 0;                  // bytes of one rotation set's drawn inputs
  bool copy_ceiling = false;

  bool compute_bound() const { return setup.flops > 0; }
};

// The cases for `elements` elements per memory-bound tensor (a positive multiple of 1024). Throws
// std::invalid_argument naming the row when a bench spec is malformed (a duplicate case, a dtype
// the row does not list, a compute-bound case without a precision or a ceiling before it, ...).
std::vector<ListedCase> list_cases(int64_t elements);

// One case as a JSON object on one line: case, dtype, shape, bytes, flops, precision, tf32,
// ceiling, op, args, inputs (shape, dtype, fill, format), set_bytes, row.
std::string case_json(const ListedCase& c);

std::string json_escape(const std::string& s);
std::string shape_json(const Shape& s);

// Writes text to path through a temporary file beside it, renamed over it once complete; false on failure.
bool write_atomic(const std::string& path, const std::string& text);

// The case list as JSON lines at path; "" on success, else what went wrong.
std::string write_case_list(const std::string& path, int64_t elements);

}  // namespace kiln::bench
