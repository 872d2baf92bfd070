# CTest script: train_cnn for 2 epochs in one run, and the same run split in three (stopped
# mid-epoch, resumed up to the epoch's end, resumed to the finish); the metrics (timings left out)
# and the final model files must be identical byte for byte. Splitting mid-epoch is what checks the
# restored data position, loss sum and generator state, not only the weights.
# Usage: cmake -DEXE=<train_cnn> -DWORK=<scratch dir> [-DMODEL=resnet] [-DEXTRA=<flag,value,...>]
#        [-DLAUNCH=<launcher,arg,...>] -P cnn_resume.cmake
# EXTRA adds flags to every run, comma-separated (e.g. --amp,fp16: the loss scaler must resume too);
# WHOLE_EXTRA to the uninterrupted run only and SPLIT_EXTRA to the split runs only (e.g. different
# --workers: the batches must not depend on them); LAUNCH: resume_check.cmake.
foreach(var EXE WORK)
  if(NOT ${var})
    message(FATAL_ERROR "cnn_resume: pass -D${var}=...")
  endif()
endforeach()

# Small on purpose: 1,500 images in batches of 50 is 30 steps per epoch; 1,000 held-out images.
if(NOT MODEL)
  set(MODEL small-cnn)
endif()
set(common --device cpu --model ${MODEL} --epochs 2 --train-limit 1500 --test-limit 1000 --batch-size 50 --seed 7)
if(EXTRA)
  string(REPLACE "," ";" extra "${EXTRA}")
  list(APPEND common ${extra})
endif()

set(whole_extra "")
set(split_extra "")
if(WHOLE_EXTRA)
  string(REPLACE "," ";" whole_extra "${WHOLE_EXTRA}")
endif()
if(SPLIT_EXTRA)
  string(REPLACE "," ";" split_extra "${SPLIT_EXTRA}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/resume_check.cmake)

file(REMOVE_RECURSE "${WORK}")
resume_run(cnn_resume ${EXE} ${common} ${whole_extra} --out "${WORK}/whole")
resume_run(cnn_resume ${EXE} ${common} ${split_extra} --out "${WORK}/split" --stop-at-step 17)
# Stopped before its first evaluation: the summary has no test accuracy to give (null, not -1).
file(STRINGS "${WORK}/split/metrics.jsonl" stopped REGEX "^{\"record\": \"summary\", \"finished\": false, ")
if(NOT stopped MATCHES "\"final_test_accuracy\": null, " OR stopped MATCHES "best_test_accuracy")
  message(FATAL_ERROR "cnn_resume: the summary of a run stopped in its first epoch: ${stopped}")
endif()
resume_run(cnn_resume ${EXE} ${common} ${split_extra} --out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors"
           --stop-at-step 30)
resume_run(cnn_resume ${EXE} ${common} ${split_extra} --out "${WORK}/split" --resume "${WORK}/split/checkpoint.safetensors")
resume_compare(cnn_resume "${WORK}" epoch images_per_s 2 3 model.safetensors)
