# Checks what lets a CPU build and a CUDA build of kiln share their compiled C++ through the compiler
# cache (docs/architecture.md section 8). Run by CTest.
#  1. Only the sources that CMake tells that CUDA is on (kiln_cuda_sources, twins.cpp) test for it:
#     any other source or header that tests KILN_WITH_CUDA would compile differently in the two builds
#     or, as the definition never reaches it, silently take the CPU branch in a CUDA build.
#  2. kernels/twins.cpp includes every header that declares a KILN_KERNEL, so every pair of twins is
#     defined there.
cmake_minimum_required(VERSION 3.25)  # script mode: the policies of this version (IN_LIST)
if(NOT KILN_ROOT)
  message(FATAL_ERROR "backend_neutral: pass -DKILN_ROOT=<repository root>")
endif()
set(told_sources kernels/twins.cpp core/cuda/runtime.cpp core/cuda/graph.cpp core/profiler.cpp)
set(problems "")
set(checked 0)
foreach(folder kernels core nn data dist examples bench tests fuzz)
  file(GLOB_RECURSE sources RELATIVE "${KILN_ROOT}" "${KILN_ROOT}/${folder}/*.h" "${KILN_ROOT}/${folder}/*.cpp"
       "${KILN_ROOT}/${folder}/*.cu" "${KILN_ROOT}/${folder}/*.cuh")
  foreach(src ${sources})
    math(EXPR checked "${checked} + 1")
    file(STRINGS "${KILN_ROOT}/${src}" tests REGEX "^[ \t]*#[ \t]*(if|ifdef|ifndef|elif).*KILN_WITH_CUDA")
    if(tests AND NOT src IN_LIST told_sources)
      list(GET tests 0 first)
      set(fix "use kiln::kBuiltWithCuda, or add the source to kiln_cuda_sources and to told_sources here")
      list(APPEND problems "${src} tests KILN_WITH_CUDA (${first}): ${fix}")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "backend_neutral: no source files found under ${KILN_ROOT}")
endif()

file(STRINGS "${KILN_ROOT}/kernels/twins.cpp" twin_includes REGEX "^#include \"kernels/[^\"]+\\.h\"")
file(GLOB_RECURSE kernel_headers RELATIVE "${KILN_ROOT}" "${KILN_ROOT}/kernels/*.h")
set(declaring 0)
foreach(header ${kernel_headers})
  file(STRINGS "${KILN_ROOT}/${header}" declarations REGEX "^[ \t]*KILN_KERNEL\\([a-z0-9_]+\\);")
  if(declarations)
    math(EXPR declaring "${declaring} + 1")
    if(NOT "#include \"${header}\"" IN_LIST twin_includes)
      list(APPEND problems "${header} declares KILN_KERNELs but kernels/twins.cpp does not include it")
    endif()
  endif()
endforeach()
if(declaring EQUAL 0)
  message(FATAL_ERROR "backend_neutral: no header under kernels/ declares a KILN_KERNEL")
endif()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "backend_neutral:\n  ${text}")
endif()
message(STATUS "backend_neutral: ${checked} files checked; ${declaring} kernel headers, all in kernels/twins.cpp")
