# CTest script for the examples' flag policy: runs EXE with ARGS; the exit code must be exactly
# CODE (CLI11's own codes differ: 2 for every bad flag is kiln's policy) and STREAM ("stdout" or
# "stderr") must match REGEX (an error names its flag; --help shows a default value).
# Usage: cmake -DEXE=<program> "-DARGS=<a;b;...>" -DCODE=<n> -DSTREAM=<stdout|stderr> -DREGEX=<re>
#        [-DNO_TEMP_IN=<dir>] -P flag_check.cmake
# A process killed by a signal fails too: its result is the signal's name, never CODE.
# LAUNCHER=1: EXE is an MPI launcher whose exit code is its ranks'. Open MPI's mpiexec sometimes dies
# of a signal in its own shutdown after ending a job abnormally (tests/dist/fault_job.cmake); then
# the code it reported for the first rank that failed ("Exit code: CODE") counts.
foreach(var EXE CODE STREAM REGEX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "flag_check: pass -D${var}=...")
  endif()
endforeach()
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
get_filename_component(name "${EXE}" NAME)
if(LAUNCHER AND NOT rc MATCHES "^[0-9]+$" AND "${stdout}${stderr}" MATCHES "Exit code: +([0-9]+)")
  message("flag_check: ${name} itself ended with '${rc}' after reporting a rank's exit code ${CMAKE_MATCH_1}")
  set(rc "${CMAKE_MATCH_1}")
endif()
if(NOT rc STREQUAL CODE)
  message(FATAL_ERROR "flag_check: ${name} ${ARGS} exited with '${rc}', expected ${CODE}\n"
                      "stdout: ${stdout}\nstderr: ${stderr}")
endif()
if(NOT "${${STREAM}}" MATCHES "${REGEX}")
  message(FATAL_ERROR "flag_check: the ${STREAM} of ${name} ${ARGS} does not match '${REGEX}':\n${${STREAM}}")
endif()
# NO_TEMP_IN=<dir>: a run that failed while saving must not leave a temporary file behind.
if(DEFINED NO_TEMP_IN)
  file(GLOB leftovers "${NO_TEMP_IN}/*.tmp.*")
  if(leftovers)
    message(FATAL_ERROR "flag_check: ${name} ${ARGS} left temporary files: ${leftovers}")
  endif()
endif()
message("flag_check: ${name} ${ARGS}: exit ${rc}, ${STREAM} matches '${REGEX}'")
