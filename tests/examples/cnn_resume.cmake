# CTest script: train_cnn for 2 epochs in one run, and the same run split in three (stopped
# mid-epoch, resumed up to the epoch's end, resumed to the finish); the metrics (timings left out)
# and the final model files must be identical byte for byte. Splitting mid-epoch is what checks the
# restored data position, loss sum and generator state, not only the weights.
# Usage: cmake -DEXE=<train_cnn> -DWORK=<scratch dir> -P cnn_resume.cmake
foreach(var EXE WORK)
  if(NOT ${var})
    message(FATAL_ERROR "cnn_resume: pass -D${var}=...")
  endif()
endforeach()

# Small on purpose: 1,500 images in batches of 50 is 30 steps per epoch; 1,000 held-out images.
set(common --device cpu --model small-cnn --epochs 2 --train-limit 1500 --test-limit 1000 --batch-size 50 --seed 7)

function(run_cnn)
  execute_process(COMMAND ${EXE} ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cnn_resume: train_cnn ${ARGN} exited with ${rc}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
run_cnn(--out "${WORK}/whole")
run_cnn(--out "${WORK}/split" --stop-at-step 17)
run_cnn(--out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors" --stop-at-step 30)
run_cnn(--out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors")

# Each line without its timing fields (images_per_s, seconds), which legitimately differ.
function(read_metrics dir out_var)
  file(STRINGS "${dir}/metrics.jsonl" lines)
  set(kept "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE ", \"images_per_s\".*" "" line "${line}")
    list(APPEND kept "${line}")
  endforeach()
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

read_metrics("${WORK}/whole" whole)
read_metrics("${WORK}/split" split)
list(LENGTH whole n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "cnn_resume: expected 2 metrics lines from the whole run, got ${n}: ${whole}")
endif()
if(NOT "${whole}" STREQUAL "${split}")
  message(FATAL_ERROR "cnn_resume: metrics differ\n  whole: ${whole}\n  split: ${split}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK}/whole/model.safetensors"
                        "${WORK}/split/model.safetensors" RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "cnn_resume: the final models differ")
endif()
message("cnn_resume: the split run matches the whole run bit for bit: ${split}")
