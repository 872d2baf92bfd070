# Example programs run end to end in short CPU configurations; each fails when it misses its
# target (accuracy, loss, bit-exact resume). Included by tests/CMakeLists.txt. Outputs go under
# <build>/tests/example_runs; the examples use two threads, as CI's two cores.
set(KILN_EXAMPLE_RUNS "${CMAKE_CURRENT_BINARY_DIR}/example_runs")
file(MAKE_DIRECTORY "${KILN_EXAMPLE_RUNS}")
set(KILN_SHAKESPEARE "${PROJECT_SOURCE_DIR}/../shared/data/tinyshakespeare/input.txt")

# One epoch of SmallCNN over the first 10,000 training images (313 steps of 32) must reach 0.80
# on all 10,000 held-out images; train_cnn also fails when the loss did not fall.
add_test(NAME example_train_cnn
         COMMAND train_cnn --device cpu --model small-cnn --epochs 1 --train-limit 10000 --batch-size 32
                 --min-accuracy 0.80 --out "${KILN_EXAMPLE_RUNS}/train_cnn")

# Two epochs in one run against the same run split mid-epoch and at the epoch's end: identical
# metrics and a byte-identical final model.
add_test(NAME example_train_cnn_resume
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:train_cnn> -DWORK=${KILN_EXAMPLE_RUNS}/train_cnn_resume
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/examples/cnn_resume.cmake)

# The tiny CPU GPT on tiny Shakespeare must bring the validation loss below 2.2 (from ln 65 = 4.17).
add_test(NAME example_train_gpt
         COMMAND train_gpt --device cpu --data "${KILN_SHAKESPEARE}" --max-iters 600 --lr 6e-3 --eval-interval 300
                 --eval-iters 20 --sample-tokens 200 --max-val-loss 2.2 --out "${KILN_EXAMPLE_RUNS}/train_gpt")

# A GPT run split at an iteration between evaluations matches the whole run bit for bit.
add_test(NAME example_train_gpt_resume
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:train_gpt> -DDATA=${KILN_SHAKESPEARE}
                 -DWORK=${KILN_EXAMPLE_RUNS}/train_gpt_resume -P ${CMAKE_CURRENT_SOURCE_DIR}/examples/gpt_resume.cmake)

set_tests_properties(example_train_cnn example_train_cnn_resume example_train_gpt example_train_gpt_resume
                     PROPERTIES ENVIRONMENT "KILN_NUM_THREADS=2" LABELS example TIMEOUT 600)
