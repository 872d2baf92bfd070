// op_table_rows: prints the op table's rows as JSON lines ({"row", "family", "bench"}), for
// tools/ops_doc.py, which writes docs/ops.md from them and from the source tree.
//   usage: op_table_rows --json FILE
#include <cstdio>
#include <string>

#include "core/atomic_file.h"
#include "kernels/error.h"
#include "tests/op_table/op_table.h"

namespace {

std::string quoted(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--json") {
    std::fprintf(stderr, "usage: %s --json FILE\n", argv[0]);
    return 2;
  }
  std::string text;
  for (const kiln::test::OpRow& row : kiln::test::op_table()) {
    std::string bench = "[";
    for (size_t i = 0; i < row.bench.size(); ++i) bench += (i ? ", " : "") + quoted(row.bench[i].name);
    bench += "]";
    text += "{\"row\": " + quoted(row.name) + ", \"family\": " + quoted(row.family) + ", \"bench\": " + bench +
            "}\n";
  }
  try {
    kiln::write_file_atomically(argv[2], text, "op_table_rows");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
