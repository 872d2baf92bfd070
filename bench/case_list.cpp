// The bench case list from the op table's rows. Memory-bound cases are ordered dtype by dtype (each
// dtype where it first appears in the table) so results read as one table per dtype.
#include "bench/case_list.h"

#include "core/atomic_file.h"
#include "kernels/error.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace kiln::bench {
namespace {

using test::BenchInput;
using test::BenchSetup;
using test::OpRow;

int64_t drawn_bytes(const BenchSetup& s) {
  int64_t b = 0;
  for (const BenchInput& in : s.inputs) {
    if (in.fill == BenchInput::Fill::Normal) b += shape_numel(in.shape) * static_cast<int64_t>(element_size(in.dtype));
  }
  return b;
}

// The ceiling of every memory-bound case: cudaMemcpyAsync device to device of n float32 elements
// into an uninitialized tensor, bytes read + written (PyTorch's Tensor.copy_ is the same memcpy).
ListedCase copy_ceiling(int64_t n) {
  ListedCase c;
  c.name = "copy";
  c.dtype = DType::Float32;
  c.setup.shape = {n};
  c.setup.inputs = {{{n}, DType::Float32, BenchInput::Fill::Empty}, {{n}, DType::Float32}};
  c.setup.bytes = 2 * 4 * static_cast<double>(n);
  c.op = "memcpy";
  c.args = "{}";
  c.set_bytes = drawn_bytes(c.setup);
  c.copy_ceiling = true;
  return c;
}

[[noreturn]] void malformed(const ListedCase& c, const std::string& what) {
  throw std::invalid_argument("bench case \"" + c.name + "\" (" + dtype_name(c.dtype) + ") of op-table row \"" +
                              (c.row ? c.row->name : std::string("-")) + "\": " + what);
}

void check(const ListedCase& c) {
  const BenchSetup& s = c.setup;
  if (c.name.empty() || c.name == "copy") malformed(c, "a case needs a name other than \"copy\" (gpu_bench's own)");
  if (c.op.empty()) malformed(c, "no op for tools/torch_peer.py to map");
  if (c.args.size() < 2 || c.args.front() != '{' || c.args.back() != '}') malformed(c, "args is not a JSON object");
  if (std::find(c.row->dtypes.begin(), c.row->dtypes.end(), c.dtype) == c.row->dtypes.end()) {
    malformed(c, "the row does not list this dtype");
  }
  if (s.shape.empty() || s.inputs.empty()) malformed(c, "no shape or no inputs");
  if (!(s.bytes > 0)) malformed(c, "bytes moved must be positive");
  if ((s.flops > 0) != !s.precision.empty()) malformed(c, "flops and precision go together (compute-bound cases)");
  if ((s.tf32 || s.ceiling) && !(s.flops > 0)) malformed(c, "tf32 and ceiling are for compute-bound cases");
  if (c.set_bytes <= 0) malformed(c, "no input drawn from the normal distribution");
  for (const BenchInput& in : s.inputs) {
    if (in.fill == BenchInput::Fill::Tokens && (in.dtype != DType::Int64 || in.upper < 1)) {
      malformed(c, "token ids must be int64 with a positive bound");
    }
  }
}

const char* fill_name(BenchInput::Fill f) {
  switch (f) {
    case BenchInput::Fill::Normal: return "normal";
    case BenchInput::Fill::Ones: return "ones";
    case BenchInput::Fill::Empty: return "empty";
    case BenchInput::Fill::Tokens: return "tokens";
  }
  return "?";
}

}  // namespace

std::vector<ListedCase> list_cases(int64_t elements) {
  if (elements < 1024 || elements % 1024 != 0)
    throw std::invalid_argument("elements must be a positive multiple of 1024");
  std::vector<ListedCase> memory, compute;
  std::vector<DType> dtype_order;
  for (const OpRow& row : test::op_table()) {
    for (const test::BenchCase& spec : row.bench) {
      for (DType t : spec.dtypes) {
        ListedCase c;
        c.name = spec.name;
        c.dtype = t;
        c.row = &row;
        c.spec = &spec;
        c.op = spec.op;
        c.args = spec.args;
        if (!spec.setup) malformed(c, "no setup");
        c.setup = spec.setup(t, elements);
        c.set_bytes = drawn_bytes(c.setup);
        check(c);
        if (!c.compute_bound() && std::find(dtype_order.begin(), dtype_order.end(), t) == dtype_order.end()) {
          dtype_order.push_back(t);
        }
        (c.compute_bound() ? compute : memory).push_back(std::move(c));
      }
    }
  }
  auto rank = [&](DType t) { return std::find(dtype_order.begin(), dtype_order.end(), t) - dtype_order.begin(); };
  std::stable_sort(memory.begin(), memory.end(),
                   [&](const ListedCase& a, const ListedCase& b) { return rank(a.dtype) < rank(b.dtype); });

  std::vector<ListedCase> cases{copy_ceiling(elements)};
  for (ListedCase& c : memory) cases.push_back(std::move(c));
  for (ListedCase& c : compute) cases.push_back(std::move(c));

  // Results are joined on (case, dtype, shape); each compute-bound precision has one ceiling, first.
  std::set<std::tuple<std::string, DType, Shape>> seen;
  std::set<std::string> ceilings;
  for (const ListedCase& c : cases) {
    if (!seen.insert({c.name, c.dtype, c.setup.shape}).second) malformed(c, "two cases with this name, dtype and shape");
    if (!c.compute_bound()) continue;
    if (c.setup.ceiling && !ceilings.insert(c.setup.precision).second) {
      malformed(c, "a second ceiling for precision " + c.setup.precision);
    }
    if (!ceilings.count(c.setup.precision)) malformed(c, "no " + c.setup.precision + " ceiling before it");
  }
  return cases;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      r += ' ';
    } else {
      r += c;
    }
  }
  return r;
}

std::string shape_json(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string case_json(const ListedCase& c) {
  const BenchSetup& s = c.setup;
  char num[128];
  std::string j = "{\"case\": \"" + json_escape(c.name) + "\", \"dtype\": \"" + dtype_name(c.dtype) +
                  "\", \"shape\": " + shape_json(s.shape);
  std::snprintf(num, sizeof num, ", \"bytes\": %.0f, \"flops\": %.0f", s.bytes, s.flops);
  j += num;
  j += ", \"precision\": " + (s.precision.empty() ? std::string("null") : "\"" + json_escape(s.precision) + "\"");
  j += std::string(", \"tf32\": ") + (s.tf32 ? "true" : "false") + ", \"ceiling\": " + (s.ceiling ? "true" : "false");
  j += ", \"op\": \"" + json_escape(c.op) + "\", \"args\": " + c.args + ", \"inputs\": [";
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const BenchInput& in = s.inputs[i];
    if (i) j += ", ";
    j += "{\"shape\": " + shape_json(in.shape) + ", \"dtype\": \"" + dtype_name(in.dtype) + "\", \"fill\": \"" +
         fill_name(in.fill) + "\", \"format\": \"" +
         (in.format == MemoryFormat::ChannelsLast ? "channels_last" : "contiguous") + "\"";
    if (in.fill == BenchInput::Fill::Tokens) j += ", \"upper\": " + std::to_string(in.upper);
    j += "}";
  }
  j += "], \"set_bytes\": " + std::to_string(c.set_bytes);
  j += ", \"row\": " + (c.row ? "\"" + json_escape(c.row->name) + "\"" : std::string("null")) + "}";
  return j;
}

bool write_atomic(const std::string& path, const std::string& text) {
  try {
    write_file_atomically(path, text, "bench");
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::string write_case_list(const std::string& path, int64_t elements) {
  std::string text;
  try {
    for (const ListedCase& c : list_cases(elements)) text += case_json(c) + "\n";
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!write_atomic(path, text)) return "cannot write " + path;
  return "";
}

}  // namespace kiln::bench
