# CTest script: a short train_gpt run whole, and split at an iteration between two evaluations
# (the batches, dropout masks and evaluation batches all come from the restored generator); the
# metrics (timings left out), the final and the best model files must be identical byte for byte.
# Usage: cmake -DEXE=<train_gpt> -DDATA=<text file> -DWORK=<scratch dir> -P gpt_resume.cmake
foreach(var EXE DATA WORK)
  if(NOT ${var})
    message(FATAL_ERROR "gpt_resume: pass -D${var}=...")
  endif()
endforeach()

# Dropout on, so its masks must continue from the saved generator state too.
set(common --device cpu --data "${DATA}" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8
    --dropout 0.1 --max-iters 40 --warmup-iters 10 --eval-interval 20 --eval-iters 2 --sample-tokens 0 --seed 3)

function(run_gpt)
  execute_process(COMMAND ${EXE} ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt_resume: train_gpt ${ARGN} exited with ${rc}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
run_gpt(--out "${WORK}/whole")
run_gpt(--out "${WORK}/split" --stop-at-iter 27)
run_gpt(--out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors")

# Each line without its timing fields (tokens_per_s, seconds), which legitimately differ.
function(read_metrics dir out_var)
  file(STRINGS "${dir}/metrics.jsonl" lines)
  set(kept "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE ", \"tokens_per_s\".*" "" line "${line}")
    list(APPEND kept "${line}")
  endforeach()
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

read_metrics("${WORK}/whole" whole)
read_metrics("${WORK}/split" split)
list(LENGTH whole n)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "gpt_resume: expected 3 metrics lines (steps 0, 20, 40), got ${n}: ${whole}")
endif()
if(NOT "${whole}" STREQUAL "${split}")
  message(FATAL_ERROR "gpt_resume: metrics differ\n  whole: ${whole}\n  split: ${split}")
endif()
# The final weights, and the best ones (the split run must carry the best loss so far across).
foreach(file model.safetensors best.safetensors)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK}/whole/${file}" "${WORK}/split/${file}"
                  RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "gpt_resume: ${file} differs between the whole and the split run")
  endif()
endforeach()
message("gpt_resume: the split run matches the whole run bit for bit: ${split}")
