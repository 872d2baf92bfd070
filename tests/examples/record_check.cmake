# CTest script: a short train_fashion_mnist run, recorded by tools/record_training.py into a copy of
# bench/TRAINING.md. The copy must gain one entry with the exact command and a numeric held-out
# accuracy, above the entries it already held; recording the same run again, or an unfinished run,
# must be refused with exit code 2.
# Usage: cmake -DEXE=<train_fashion_mnist> -DPYTHON=<python3> -DSCRIPT=<record_training.py>
#              -DTRAINING=<bench/TRAINING.md> -DWORK=<scratch dir> -P record_check.cmake
foreach(var EXE PYTHON SCRIPT TRAINING WORK)
  if(NOT ${var})
    message(FATAL_ERROR "record_check: pass -D${var}=...")
  endif()
endforeach()

function(run_expect code)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc STREQUAL code)
    message(FATAL_ERROR "record_check: '${ARGN}' exited with '${rc}', expected ${code}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
run_expect(0 ${EXE} --epochs 1 --train-limit 2000 --out "${WORK}/run")
file(COPY_FILE "${TRAINING}" "${WORK}/TRAINING.md")
file(READ "${WORK}/TRAINING.md" before)
run_expect(0 ${PYTHON} ${SCRIPT} "${WORK}/run" --training-md "${WORK}/TRAINING.md")
file(READ "${WORK}/TRAINING.md" after)

# The new entry comes first (its run is the newest) and says what ran, where, and what it reached.
string(REGEX MATCH "newest first -->\n\n<!-- record: train_fashion_mnist [^\n]*\n[^<]*" top "${after}")
string(REGEX MATCH "<!-- record: .*" entry "${top}")
if(NOT entry)
  message(FATAL_ERROR "record_check: no train_fashion_mnist entry at the top of the records:\n${after}")
endif()
foreach(re "- command: `train_fashion_mnist --epochs 1 --train-limit 2000 --out [^`]+`"
           "- result: held-out accuracy 0\\.[0-9][0-9][0-9][0-9] after 1 epochs on 10,000 test images"
           "- device: CPU: [^\n]+, [0-9]+ threads" "- kiln commit: `[0-9a-z._-]+`" "[0-9,]+ images/s while training"
           "- host: 1-minute load average [0-9.]+ at the start, [0-9.]+ at the end; the run used [0-9.]+ s of CPU")
  if(NOT entry MATCHES "${re}")
    message(FATAL_ERROR "record_check: the entry does not match '${re}':\n${entry}")
  endif()
endforeach()
# Everything the page held before is still there (blank lines aside).
string(REPLACE "${entry}" "" rest "${after}")
string(REGEX REPLACE "\n+" "\n" rest "${rest}")
string(REGEX REPLACE "\n+" "\n" old "${before}")
if(NOT rest STREQUAL old)
  message(FATAL_ERROR "record_check: the page changed beyond the new entry:\n${after}")
endif()

# The same run twice, and a run without its summary (cut short), are refused.
run_expect(2 ${PYTHON} ${SCRIPT} "${WORK}/run" --training-md "${WORK}/TRAINING.md")
file(STRINGS "${WORK}/run/metrics.jsonl" lines)
list(POP_BACK lines)
list(JOIN lines "\n" cut)
file(WRITE "${WORK}/cut.jsonl" "${cut}\n")
run_expect(2 ${PYTHON} ${SCRIPT} "${WORK}/cut.jsonl" --training-md "${WORK}/TRAINING.md")
message("record_check: the run was recorded:\n${entry}")
