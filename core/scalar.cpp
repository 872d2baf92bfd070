// Type promotion tables.
#include "core/scalar.h"

#include <cmath>
#include <sstream>

#include "kernels/error.h"

namespace kiln {
namespace {

int category(DType t) {
  if (t == DType::Bool) return 0;
  if (is_integral(t, false)) return 1;
  return 2;
}

}  // namespace

DType Scalar::default_dtype() const {
  switch (kind_) {
    case Kind::Bool: return DType::Bool;
    case Kind::Int: return DType::Int64;
    case Kind::Float: return kDefaultFloat;
  }
  return kDefaultFloat;
}

void Scalar::throw_past_int64(uint64_t v) {
  throw Error("Scalar: the unsigned integer " + std::to_string(v) +
              " is past int64's range (at most 9223372036854775807); pass it as a double to round it");
}

int64_t Scalar::to_int() const {
  if (kind_ != Kind::Float) return i_;
  return detail::float_to_integer<int64_t>(d_);  // NaN 0, held to int64's range, as the kernels convert
}

std::string Scalar::str() const {
  std::ostringstream os;
  if (kind_ == Kind::Bool) {
    os << (i_ ? "true" : "false");
  } else if (kind_ == Kind::Int) {
    os << i_;
  } else {
    os << d_;
  }
  return os.str();
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
    if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
    return DType::Float32;  // float16 with bfloat16
  }
  // integers: uint8 with a signed type gives the wider signed type (int16 does not exist here)
  if (a == DType::Int64 || b == DType::Int64) return DType::Int64;
  if (a == DType::Int32 || b == DType::Int32) return DType::Int32;
  return DType::UInt8;
}

DType promote_with_zero_dim(DType dims, DType zero) {
  return category(zero) <= category(dims) ? dims : promote_types(dims, zero);
}

DType promote_with_scalar(DType t, const Scalar& s) {
  int ct = category(t);
  int cs = s.kind() == Scalar::Kind::Bool ? 0 : (s.kind() == Scalar::Kind::Int ? 1 : 2);
  if (cs <= ct) return t;
  return s.default_dtype();
}

}  // namespace kiln
