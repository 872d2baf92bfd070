// Op table rows of the copy family: casts between dtypes (Tensor::to) and copy_ into an existing
// tensor, whose source broadcasts to the destination and is cast on the way. A cast that rounds is
// held to half a spacing of its target, so a truncating cast fails.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {

namespace {

// The CUDA cast between float32, float16 and bfloat16 moves 8 elements at a time through 16-byte
// vectors when both pointers are 16-byte aligned: a view one element in is not, and [203] leaves a
// tail of 3 after 25 vectors.
void add_cast_samples(OpRow& r, uint64_t seed, const Gen& g) {
  r.samples.push_back({"[203], 8-wide vectors and a tail", [=](DType t, Device d) {
                         return TensorList{g({203}, t, d, seed)};
                       }});
  r.samples.push_back({"a view one element in (unaligned)", [=](DType t, Device d) {
                         return TensorList{g({68}, t, d, seed + 1).narrow(0, 1, 67)};
                       }});
}

}  // namespace

void add_copy_rows(std::vector<OpRow>& rows) {
  {
    // Exact for every source dtype.
    OpRow r = make_row(
        "to_float64", numeric_and_bool(), unary_samples(4200, normal()),
        [](const TensorList& x) { return TensorList{x[0].to(DType::Float64)}; },
        ref([](const Values& v) { return v[0]; }), {0}, [](DType) { return DType::Float64; });
    r.errors = {undefined_input("to", [](const Tensor& a) { return to_dtype(a, DType::Float64); })};
    rows.push_back(std::move(r));
  }
  {
    // Small magnitudes (about 1e-3): float32's spacing there (~1e-10) is small enough for central
    // differences with eps 1e-6 through the float32 rounding of the output.
    OpRow r = make_row(
        "to_float32", kAllNumeric, unary_samples(4250, normal(1e-3)),
        [](const TensorList& x) { return TensorList{x[0].to(DType::Float32)}; },
        ref([](const Values& v) { return v[0]; }), {0}, [](DType) { return DType::Float32; });
    // A float64 source is rounded to float32: up to 2^-24 relative.
    r.tolerance[DType::Float64] = {0, 6e-8};
    add_cast_samples(r, 4260, normal(1e-3));
    rows.push_back(std::move(r));
  }
  for (DType target : {DType::Float16, DType::BFloat16}) {
    // Round to nearest: within half a spacing, i.e. 2^-11 (float16) or 2^-8 (bfloat16) relative; a
    // truncating cast fails this bound.
    double u = target == DType::Float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    OpRow r = make_row(
        target == DType::Float16 ? "to_float16" : "to_bfloat16", kAllNumeric, unary_samples(4300, normal()),
        [target](const TensorList& x) { return TensorList{x[0].to(target)}; },
        ref([](const Values& v) { return v[0]; }), {}, [target](DType) { return target; });
    for (DType t : kFloatTypes) r.tolerance[t] = {0, u};
    add_cast_samples(r, 4310, normal());
    rows.push_back(std::move(r));
  }
  {
    // Floats truncate toward zero; not differentiable (an integer cast ends the graph).
    OpRow r = make_row(
        "to_int32", kAllNumeric, unary_samples(4350, normal(4.0)),
        [](const TensorList& x) { return TensorList{x[0].to(DType::Int32)}; },
        ref([](const Values& v) { return std::trunc(v[0]); }), {}, [](DType) { return DType::Int32; });
    rows.push_back(std::move(r));
  }
  {
    // Output 0: self (whose old values get no gradient) overwritten by src broadcast to its shape;
    // output 1: a float64 destination, so every source dtype is cast on the way.
    OpRow r = make_row(
        "copy_", kAllNumeric, inplace_samples(5450, normal(), normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.copy_(x[1]);
          // A converting copy on the inputs' device: into float32 (float64 exists on the CPU only,
          // so only float64 samples copy into float64).
          const DType wide_dtype = x[1].dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
          Tensor wide = zeros(x[0].sizes(), TensorOptions(wide_dtype, x[0].device()));
          wide.copy_(x[1]);
          return TensorList{self, wide};
        },
        refs({[](const Values& v) { return v[1]; }, [](const Values& v) { return v[1]; }}), {0, 1}, same_dtype);
    // kiln's copy kernel against gpu_bench's cudaMemcpyAsync ceiling: float32 into an empty
    // float32 tensor of the same size (the row's op would also time a clone and a second copy).
    {
      BenchCase b;
      b.name = "copy_";
      b.dtypes = {DType::Float32};
      b.op = "copy_";
      b.setup = [](DType t, int64_t n) {
        BenchSetup s;
        s.shape = {n};
        s.inputs = {{{n}, t, BenchInput::Fill::Empty}, {{n}, t}};
        s.bytes = 2.0 * static_cast<double>(element_size(t)) * static_cast<double>(n);
        return s;
      };
      b.run = [](const TensorList& x) {
        Tensor self = x[0];
        self.copy_(x[1]);
        return TensorList{self};
      };
      r.bench = {b};
    }
    r.errors = {
        {"source does not broadcast to self",
         [] {
           Tensor x = zeros({3});
           x.copy_(zeros({2, 3}));
         },
         {"copy_", "[2, 3]", "[3]"}},
        {"shapes do not broadcast",
         [] {
           Tensor x = zeros({2, 3});
           x.copy_(zeros({4}));
         },
         {"copy_", "[2, 3]", "[4]"}},
        {"leaf that requires grad",
         [] {
           Tensor x = zeros({3});
           x.set_requires_grad(true);
           x.copy_(ones({3}));
         },
         {"copy_", "leaf"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
