# kiln's package test (cmake -P; registered in tests/CMakeLists.txt): installs this build into a
# prefix, then builds and runs the consumer program next to this file against it with find_package,
# and again with kiln's sources as its subdirectory. The subdirectory build lives beside the kiln
# build folder (SUBDIR_BUILD), at the same depth, so ccache's relative paths match and it reuses
# kiln's compiled objects instead of compiling every source a second time.
foreach(var KILN_SOURCE_DIR KILN_BUILD_DIR WORK SUBDIR_BUILD GENERATOR CXX_COMPILER BUILD_TYPE WITH_CUDA)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "package: pass -D${var}=...")
  endif()
endforeach()
if(WITH_CUDA)
  set(expect_cuda 1)
else()
  set(expect_cuda 0)
endif()

# Runs a command and fails the test, with its output, when it fails.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package: ${what} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Builds the consumer in `dir` with the extra configure arguments, runs it and checks what it says.
function(build_and_run_consumer dir)
  set(configure ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/package -B ${dir} -G ${GENERATOR}
                -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
  if(CXX_LAUNCHER)
    list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER})
  endif()
  run_step("configuring ${dir}" ${configure} ${ARGN})
  run_step("building ${dir}" ${CMAKE_COMMAND} --build ${dir})
  run_step("running ${dir}/consumer" ${dir}/consumer)
  message(STATUS "${step_output}")
  if(NOT step_output MATCHES "cuda: ${expect_cuda}, .*, ok")
    message(FATAL_ERROR "package: ${dir}/consumer did not report cuda: ${expect_cuda} and ok")
  endif()
endfunction()

# --- (a) installed: find_package(kiln 0.1) ---------------------------------------------------------
string(TIMESTAMP t0 "%s")
file(REMOVE_RECURSE ${WORK})
run_step("installing ${KILN_BUILD_DIR}" ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${WORK}/staged)
# Moved after installing: the package must not remember where it was put.
file(RENAME ${WORK}/staged ${WORK}/prefix)
set(prefix ${WORK}/prefix)
foreach(file include/core/tensor.h include/core/ops/matmul.h include/nn/layers.h include/nn/optim/adamw.h
             include/data/idx.h include/kernels/half.h lib/cmake/kiln/kilnConfig.cmake
             lib/cmake/kiln/kilnConfigVersion.cmake lib/cmake/kiln/kilnTargets.cmake
             lib/libkiln_kernels.so lib/libkiln_core.so lib/libkiln_nn.so lib/libkiln_data.so)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "package: the install lacks ${file}")
  endif()
endforeach()
file(GLOB_RECURSE private_files RELATIVE ${prefix} ${prefix}/include/*.cpp ${prefix}/include/*.cu ${prefix}/include/*.cuh)
if(private_files)
  message(FATAL_ERROR "package: sources installed as headers: ${private_files}")
endif()
file(GLOB package_files ${prefix}/lib/cmake/kiln/*.cmake)
foreach(file ${package_files})
  file(READ ${file} text)
  foreach(path ${KILN_SOURCE_DIR} ${KILN_BUILD_DIR} ${WORK}/staged)
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "package: ${file} names ${path}")
    endif()
  endforeach()
endforeach()
build_and_run_consumer(${WORK}/find-package -DCMAKE_PREFIX_PATH=${prefix})
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
message(STATUS "package: install and find_package build: ${seconds} s")

# --- (b) add_subdirectory(kiln) --------------------------------------------------------------------
set(subdir_args -DKILN_SOURCE_DIR=${KILN_SOURCE_DIR})
if(WITH_CUDA)
  if(NOT CUDA_LAUNCHER)
    # Without a compiler cache every CUDA kernel would compile again: many minutes on two cores.
    message(STATUS "package: no compiler cache; the add_subdirectory build with CUDA is skipped")
    return()
  endif()
  # The architecture list holds semicolons, which a command line here would split: an initial cache.
  string(REPLACE "," ";" archs "${CUDA_ARCHITECTURES}")
  file(WRITE ${WORK}/cuda-cache.cmake "set(KILN_CUDA_ARCHITECTURES \"${archs}\" CACHE STRING \"\")\n")
  list(APPEND subdir_args -DKILN_CUDA=ON -C ${WORK}/cuda-cache.cmake -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
       -DCMAKE_CUDA_COMPILER_LAUNCHER=${CUDA_LAUNCHER})
else()
  list(APPEND subdir_args -DKILN_CUDA=OFF)
endif()
file(REMOVE_RECURSE ${SUBDIR_BUILD})
build_and_run_consumer(${SUBDIR_BUILD} ${subdir_args})
string(TIMESTAMP t2 "%s")
math(EXPR seconds "${t2} - ${t1}")
message(STATUS "package: add_subdirectory build: ${seconds} s")
