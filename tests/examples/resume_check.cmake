# Shared by the resume CTest scripts (cnn_resume.cmake, gpt_resume.cmake): run an example, and
# compare a whole run with the same run split across resumes.

# -DLAUNCH=<launcher,arg,...> (optional) runs every run through a launcher: mpiexec,-n,2 with
# --ddp,--zero among the flags checks that ZeRO-1's sharded optimizer state is gathered into rank 0's
# checkpoint and that every rank resumes its shard from it.
set(resume_launch "")
if(LAUNCH)
  string(REPLACE "," ";" resume_launch "${LAUNCH}")
endif()

# resume_run(TAG EXE ARGS...): runs EXE with ARGS (through LAUNCH); a nonzero exit fails the test.
function(resume_run tag exe)
  execute_process(COMMAND ${resume_launch} ${exe} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${tag}: ${resume_launch} ${exe} ${ARGN} exited with ${rc}")
  endif()
endfunction()

# resume_compare(TAG WORK KIND TIMING_FIELD LINES RUNS FILES...): WORK/whole and WORK/split must
# have the same records of KIND ("epoch", "eval") in metrics.jsonl, each cut before TIMING_FIELD
# (the timings legitimately differ), LINES of them, and byte-identical FILES. The split run's file
# must hold one "run" record for each of its RUNS processes, and both files must end with the
# summary of a finished run.
function(resume_compare tag work kind timing_field lines runs)
  foreach(run whole split)
    file(STRINGS "${work}/${run}/metrics.jsonl" raw)
    set(kept "")
    set(run_records 0)
    foreach(line IN LISTS raw)
      if(line MATCHES "^{\"record\": \"${kind}\", ")
        string(REGEX REPLACE ", \"${timing_field}\".*" "" line "${line}")
        list(APPEND kept "${line}")
      elseif(line MATCHES "^{\"record\": \"run\", ")
        math(EXPR run_records "${run_records} + 1")
      endif()
    endforeach()
    list(GET raw -1 last)
    if(NOT last MATCHES "^{\"record\": \"summary\", \"finished\": true, ")
      message(FATAL_ERROR "${tag}: ${run}/metrics.jsonl does not end with a finished run's summary: ${last}")
    endif()
    set(${run} "${kept}")
    set(${run}_runs ${run_records})
  endforeach()
  list(LENGTH whole n)
  if(NOT n EQUAL lines)
    message(FATAL_ERROR "${tag}: expected ${lines} ${kind} records from the whole run, got ${n}: ${whole}")
  endif()
  if(NOT whole_runs EQUAL 1 OR NOT split_runs EQUAL runs)
    message(FATAL_ERROR "${tag}: expected 1 and ${runs} run records, got ${whole_runs} and ${split_runs}")
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
