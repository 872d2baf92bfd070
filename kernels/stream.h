// The stream type every kernel entry point takes: an opaque CUDA stream handle, so that
// kernel headers need no CUDA header. CPU kernels ignore it (nullptr).
#pragma once

struct CUstream_st;

namespace kiln {
using Stream = CUstream_st*;
}
