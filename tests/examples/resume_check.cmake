# Shared by the resume CTest scripts (cnn_resume.cmake, gpt_resume.cmake): run an example, and
# compare a whole run with the same run split across resumes.

# resume_run(TAG EXE ARGS...): runs EXE with ARGS; a nonzero exit fails the test.
function(resume_run tag exe)
  execute_process(COMMAND ${exe} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${tag}: ${exe} ${ARGN} exited with ${rc}")
  endif()
endfunction()

# resume_compare(TAG WORK TIMING_FIELD LINES FILES...): WORK/whole and WORK/split must have the same
# metrics.jsonl, each line cut before TIMING_FIELD (the timings legitimately differ), LINES of
# them, and byte-identical FILES.
function(resume_compare tag work timing_field lines)
  foreach(run whole split)
    file(STRINGS "${work}/${run}/metrics.jsonl" raw)
    set(kept "")
    foreach(line IN LISTS raw)
      string(REGEX REPLACE ", \"${timing_field}\".*" "" line "${line}")
      list(APPEND kept "${line}")
    endforeach()
    set(${run} "${kept}")
  endforeach()
  list(LENGTH whole n)
  if(NOT n EQUAL lines)
    message(FATAL_ERROR "${tag}: expected ${lines} metrics lines from the whole run, got ${n}: ${whole}")
  endif()
  if(NOT "${whole}" STREQUAL "${split}")
    message(FATAL_ERROR "${tag}: metrics differ\n  whole: ${whole}\n  split: ${split}")
  endif()
  foreach(f IN LISTS ARGN)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${work}/whole/${f}" "${work}/split/${f}"
                    RESULT_VARIABLE differ)
    if(NOT differ EQUAL 0)
      message(FATAL_ERROR "${tag}: ${f} differs between the whole and the split run")
    endif()
  endforeach()
  message("${tag}: the split run matches the whole run bit for bit: ${split}")
endfunction()
