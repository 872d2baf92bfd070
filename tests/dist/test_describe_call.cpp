// KILN_DIST_DEBUG's description of one rank's call (dist::detail::describe_call), checked without
// ranks: the words a rank of this build sends, and words from a build that knows other codes, which
// must be named, not thrown past (an unknown collective code was std::out_of_range, not the Error
// that lists every rank's call).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "core/kiln.h"
#include "dist/process_group.h"

using namespace kiln;
using Catch::Contains;

TEST_CASE("describe_call names each collective's fingerprint, and codes it does not know", "[dist]") {
  // {call count, collective code, dtype, numel, reduce op or root, algorithm, layout}
  const int64_t all_reduce[] = {3,
                                1,
                                static_cast<int64_t>(DType::Float32),
                                5,
                                static_cast<int64_t>(dist::ReduceOp::Max),
                                static_cast<int64_t>(dist::AllReduceAlgo::Ring),
                                0};
  CHECK(dist::detail::describe_call(all_reduce) == "collective 3 is all_reduce of 5 float32 elements, max, ring");
  const int64_t product[] = {4, 2, static_cast<int64_t>(DType::Bool), 8, static_cast<int64_t>(dist::ReduceOp::Product),
                             0, 0};
  CHECK(dist::detail::describe_call(product) == "collective 4 is reduce_scatter of 8 bool elements, product");
  const int64_t broadcast[] = {0, 4, static_cast<int64_t>(DType::Int64), 2, 1, 0, 0};
  CHECK(dist::detail::describe_call(broadcast) == "collective 0 is broadcast of 2 int64 elements from root 1");
  const int64_t barrier[] = {7, 0, 0, 0, 0, 0, 0};
  CHECK(dist::detail::describe_call(barrier) == "collective 7 is barrier");
  // Another build's codes: a collective past this build's list or negative, a dtype and an op
  // past the enums'.
  for (const int64_t code : {int64_t{5}, int64_t{99}, int64_t{-1}}) {
    const int64_t unknown[] = {2, code, 0, 4, 0, 0, 0};
    CHECK_THAT(dist::detail::describe_call(unknown),
               Contains("collective 2 has the unknown code " + std::to_string(code)));
  }
  const int64_t odd[] = {1, 1, 200, 4, 77, 7, 0};
  CHECK(dist::detail::describe_call(odd) == "collective 1 is all_reduce of 4 code 200 elements, code 77, code 7");
  const int64_t wraps[] = {1, 2, 261, 4, -1, 0, 0};  // 261 would wrap onto int64's code 5 as a uint8_t
  CHECK(dist::detail::describe_call(wraps) == "collective 1 is reduce_scatter of 4 code 261 elements, code -1");
  // A layout other than row-major: its dims outermost first (a channels-last NCHW tensor), or the
  // code of another build's.
  const Tensor channels_last = zeros({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  CHECK(dist::detail::layout_code(channels_last) == 0x1342);
  CHECK(dist::detail::layout_code(zeros({2, 3, 4, 5})) == 0);
  CHECK(dist::detail::layout_code(zeros({4, 1, 3}).transpose(0, 2)) == 0x31);  // a size-1 dim has no place
  CHECK(dist::detail::layout_code(zeros({1, 3, 1, 1}).contiguous(MemoryFormat::ChannelsLast)) == 0);
  const int64_t laid_out[] = {5, 1, static_cast<int64_t>(DType::Float32), 120, 0, 0, 0x1342};
  CHECK(dist::detail::describe_call(laid_out) ==
        "collective 5 is all_reduce of 120 float32 elements, sum, native, laid out with dims 0, 2, 3, 1 "
        "outermost first");
  const int64_t bad_layout[] = {5, 4, static_cast<int64_t>(DType::Float32), 120, 0, 0, 0x102};
  CHECK_THAT(dist::detail::describe_call(bad_layout), Contains("laid out with layout code 258"));
}
