// op_table_rows: prints the op table's rows as JSON lines ({"row", "family", "bench"}), for
// tools/ops_doc.py, which writes docs/ops.md from them and from the source tree.
//   usage: op_table_rows --json FILE
#include <cstdio>
#include <string>

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
  const std::string path = argv[2], tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr;
  for (const kiln::test::OpRow& row : kiln::test::op_table()) {
    if (!ok) break;
    std::string bench = "[";
    for (size_t i = 0; i < row.bench.size(); ++i) bench += (i ? ", " : "") + quoted(row.bench[i].name);
    bench += "]";
    ok = std::fprintf(f, "{\"row\": %s, \"family\": %s, \"bench\": %s}\n", quoted(row.name).c_str(),
                      quoted(row.family).c_str(), bench.c_str()) > 0;
  }
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    std::fprintf(stderr, "op_table_rows: cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}
