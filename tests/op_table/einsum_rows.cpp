// Op table rows of the einsum family: matrix, batched and attention-shaped products, diagonals and
// traces, transposes and sums of one operand, outer products, a chain of three operands, dims of
// size 1 broadcasting, ellipses and an implicit output. The reference evaluates each equation
// (written out without ellipsis) by brute force: every assignment of values to the labels, the
// product of the operands' elements there added into the output's.
#include <map>
#include <string>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// The equation "t1,t2,...->out" (letters only) over `in`, in float64; a dim of size 1 reads index
// 0 whatever its label's value (broadcasting).
Tensor ref_einsum(const std::string& equation, const TensorList& in) {
  const size_t arrow = equation.find("->");
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = equation.find(',', start);
    const size_t end = comma == std::string::npos || comma > arrow ? arrow : comma;
    terms.push_back(equation.substr(start, end - start));
    if (end == arrow) break;
    start = comma + 1;
  }
  const std::string out = equation.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d) {
      int64_t& s = size[terms[i][d]];
      s = std::max(s, in[i].size(static_cast<int64_t>(d)));
    }
  }
  std::vector<char> labels;
  for (const auto& [c, s] : size) labels.push_back(c);
  Shape out_shape;
  for (char c : out) out_shape.push_back(size.at(c));
  std::vector<Values> xs;
  for (size_t i = 0; i < terms.size(); ++i) xs.push_back(values(in[i]));
  Values result(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  std::map<char, int64_t> value;
  for (char c : labels) value[c] = 0;
  while (true) {
    double product = 1.0;
    for (size_t i = 0; i < terms.size(); ++i) {
      Shape idx;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        idx.push_back(in[i].size(static_cast<int64_t>(d)) == 1 ? 0 : value[terms[i][d]]);
      }
      product *= xs[i][at(ravel(idx, in[i].sizes()))];
    }
    Shape oidx;
    for (char c : out) oidx.push_back(value[c]);
    result[at(ravel(oidx, out_shape))] += product;
    size_t k = 0;
    while (k < labels.size() && ++value[labels[k]] == size.at(labels[k])) value[labels[k++]] = 0;
    if (k == labels.size()) break;
  }
  return from_values(result, out_shape);
}

// A sample of operands of the given shapes (the second one non-contiguous when `strided`).
Sample operands(const std::vector<Shape>& shapes, uint64_t seed, bool strided = false) {
  std::string name;
  for (const Shape& s : shapes) name += (name.empty() ? "" : " ") + shape_str(s);
  if (strided) name += ", the second strided";
  return {name, [=](DType t, Device d) {
            TensorList x;
            for (size_t i = 0; i < shapes.size(); ++i) {
              Tensor v = rnd(shapes[i], t, d, seed + i);
              x.push_back(strided && i == 1 ? noncontig(v) : v);
            }
            return x;
          }};
}

// `equation` as einsum takes it, checked against the reference's form of it (the same, or without
// the ellipsis or with the implicit output written out).
OpRow einsum_row(const std::string& equation, const std::string& reference, std::vector<Sample> samples) {
  OpRow r;
  r.name = "einsum " + equation;
  r.dtypes = kFloatTypes;
  r.samples = std::move(samples);
  r.op = [equation](const TensorList& x) { return TensorList{einsum(equation, x)}; };
  r.reference = [reference](const TensorList& x) { return TensorList{ref_einsum(reference, x)}; };
  for (size_t i = 0; i < r.samples.front().make(DType::Float64, Device::cpu()).size(); ++i)
    r.differentiable.push_back(i);
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

}  // namespace

void add_einsum_rows(std::vector<OpRow>& rows) {
  rows.push_back(einsum_row("ij,jk->ik", "ij,jk->ik", {operands({{5, 7}, {7, 3}}, 1600, true)}));
  rows.back().errors = {
      {"terms for another number of operands",
       [] {
         einsum("ij,jk->ik", {zeros({2, 3})});
       },
       {"einsum", "2 terms for 1 operands", "ij,jk->ik"}},
      {"a term for another rank",
       [] {
         einsum("ij,jk->ik", {zeros({2, 3}), zeros({3})});
       },
       {"einsum", "\"jk\"", "2 dims", "1"}},
      {"sizes that do not broadcast",
       [] {
         einsum("ij,jk->ik", {zeros({2, 3}), zeros({4, 5})});
       },
       {"einsum", "label 'j'", "4", "3"}},
      {"a character that is no label",
       [] {
         einsum("i1,jk->ik", {zeros({2, 3}), zeros({3, 5})});
       },
       {"einsum", "'1'"}},
      {"an output label in no operand",
       [] {
         einsum("ij,jk->iz", {zeros({2, 3}), zeros({3, 5})});
       },
       {"einsum", "'z'"}},
      {"a repeated output label",
       [] {
         einsum("ij,jk->ii", {zeros({2, 3}), zeros({3, 5})});
       },
       {"einsum", "repeats", "'i'"}},
      {"integer operands",
       [] {
         einsum("ij->ji", {zeros({2, 3}, DType::Int64)});
       },
       {"einsum", "int64", "[2, 3]"}},
      {"mixed dtypes",
       [] {
         einsum("ij,jk->ik", {zeros({2, 3}), zeros({3, 2}, DType::Float64)});
       },
       {"einsum", "float64", "float32"}},
      {"a repeated label over dims of two sizes",
       [] {
         einsum("ii->i", {zeros({2, 3})});
       },
       {"einsum", "'i'", "2", "3"}},
      undefined_input("einsum", [](const Tensor& x) { return einsum("ij->j", {x}); }),
  };
  rows.push_back(einsum_row("bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {operands({{2, 3, 5, 4}, {2, 3, 6, 4}}, 1610)}));
  rows.push_back(einsum_row("bij,bjk->bik", "bij,bjk->bik", {operands({{3, 4, 5}, {3, 5, 2}}, 1620, true)}));
  rows.push_back(einsum_row("ii->i", "ii->i", {operands({{5, 5}}, 1630)}));
  rows.push_back(einsum_row("ii", "ii->", {operands({{6, 6}}, 1640)}));  // the trace, implicitly
  rows.push_back(einsum_row("ijk->kij", "ijk->kij", {operands({{2, 3, 4}}, 1650)}));
  rows.push_back(einsum_row("ijk->j", "ijk->j", {operands({{2, 3, 4}}, 1660)}));
  rows.push_back(einsum_row("i,j->ij", "i,j->ij", {operands({{5}, {3}}, 1670)}));
  rows.push_back(einsum_row("ij,ij->i", "ij,ij->i", {operands({{4, 6}, {4, 6}}, 1680, true)}));
  // Three operands: the middle label of the first pair is contracted, the second pair's after.
  rows.push_back(einsum_row("ab,bc,cd->ad", "ab,bc,cd->ad", {operands({{3, 4}, {4, 5}, {5, 2}}, 1690)}));
  // Two operands' labels of size 1 broadcast: a row vector against a matrix, both ways.
  rows.push_back(
      einsum_row("ij,ij->ij", "ij,ij->ij", {operands({{1, 5}, {4, 5}}, 1700), operands({{4, 5}, {4, 1}}, 1702)}));
  // The ellipsis: batch dims of different ranks, broadcast.
  rows.push_back(einsum_row("...ij,...jk->...ik", "abij,bjk->abik", {operands({{2, 1, 3, 4}, {5, 4, 2}}, 1710)}));
  rows.push_back(einsum_row("b...d,d->b...", "bxyd,d->bxy", {operands({{2, 3, 4, 5}, {5}}, 1720)}));
  // Implicit output: letters used once, alphabetically ("ba,ac" gives "bc").
  rows.push_back(einsum_row("ba,ac", "ba,ac->bc", {operands({{3, 4}, {4, 2}}, 1730)}));
  // A diagonal inside a product, and a label summed inside one operand before the product.
  rows.push_back(einsum_row("iij,jk->ik", "iij,jk->ik", {operands({{3, 3, 4}, {4, 2}}, 1740)}));
  rows.push_back(einsum_row("ijx,jk->ik", "ijx,jk->ik", {operands({{3, 4, 2}, {4, 5}}, 1750)}));
  // Low precision: the sum over x is rounded to the dtype before the product (as PyTorch's einsum
  // rounds it), and the product's terms cancel, so the error is a few ulps of the terms, not of
  // the result.
  rows.back().tolerance[DType::Float16] = {3e-3, 3e-3};
  rows.back().tolerance[DType::BFloat16] = {3e-2, 3e-2};
  {
    OpRow r;
    r.name = "outer";
    r.dtypes = kAllNumeric;
    r.samples = {operands({{5}, {3}}, 1760), operands({{4}, {7}}, 1762, true)};
    r.op = [](const TensorList& x) { return TensorList{outer(x[0], x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_einsum("i,j->ij", x)}; };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    r.errors = {{"a 2-d operand", [] { outer(zeros({2, 3}), zeros({3})); }, {"outer", "1-d", "[2, 3]", "[3]"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
