// Scalars and type promotion, as PyTorch promotes: between tensors, the wider type of the higher
// category (bool < integer < floating) wins, float16 with bfloat16 gives float32; a C++ scalar
// behaves like a Python number and only raises the category (bf16 * 0.5 stays bf16, int32 * 0.5
// becomes float32, int32 + 2 stays int32); a 0-d tensor beside a tensor with dims only raises the
// category too, but with its own dtype (float16 [n] times a float32 0-d tensor stays float16, int32
// [n] times a float64 0-d tensor is float64).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : kind_(Kind::Int), i_(0) {}
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit so that ops take plain numbers
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::Bool;
      i_ = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::Int;
      if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
        // Above int64's range it would wrap to a negative number; refused, as PyTorch does.
        if (v > static_cast<T>(INT64_MAX)) throw_past_int64(static_cast<uint64_t>(v));
      }
      i_ = static_cast<int64_t>(v);
    } else {
      kind_ = Kind::Float;
      d_ = static_cast<double>(v);
    }
  }
  Scalar(Half h) : kind_(Kind::Float), d_(static_cast<float>(h)) {}      // NOLINT
  Scalar(BFloat16 h) : kind_(Kind::Float), d_(static_cast<float>(h)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  // A float truncates toward zero, saturating at int64's ends (NaN gives 0): every value converts.
  int64_t to_int() const;
  // The dtype a tensor made from this scalar alone gets: bool, int64 or float32.
  DType default_dtype() const;
  std::string str() const;

 private:
  [[noreturn]] static void throw_past_int64(uint64_t v);  // a kiln::Error naming the value
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

// The dtype of the result of a binary op on tensors of dtypes a and b.
DType promote_types(DType a, DType b);
// The dtype of the result of a binary op on a tensor of dtype t and a scalar.
DType promote_with_scalar(DType t, const Scalar& s);
// The dtype of the result of a binary op on a tensor with dims, of dtype `dims`, and a 0-d tensor of
// dtype `zero`: `dims` unless `zero` is of a higher category, then the two promoted.
DType promote_with_zero_dim(DType dims, DType zero);

// Default float dtype of factories and of integer ops that produce floats (mean, div, exp).
inline constexpr DType kDefaultFloat = DType::Float32;

}  // namespace kiln
