# Fixture of the bad-run sweep (tests/examples/bad_runs.cmake): short real runs that leave good
# checkpoints, and the damaged and mismatched files the sweep hands to the examples.
# Usage: cmake -DGPT=<train_gpt> -DCNN=<train_cnn> -DDATA=<text> -DWORK=<dir> -P bad_runs_setup.cmake
foreach(var GPT CNN DATA WORK)
  if(NOT ${var})
    message(FATAL_ERROR "bad_runs_setup: pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "bad_runs_setup: ${ARGN} exited with '${rc}'\nstdout: ${out}\nstderr: ${err}")
  endif()
endfunction()

# A tiny GPT checkpoint, and a tiny CNN one (one epoch of 64 images).
set(gpt_tiny --device cpu --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --max-iters 20
    --warmup-iters 5 --eval-interval 10 --eval-iters 2 --sample-tokens 0)
run_ok(${GPT} ${gpt_tiny} --data "${DATA}" --out "${WORK}/gpt")
run_ok(${CNN} --device cpu --epochs 1 --train-limit 64 --test-limit 64 --batch-size 32 --out "${WORK}/cnn")

# Another text of the same length and alphabet (two characters swapped): only the fingerprint differs.
file(READ "${DATA}" text)
string(SUBSTRING "${text}" 0 20000 head)
file(WRITE "${WORK}/head.txt" "${head}")
string(REPLACE "e" "#" swapped "${head}")
string(REPLACE "a" "e" swapped "${swapped}")
string(REPLACE "#" "a" swapped "${swapped}")
file(WRITE "${WORK}/swapped.txt" "${swapped}")
run_ok(${GPT} ${gpt_tiny} --data "${WORK}/head.txt" --out "${WORK}/gpt_head")

# Damaged copies of the GPT checkpoint: one bit flipped in the last tensor's data, and the first
# half of the file (coreutils does the byte surgery: CMake cannot write arbitrary bytes).
set(ckpt "${WORK}/gpt/checkpoint.safetensors")
file(SIZE "${ckpt}" size)
math(EXPR at "${size} - 5")
file(READ "${ckpt}" byte OFFSET ${at} LIMIT 1 HEX)
# The flipped byte as a 3-digit octal escape: POSIX printf (dash's) knows \NNN, not \xNN.
math(EXPR flipped "0x${byte} ^ 1")
math(EXPR o1 "${flipped} / 64")
math(EXPR o2 "${flipped} / 8 % 8")
math(EXPR o3 "${flipped} % 8")
file(COPY_FILE "${ckpt}" "${WORK}/flipped.safetensors")
run_ok(sh -c "printf '\\${o1}${o2}${o3}' | dd of='${WORK}/flipped.safetensors' bs=1 seek=${at} conv=notrunc status=none")
math(EXPR half "${size} / 2")
run_ok(sh -c "head -c ${half} '${ckpt}' > '${WORK}/truncated.safetensors'")
file(WRITE "${WORK}/empty.txt" "")
file(WRITE "${WORK}/not_a_checkpoint.safetensors" "this is not a safetensors file")
file(WRITE "${WORK}/a_file" "")
# nanoGPT token files (uint16, no header) of 'aa' pairs (token 24929): 100 training tokens and a
# validation file of 10, too few for a block of 32.
string(REPEAT "a" 200 train_tokens)
file(WRITE "${WORK}/tokens/train.bin" "${train_tokens}")
file(WRITE "${WORK}/tokens/short_val.bin" "aaaaaaaaaaaaaaaaaaaa")
# What a save killed mid-way leaves: a temporary sibling named after a process that is gone (4194303
# is above Linux's largest pid, so no process has it).
file(WRITE "${WORK}/out_stale/checkpoint.safetensors.tmp.4194303.0" "half a checkpoint")
message("bad_runs_setup: fixtures in ${WORK}")
