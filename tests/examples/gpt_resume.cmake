# CTest script: a short train_gpt run whole, and split at an iteration between two evaluations
# (the batches, dropout masks and evaluation batches all come from the restored generator); the
# metrics (timings left out), the final and the best model files must be identical byte for byte.
# Usage: cmake -DEXE=<train_gpt> -DDATA=<text file> -DWORK=<scratch dir> [-DEXTRA=<flag,value,...>]
#        [-DLAUNCH=<launcher,arg,...>] -P gpt_resume.cmake
# EXTRA adds flags to every run, comma-separated (e.g. --amp,fp16: the loss scaler must resume too);
# LAUNCH: resume_check.cmake.
foreach(var EXE DATA WORK)
  if(NOT ${var})
    message(FATAL_ERROR "gpt_resume: pass -D${var}=...")
  endif()
endforeach()

# Dropout on, so its masks must continue from the saved generator state too.
set(common --device cpu --data "${DATA}" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8
    --dropout 0.1 --max-iters 40 --warmup-iters 10 --eval-interval 20 --eval-iters 2 --sample-tokens 0 --seed 3)
if(EXTRA)
  string(REPLACE "," ";" extra "${EXTRA}")
  list(APPEND common ${extra})
endif()

include(${CMAKE_CURRENT_LIST_DIR}/resume_check.cmake)

# same_weights(DIR WHAT): DIR's final and best weights must be the whole run's, byte for byte.
function(same_weights dir what)
  foreach(f model.safetensors best.safetensors)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK}/whole/${f}" "${dir}/${f}"
                    RESULT_VARIABLE differ)
    if(differ)
      message(FATAL_ERROR "gpt_resume: ${f} of ${what} differs from the whole run's")
    endif()
  endforeach()
endfunction()

file(REMOVE_RECURSE "${WORK}")
resume_run(gpt_resume ${EXE} ${common} --out "${WORK}/whole")
resume_run(gpt_resume ${EXE} ${common} --out "${WORK}/split" --stop-at-iter 27)
resume_run(gpt_resume ${EXE} ${common} --out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors")
# Metrics at steps 0, 20 and 40; the final weights, and the best ones (the split run must carry the
# best loss so far across).
resume_compare(gpt_resume "${WORK}" eval tokens_per_s 3 2 model.safetensors best.safetensors)

# Resumed into another --out without --seed: the checkpoint's seed replaces the default (the batches
# and dropout masks depend on it), and the best weights come along from beside the checkpoint (the
# sample at the end is drawn from them). The final and best weights must still be the whole run's.
set(unseeded ${common})
list(REMOVE_ITEM unseeded --seed 3)
resume_run(gpt_resume ${EXE} ${common} --out "${WORK}/first" --stop-at-iter 27)
execute_process(COMMAND ${resume_launch} ${EXE} ${unseeded} --sample-tokens 5 --out "${WORK}/moved"
                        --resume "${WORK}/first/checkpoint.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
# The same settings (the seed comes from the checkpoint): no note of changed ones.
if(NOT rc EQUAL 0 OR out MATCHES "changes the checkpoint run's settings")
  message(FATAL_ERROR "gpt_resume: the resume into another folder gave exit ${rc}: ${out}${err}")
endif()
same_weights("${WORK}/moved" "the run resumed into another folder without --seed")
message("gpt_resume: resumed into another folder without --seed, the weights match the whole run's")
# A stop that the checkpoint has passed already is refused, not run to the end.
execute_process(COMMAND ${resume_launch} ${EXE} ${common} --out "${WORK}/late" --stop-at-iter 20
                        --resume "${WORK}/first/checkpoint.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--stop-at-iter 20 is not after the checkpoint's iteration 27")
  message(FATAL_ERROR "gpt_resume: a --stop-at-iter behind the checkpoint gave exit ${rc}: ${out}${err}")
endif()
# Another batch size would read other windows from the checkpoint's iteration on: refused.
execute_process(COMMAND ${resume_launch} ${EXE} ${common} --batch-size 4 --out "${WORK}/other_batch"
                        --resume "${WORK}/first/checkpoint.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "trained with --batch-size 8; got 4")
  message(FATAL_ERROR "gpt_resume: a resume with another --batch-size gave exit ${rc}: ${out}${err}")
endif()
# Settings that change the training's numbers continue, with a note naming each change (the
# default --min-lr follows --lr).
set(changed ${common})
list(REMOVE_ITEM changed --dropout 0.1)
execute_process(COMMAND ${resume_launch} ${EXE} ${changed} --dropout 0 --lr 0.002 --max-iters 28
                        --out "${WORK}/changed" --resume "${WORK}/first/checkpoint.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES
   "this run changes the checkpoint run's settings \\(dropout: 0.1 -> 0, lr: [^ ]+ -> 0.002, min_lr: ")
  message(FATAL_ERROR "gpt_resume: a resume with other --dropout and --lr gave exit ${rc}: ${out}${err}")
endif()
message("gpt_resume: a resume with other settings names them: continued")
# A run of zero iterations into a folder that holds another run's checkpoint replaces it with its
# own (iteration 0, beside its own best weights); resumed to the end it is the whole run.
resume_run(gpt_resume ${EXE} ${common} --max-iters 0 --out "${WORK}/first")
resume_run(gpt_resume ${EXE} ${common} --out "${WORK}/first" --resume "${WORK}/first/checkpoint.safetensors")
same_weights("${WORK}/first" "the run resumed from iteration 0")
message("gpt_resume: a zero-iteration run leaves its own checkpoint, and resuming it gives the whole run")
