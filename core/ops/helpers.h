// Internal helpers of core/ops: building kernel arguments from tensors, collapsing dimensions,
// layout of outputs, and the checks every op makes. Not part of the public API.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "core/ops/factory.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/strided.h"

namespace kiln::ops {

// A kernel argument for `t` as it is (its own sizes and strides). More than kMaxDims dims is a
// ShapeError naming `op`.
StridedArg make_arg(const char* op, const Tensor& t);
// A kernel argument for `t` broadcast to `shape` (stride 0 on broadcast dims).
StridedArg make_arg(const char* op, const Tensor& t, const Shape& shape);
// An elementwise operand: a tensor broadcast to `shape`.
Operand make_operand(const char* op, const Tensor& t, const Shape& shape);
Operand scalar_operand(const Scalar& s);
// A scalar operand that stands for a value of dtype `common` (the dtype an op's inputs share:
// promote_with_scalar): a float dtype gets the scalar rounded to it, once, as a fill of that dtype
// stores it, so eq(x, 0.1) on float16 compares with float16's 0.1 (what x holds after x.fill_(0.1)),
// and where/masked_fill store the value a fill stores (through float32 it was rounded twice). Other
// dtypes: scalar_operand(s). Arithmetic keeps scalar_operand(s): a scalar factor stays as precise as
// the float32 compute of a 16-bit op (as PyTorch's CUDA kernels take it).
Operand scalar_operand(const Scalar& s, DType common);

using kiln::collapse_dims;  // kernels/strided.h

// Strides for a new tensor of `shape` laid out like `like` when it has that shape, else
// contiguous: like's own strides when it is dense, otherwise dense strides that nest its dims in
// the order of its strides (a sliced channels-last tensor gives channels-last), as PyTorch's
// preserve format does. Elementwise outputs and clone() keep their input's layout this way.
Shape strides_like(const Shape& shape, const Tensor& like);
// Dense strides for `shape` with its dims before the last nested in the order of ref's strides,
// largest outermost (ties keep their order), and the last dim innermost: ref [B, H, T, D] viewing a
// [B, T, H, D] or [B, T, 3, H, D] buffer gives [B, T, H, Dv] strides for a shape [B, H, T, Dv].
// Contiguous when ref has another rank, other sizes (the last dim aside) or a zero stride on a dim
// of more than one element.
Shape dense_strides_in_order_of(const Shape& shape, const Tensor& ref);

// Checks: all defined tensors on one device (DeviceError naming op and devices); returns it.
Device common_device(const char* op, const std::vector<const Tensor*>& tensors);
void check_defined(const char* op, const Tensor& t, const char* what);
// A shape for a new tensor: no negative sizes (a ShapeError naming `op` otherwise).
void check_shape(const char* op, const Shape& shape);
void check_floating(const char* op, const Tensor& t, const char* what);
// Whether an op's result dtype may be written into a tensor of dtype `to` (in-place ops).
bool can_cast(DType from, DType to);
// The largest finite value of a floating dtype (float16 65504, bfloat16 (2 - 2^-7) * 2^127).
double largest_finite(DType dtype);
// A value to store into elements of a `dtype` tensor (full, fill_, masked_fill, linspace's ends,
// an integer clamp's bounds) must convert without overflow, as PyTorch's checked Scalar conversion:
// an Error naming op, the value and the dtype otherwise. bool takes any value; a float dtype takes
// inf, NaN and finite values no larger than its largest finite one (float16: 65504); an integer
// dtype takes a float in [lowest, max] (stored cut toward zero), never NaN or inf, and an integer
// in range, where uint8 also takes integers down to -255, stored modulo 256 (full(-1) in uint8 is
// 255).
void check_fill_value(const char* op, const Scalar& value, DType dtype);

// What every in-place op checks first: self is defined, and with grad mode on it is neither a leaf
// that requires grad nor a view whose change no history can take (a view of such a leaf, a view
// without a base such as a detach() alias, a view taken under NoGradGuard of a tensor that requires
// grad). A view with a base changes its base's history (core/autograd.cpp, ViewInPlaceBackward).
void check_inplace(const char* op, const Tensor& self, std::initializer_list<const Tensor*> others);
// The result dtype of an in-place op must cast to self's (a DTypeError naming the op otherwise).
void check_inplace_cast(const char* op, DType result, const Tensor& self);
// Marks self as produced by a node that passes no gradient to self's old value (fills).
void record_overwrite(const char* op, const Tensor& self);

std::string dtype_str(DType t);

// A dense row-major copy (or alias) without history: what row-wise kernels read. Undefined stays so.
Tensor dense(const Tensor& t);
// A gradient as the backward kernels want it: row-major, in dtype `dtype`.
Tensor dense_grad(const Tensor& g, DType dtype);
// t's data pointer, or null for an undefined (absent, optional) tensor.
void* ptr_or_null(const Tensor& t);
// dim wrapped into [0, max(x.dim(), 1)); an IndexError naming `op` and the range otherwise.
int64_t checked_dim(const char* op, const Tensor& x, int64_t dim);
// For an op whose output is empty while its index is not, so that no kernel reads the index: each
// value of `index` (integer, any device; read on the host, which waits for a CUDA device) must be in
// [0, size), else an IndexError naming op, the value and `range` (what the index counts).
void check_index_values(const char* op, const Tensor& index, int64_t size, const std::string& range);
// A per-feature parameter: undefined, or floating of exactly `shape` (a ShapeError naming `what`
// and `expected` otherwise).
void check_param(const char* op, const Tensor& t, const char* what, const Shape& shape, const std::string& expected);
// A norm over the trailing dims: normalized_shape names at least one dim and x ends with it
// (ShapeErrors naming both shapes otherwise).
void check_normalized_shape(const char* op, const Tensor& x, const Shape& normalized_shape);
// A norm's eps: a finite number >= 0 (an infinite one would turn every output into 0 or NaN).
void check_eps(const char* op, double eps);
// Two optional tensors read through one dtype argument of a kernel must agree on it.
void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name);
// The dtype of the first defined of a and b, else `fallback`.
DType param_dtype_of(const Tensor& a, const Tensor& b, DType fallback);
// The dtype a composed op computes a `t` result in: float16 and bfloat16 widen to float32 (their
// sums and products run there, rounded once at the end); every other dtype stays.
constexpr DType widened_dtype(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }
// The dtype of a float-valued op's result (exp, div, sin, ...): a float input's own, else float32.
constexpr DType float_result(DType t) { return is_floating(t) ? t : kDefaultFloat; }

}  // namespace kiln::ops

namespace kiln::ops {
// dst[...] = src broadcast to dst's shape, cast to dst's dtype. No autograd, no checks of aliasing.
// `op` names the caller's op in errors.
void copy_raw(const Tensor& dst, const Tensor& src, const char* op = "copy_");
// A new tensor sharing x's storage and version counter with other sizes, strides and offset. The
// one place views are made, so the one place their bounds are checked: a count or extent that
// overflows is a ShapeError, elements past x's storage an IndexError, each naming `op`.
Tensor make_view(const char* op, const Tensor& x, Shape sizes, Shape strides, int64_t offset);
// What a view of x knows of its origin, set as grad mode is now: whether it was taken under
// NoGradGuard from a tensor that requires grad, and (grad mode on) its base, whose history its own
// follows (TensorImpl::view_base). make_view sets it; an op that makes its views under NoGradGuard
// and records one node for them (split) sets it again with grad mode back.
void set_view_origin(const Tensor& view, const Tensor& x);
// A new tensor made by `op` (its output, scratch or copy): the shape, strides and byte count are
// checked (a ShapeError naming `op` when negative or past int64) and a failed allocation is an
// OutOfMemoryError naming `op` and the shape. The factories of core/ops/factory.h are these under
// their own names.
Tensor empty_for(const char* op, const Shape& shape, const Shape& strides, const TensorOptions& options);
Tensor empty_for(const char* op, const Shape& shape, const TensorOptions& options,
                 MemoryFormat format = MemoryFormat::Contiguous);
// Element offsets (from x.data_ptr()) of each entry of a broadcast batch shape, in row-major
// order. x's first `x_batch_dims` dims are its batch dims, right-aligned against `batch`; size-1
// dims repeat. Batched kernels (matmul, attention) take these instead of copying broadcasts.
std::vector<int64_t> batch_offsets(const Tensor& x, int64_t x_batch_dims, const Shape& batch);
// Refuses an in-place write whose result would depend on the order the elements are written in:
// `self` with a dim of stride 0 (several elements in one place), or an input that shares part of
// self's memory without being exactly self (a shifted or transposed view of it), when both are
// dense. Each is a kiln::Error naming `op`. When either is not dense, whether an element of one is
// an element of the other cannot be decided cheaply (x[:, 0::2] and x[:, 1::2] share none): such an
// input passes, and the op reads it through readable_input.
void check_no_overlap(const char* op, const Tensor& self, std::initializer_list<const Tensor*> inputs);
// The tensor an in-place op on `self` reads for `input`: input itself, or a copy of it when its
// bytes reach into self's without it being exactly self (possible only where check_no_overlap could
// not decide), so that the result does not depend on the order of the writes.
Tensor readable_input(const Tensor& self, const Tensor& input);
// Whether a and b are views of one storage.
bool shares_storage(const Tensor& a, const Tensor& b);
// A 1-d int64 tensor of host values on `device` (the index lists composed ops build on the host).
Tensor index_on(const std::vector<int64_t>& values, Device device);
// -s; an integer one modulo 2^64, as integer ops wrap (-INT64_MIN is INT64_MIN): sub's alpha.
Scalar negated(const Scalar& s);
// Whether a scalar the kernels take as a double (add's and sub's alpha, clamp's bounds, arange's
// ends) is exact there: a float, or an integer within 2^53.
bool exact_in_double(const Scalar& s);
// The type a value of dtype `in` is computed in on its way to dtype `out` (a copy, a conversion, a
// unary op): to bool, the input's own (a float is true when not 0, so 0.5 is true: through int64 it
// was truncated to 0 first); to another integer type, int64 (a float is truncated, then wrapped to
// the type, where a float stored straight into uint8 is undefined for -1); to a float, float64 when
// either is, else float32.
DType conversion_compute_dtype(DType in, DType out);
// The same for a copy (to(dtype), copy_): an integer stored as float16 or bfloat16 goes through
// int64, so that it is rounded once, where float32 would round it on the way.
DType cast_compute_dtype(DType in, DType out);
// op(x) without autograd: a new tensor of `out_dtype` laid out like x, computed in
// conversion_compute_dtype(x's dtype, out_dtype) (the forward of every unary op), or for
// UnaryOp::Copy (to(dtype)) in cast_compute_dtype.
Tensor unary_raw(const char* name, const Tensor& x, UnaryOp op, DType out_dtype, double a = 0, double b = 0);
// op(a, b) without autograd, broadcast, into a new tensor of `out_dtype` computed in `compute`
// (operands whose conversion to their result_type changes their values converted first, as
// PyTorch converts them: operand_in). Messages name `name`.
Tensor binary_raw(const char* name, const Tensor& a, const Tensor& b, BinaryOp op, DType out_dtype, DType compute,
                  double alpha = 1, double beta = 0);
// The same with a scalar operand `v` (scalar_operand), second or, with scalar_first, first.
Tensor binary_scalar_raw(const char* name, const Tensor& a, const Operand& v, BinaryOp op, DType out_dtype,
                         DType compute, bool scalar_first = false, double alpha = 1);
// `t` as an operand of a binary op beside `other`, both taken in `common` (result_type), as PyTorch
// converts every operand to the common dtype first: t itself where reading it in its own dtype
// gives the same, or t converted to `common` (without autograd: the op's node keeps t, and its
// gradient goes back in t's dtype) when t is 0-d beside a tensor with dims and of another dtype,
// or an int32/int64 tensor taken in float16 or bfloat16 (which hold integers exactly only to 2048
// and 256).
Tensor operand_in(const char* op, const Tensor& t, const Tensor& other, DType common);
// A fused backward kernel op(grad, saved) in grad's dtype (see BinaryOp's backward helpers).
Tensor backward_kernel(const Tensor& grad, const Tensor& saved, BinaryOp op, double alpha = 0, double beta = 0);
}  // namespace kiln::ops
