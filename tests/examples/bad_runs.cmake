# The examples' bad-input sweep: command lines a user could type that are wrong, each with the exit
# code it must end with (2: bad input, 1: the run failed) and a fragment of its one-line message.
# Exit codes, not crashes: a signal (abort, segfault) or a hang (the test's timeout) fails a case,
# and so does exit 0. Included by tests/examples.cmake after kiln_flag_test; the cases that need
# files use the fixture bad_runs_setup.cmake makes (checkpoints, damaged copies, another text).
set(BAD "${KILN_EXAMPLE_RUNS}/bad_runs")
add_test(NAME example_bad_runs_setup
         COMMAND ${CMAKE_COMMAND} -DGPT=$<TARGET_FILE:train_gpt> -DCNN=$<TARGET_FILE:train_cnn>
                 -DDATA=${KILN_SHAKESPEARE} -DWORK=${BAD} -P ${CMAKE_CURRENT_SOURCE_DIR}/examples/bad_runs_setup.cmake)
set_tests_properties(example_bad_runs_setup PROPERTIES FIXTURES_SETUP bad_runs LABELS example TIMEOUT 300
                     ENVIRONMENT "KILN_NUM_THREADS=2")

# kiln_bad_run(NAME TARGET CODE REGEX ARGS...): like kiln_flag_test on stderr, with the fixture.
function(kiln_bad_run name target code regex)
  kiln_flag_test(${name} ${target} ${code} stderr "${regex}" ${ARGN})
  set_tests_properties(example_flags_${name} PROPERTIES FIXTURES_REQUIRED bad_runs ENVIRONMENT "KILN_NUM_THREADS=2")
endfunction()

# --- flags: values out of range, malformed, or contradicting each other (instant) ----------------
kiln_flag_test(cnn_epochs_zero train_cnn 2 stderr "--epochs.*'0'" --epochs 0)
kiln_flag_test(cnn_epochs_int_overflow train_cnn 2 stderr "--epochs.*'2147483648'" --epochs 2147483648)
kiln_flag_test(cnn_batch_size_zero train_cnn 2 stderr "--batch-size.*'0'" --batch-size 0)
kiln_flag_test(cnn_batch_size_negative train_cnn 2 stderr "--batch-size.*'-5'" --batch-size -5)
kiln_flag_test(cnn_batch_size_huge train_cnn 2 stderr "--batch-size.*'99999999999999999999'"
               --batch-size 99999999999999999999)
kiln_flag_test(cnn_batch_size_plus train_cnn 2 stderr "--batch-size.*'[+]8'" --batch-size +8)
kiln_flag_test(cnn_batch_size_empty train_cnn 2 stderr "--batch-size" --batch-size "")
kiln_flag_test(cnn_lr_zero train_cnn 2 stderr "--lr.*'0'" --lr 0)
kiln_flag_test(cnn_lr_inf train_cnn 2 stderr "--lr.*'inf'" --lr inf)
kiln_flag_test(cnn_lr_overflow train_cnn 2 stderr "--lr.*'1e400'" --lr 1e400)
kiln_flag_test(cnn_lr_nan train_cnn 2 stderr "--lr.*'nan'" --lr nan)
kiln_flag_test(cnn_lr_hex train_cnn 2 stderr "--lr.*'0x1p-3'" --lr 0x1p-3)
kiln_flag_test(cnn_lr_comma train_cnn 2 stderr "--lr.*'0,001'" --lr 0,001)
kiln_flag_test(cnn_weight_decay_nan train_cnn 2 stderr "--weight-decay.*'nan'" --weight-decay nan)
kiln_flag_test(cnn_min_accuracy_above_one train_cnn 2 stderr "--min-accuracy.*'1.5'" --min-accuracy 1.5)
kiln_flag_test(cnn_min_accuracy_negative train_cnn 2 stderr "--min-accuracy.*'-0.1'" --min-accuracy -0.1)
kiln_flag_test(cnn_test_limit_zero train_cnn 2 stderr "--test-limit.*'0'" --test-limit 0)
kiln_flag_test(cnn_train_limit_negative train_cnn 2 stderr "--train-limit.*'-3'" --train-limit -3)
kiln_flag_test(cnn_stop_at_step_zero train_cnn 2 stderr "--stop-at-step.*'0'" --stop-at-step 0)
kiln_flag_test(cnn_max_minutes_zero train_cnn 2 stderr "--max-minutes.*'0'" --max-minutes 0)
kiln_flag_test(cnn_max_minutes_negative train_cnn 2 stderr "--max-minutes.*'-1'" --max-minutes -1)
kiln_flag_test(cnn_seed_float train_cnn 2 stderr "--seed.*'1.5'" --seed 1.5)
kiln_flag_test(cnn_seed_overflow train_cnn 2 stderr "--seed.*'18446744073709551616'" --seed 18446744073709551616)
kiln_flag_test(cnn_model_empty train_cnn 2 stderr "--model" --model "")
kiln_flag_test(cnn_optimizer_unknown train_cnn 2 stderr "--optimizer.*adam" --optimizer adam)
kiln_flag_test(cnn_device_unknown train_cnn 2 stderr "--device.*gpu" --device gpu)
kiln_flag_test(cnn_augment_both train_cnn 2 stderr "--augment.*--no-augment|--no-augment.*--augment" --augment
               --no-augment)
kiln_flag_test(cnn_positional train_cnn 2 stderr "extra|positional|foo" foo)
kiln_flag_test(cnn_epochs_equals_twice train_cnn 2 stderr "--epochs.*'3=4'" --epochs=3=4)
kiln_flag_test(cnn_epochs_unicode_digit train_cnn 2 stderr "--epochs" --epochs "３")
kiln_flag_test(cnn_single_dash train_cnn 2 stderr "-epochs|epochs" -epochs 3)
kiln_flag_test(gpt_n_embd_not_multiple train_gpt 2 stderr "--n-embd 65 must be a multiple of --n-head 4" --device cpu
               --n-embd 65 --n-head 4)
kiln_flag_test(gpt_n_layer_zero train_gpt 2 stderr "--n-layer.*'0'" --n-layer 0)
kiln_flag_test(gpt_n_head_negative train_gpt 2 stderr "--n-head.*'-2'" --n-head -2)
kiln_flag_test(gpt_block_size_zero train_gpt 2 stderr "--block-size.*'0'" --block-size 0)
kiln_flag_test(gpt_batch_size_zero train_gpt 2 stderr "--batch-size.*'0'" --batch-size 0)
kiln_flag_test(gpt_eval_interval_zero train_gpt 2 stderr "--eval-interval.*'0'" --eval-interval 0)
kiln_flag_test(gpt_eval_iters_zero train_gpt 2 stderr "--eval-iters.*'0'" --eval-iters 0)
kiln_flag_test(gpt_max_iters_negative train_gpt 2 stderr "--max-iters.*'-1'" --max-iters -1)
kiln_flag_test(gpt_warmup_negative train_gpt 2 stderr "--warmup-iters.*'-1'" --warmup-iters -1)
kiln_flag_test(gpt_temperature_zero train_gpt 2 stderr "--temperature.*'0'" --temperature 0)
kiln_flag_test(gpt_temperature_inf train_gpt 2 stderr "--temperature.*'inf'" --temperature inf)
kiln_flag_test(gpt_top_k_float train_gpt 2 stderr "--top-k.*'2.5'" --top-k 2.5)
kiln_flag_test(gpt_top_p_zero train_gpt 2 stderr "--top-p.*'0'" --top-p 0)
kiln_flag_test(gpt_top_p_above_one train_gpt 2 stderr "--top-p.*'1.5'" --top-p 1.5)
kiln_flag_test(gpt_sample_tokens_negative train_gpt 2 stderr "--sample-tokens.*'-1'" --sample-tokens -1)
kiln_flag_test(gpt_beta2_one train_gpt 2 stderr "--beta2.*'1'" --beta2 1)
kiln_flag_test(gpt_beta2_negative train_gpt 2 stderr "--beta2.*'-0.5'" --beta2 -0.5)
kiln_flag_test(gpt_grad_clip_negative train_gpt 2 stderr "--grad-clip.*'-1'" --grad-clip -1)
kiln_flag_test(gpt_dropout_negative train_gpt 2 stderr "--dropout.*'-0.1'" --dropout -0.1)
kiln_flag_test(gpt_stop_at_iter_zero train_gpt 2 stderr "--stop-at-iter.*'0'" --stop-at-iter 0)
kiln_flag_test(gpt_stop_at_iter_past_end train_gpt 2 stderr
               "--stop-at-iter 30 is past the run's end [(]--max-iters 20[)]"
               --device cpu --max-iters 20 --stop-at-iter 30)
kiln_flag_test(gpt_max_val_loss_zero train_gpt 2 stderr "--max-val-loss.*'0'" --max-val-loss 0)
kiln_flag_test(gpt_min_lr_nan train_gpt 2 stderr "--min-lr.*'nan'" --min-lr nan)
kiln_flag_test(gpt_min_lr_above_lr train_gpt 2 stderr "--min-lr 0.01 is above the peak --lr 0.001" --lr 1e-3
               --min-lr 1e-2)
kiln_flag_test(gpt_min_lr_above_default_lr train_gpt 2 stderr "--min-lr 0.5 is above the peak --lr 0.004"
               --device cpu --min-lr 0.5)
kiln_flag_test(gpt_weight_decay_inf train_gpt 2 stderr "--weight-decay.*'inf'" --weight-decay inf)
kiln_flag_test(gpt_seed_negative train_gpt 2 stderr "--seed.*'-1'" --seed -1)
kiln_flag_test(gpt_value_missing_at_end train_gpt 2 stderr "--lr" --lr)
kiln_flag_test(fashion_mnist_batch_size_zero train_fashion_mnist 2 stderr "--batch-size.*'0'" --batch-size 0)
kiln_flag_test(fashion_mnist_lr_negative train_fashion_mnist 2 stderr "--lr.*'-1'" --lr -1)
kiln_flag_test(fashion_mnist_hidden_zero train_fashion_mnist 2 stderr "--hidden.*'0'" --hidden 0)
kiln_flag_test(fashion_mnist_epochs_overflow train_fashion_mnist 2 stderr "--epochs.*'4294967297'" --epochs 4294967297)
kiln_flag_test(fit_function_steps_zero fit_function 2 stderr "--steps.*'0'" --steps 0)
kiln_flag_test(fit_function_lr_inf fit_function 2 stderr "--lr.*'inf'" --lr inf)
kiln_flag_test(bench_cpu_gemm_reps_negative bench_cpu_gemm 2 stderr "--reps.*'-1'" --reps -1)

# --- files: missing, of the wrong kind, damaged --------------------------------------------------
set(gpt_tiny --device cpu --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --max-iters 20
    --warmup-iters 5 --eval-interval 10 --eval-iters 2 --sample-tokens 0)
set(cnn_tiny --device cpu --epochs 1 --train-limit 64 --test-limit 64 --batch-size 32)
kiln_bad_run(gpt_data_missing train_gpt 2 "cannot read --data ${BAD}/no_such_file" ${gpt_tiny}
             --data ${BAD}/no_such_file --out ${BAD}/out_data_missing)
kiln_bad_run(gpt_data_empty train_gpt 2 "too short for block size 32 [(]0 bytes[)]" ${gpt_tiny} --data ${BAD}/empty.txt
             --out ${BAD}/out_data_empty)
kiln_bad_run(gpt_data_folder train_gpt 2 "cannot read --data ${BAD}: it is a folder" ${gpt_tiny} --data ${BAD}
             --out ${BAD}/out_data_folder)
kiln_bad_run(gpt_block_larger_than_text train_gpt 2 "too short for block size 100000" --device cpu --block-size 100000
             --data ${BAD}/head.txt --out ${BAD}/out_block)
kiln_bad_run(gpt_prompt_not_in_vocabulary train_gpt 2 "--prompt: byte 0x7e is not in the vocabulary" ${gpt_tiny}
             --data ${BAD}/head.txt --prompt "~" --out ${BAD}/out_prompt)
kiln_bad_run(gpt_prompt_with_token_data train_gpt 2 "--prompt applies to text data" ${gpt_tiny} --data synthetic
             --prompt "hi" --out ${BAD}/out_prompt_tokens)
kiln_bad_run(gpt_val_data_short train_gpt 2
             "--val-data ${BAD}/tokens/short_val.bin: its validation split has 10 tokens, too few for block size 32"
             ${gpt_tiny} --data ${BAD}/tokens/train.bin --val-data ${BAD}/tokens/short_val.bin
             --out ${BAD}/out_val_short)
kiln_bad_run(gpt_out_is_a_file train_gpt 2 "--out ${BAD}/a_file" ${gpt_tiny} --data ${BAD}/head.txt --out ${BAD}/a_file)
kiln_bad_run(gpt_out_under_a_file train_gpt 2 "cannot create --out ${BAD}/a_file/sub" ${gpt_tiny}
             --data ${BAD}/head.txt --out ${BAD}/a_file/sub)
kiln_bad_run(gpt_resume_missing train_gpt 2 "no_such.safetensors: cannot open" ${gpt_tiny} --data ${KILN_SHAKESPEARE}
             --resume ${BAD}/no_such.safetensors --out ${BAD}/out_resume_missing)
kiln_bad_run(gpt_resume_folder train_gpt 2 "not a regular file" ${gpt_tiny} --data ${KILN_SHAKESPEARE}
             --resume ${BAD}/gpt --out ${BAD}/out_resume_folder)
kiln_bad_run(gpt_resume_not_safetensors train_gpt 2 "not_a_checkpoint.safetensors" ${gpt_tiny}
             --data ${KILN_SHAKESPEARE} --resume ${BAD}/not_a_checkpoint.safetensors --out ${BAD}/out_resume_garbage)
kiln_bad_run(gpt_resume_flipped_bit train_gpt 2 "does not match its checksum.*the file is corrupt" ${gpt_tiny}
             --data ${KILN_SHAKESPEARE} --resume ${BAD}/flipped.safetensors --out ${BAD}/out_resume_flipped)
kiln_bad_run(gpt_resume_truncated train_gpt 2 "truncated.safetensors: .*past|truncated.safetensors: .*cannot read"
             ${gpt_tiny} --data ${KILN_SHAKESPEARE} --resume ${BAD}/truncated.safetensors --out ${BAD}/out_resume_cut)
kiln_bad_run(gpt_resume_other_text train_gpt 2 "refers to other data than this run's.*text: checkpoint" ${gpt_tiny}
             --data ${BAD}/swapped.txt --resume ${BAD}/gpt_head/checkpoint.safetensors --out ${BAD}/out_resume_text)
kiln_bad_run(gpt_resume_other_shape train_gpt 2 "does not match this GPT.*shape or dtype mismatch" --device cpu
             --n-layer 1 --n-head 2 --n-embd 64 --block-size 32 --data ${KILN_SHAKESPEARE}
             --resume ${BAD}/gpt/checkpoint.safetensors --out ${BAD}/out_resume_shape)
kiln_bad_run(gpt_resume_cnn_checkpoint train_gpt 2 "checkpoint of a SmallCNN does not match this GPT" ${gpt_tiny}
             --data ${KILN_SHAKESPEARE} --resume ${BAD}/cnn/checkpoint.safetensors --out ${BAD}/out_resume_cnn)
kiln_bad_run(gpt_resume_model_file train_gpt 2 "not a kiln training checkpoint" ${gpt_tiny} --data ${KILN_SHAKESPEARE}
             --resume ${BAD}/gpt/model.safetensors --out ${BAD}/out_resume_model)
kiln_bad_run(cnn_resume_gpt_checkpoint train_cnn 2 "checkpoint of a GPT does not match this SmallCNN" ${cnn_tiny}
             --resume ${BAD}/gpt/checkpoint.safetensors --out ${BAD}/out_cnn_resume_gpt)
kiln_bad_run(cnn_resume_other_images train_cnn 2 "other data.*first 64 images.*this run .*first 96 images"
             --device cpu --epochs 1 --train-limit 96 --test-limit 64 --batch-size 32
             --resume ${BAD}/cnn/checkpoint.safetensors --out ${BAD}/out_cnn_resume_images)
kiln_bad_run(cnn_resume_other_batch train_cnn 2 "batch size 32 on 64 images; got 16 on 64" --device cpu --epochs 1
             --train-limit 64 --test-limit 64 --batch-size 16 --resume ${BAD}/cnn/checkpoint.safetensors
             --out ${BAD}/out_cnn_resume_batch)
kiln_bad_run(cnn_stop_at_step_past_end train_cnn 2 "--stop-at-step 5 is past the run's last step 2 [(]1 epochs of 2"
             ${cnn_tiny} --stop-at-step 5 --out ${BAD}/out_cnn_stop)
kiln_bad_run(cnn_data_missing train_cnn 2 "no_such_dir" ${cnn_tiny} --data ${BAD}/no_such_dir --out ${BAD}/out_cnn_data)
kiln_bad_run(cnn_data_is_text train_cnn 2 "${BAD}/gpt" ${cnn_tiny} --data ${BAD}/gpt --out ${BAD}/out_cnn_data_text)

# --- runs that go wrong: divergence, a full disk, absurd sizes ------------------------------------
# A learning rate of 1e6 sends AdamW's weights to infinity within a few steps: the run must stop
# with exit 1 and say so, not train NaN to the end.
kiln_bad_run(gpt_diverges train_gpt 1 "error: the loss is (nan|infinite) at .*training diverged" ${gpt_tiny} --lr 1e6
             --grad-clip 0 --data ${BAD}/head.txt --out ${BAD}/out_diverge)
# The largest rates diverge the same way (the warmup once overflowed them to an infinite rate,
# which set_lr refused mid-run).
kiln_bad_run(gpt_lr_near_double_max train_gpt 1 "error: the loss is (nan|infinite) at .*training diverged" ${gpt_tiny}
             --lr 1e308 --data ${BAD}/head.txt --out ${BAD}/out_lr_max)
kiln_bad_run(cnn_diverges train_cnn 1 "error: the loss is (nan|infinite) at .*training diverged" --device cpu
             --epochs 2 --train-limit 320 --test-limit 64 --batch-size 32 --optimizer sgd --lr 1e6
             --out ${BAD}/out_cnn_diverge)
# A model too large to allocate is an error (exit 1), not a segfault or an abort.
kiln_bad_run(gpt_n_embd_huge train_gpt 1 "error: " --device cpu --n-embd 4611686018427387904 --n-head 1
             --data ${BAD}/head.txt --out ${BAD}/out_huge)
kiln_bad_run(gpt_n_layer_huge_memory train_gpt 1 "error: .*(memory|allocate)" --device cpu --n-embd 1048576 --n-head 1
             --n-layer 1 --block-size 8 --data ${BAD}/head.txt --out ${BAD}/out_huge_mem)
# A file size limit stands in for a full disk: the first save fails (exit 1) and leaves no
# temporary file. SIGXFSZ is ignored, as a real full disk raises no signal.
# (The shell line's semicolons stay escaped through two list expansions: ARGS here, then in flag_check.)
add_test(NAME example_flags_gpt_disk_full
         COMMAND ${CMAKE_COMMAND} -DEXE=sh
                 "-DARGS=-c;trap '' XFSZ\; ulimit -f 64\; exec \"$0\" \"$@\";$<TARGET_FILE:train_gpt>;${gpt_tiny};--data;${BAD}/head.txt;--out;${BAD}/out_disk_full"
                 -DCODE=1 -DSTREAM=stderr "-DREGEX=error: .*write failed: File too large" -DNO_TEMP_IN=${BAD}/out_disk_full
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/examples/flag_check.cmake)
set_tests_properties(example_flags_gpt_disk_full PROPERTIES LABELS example TIMEOUT 60 FIXTURES_REQUIRED bad_runs
                     ENVIRONMENT "KILN_NUM_THREADS=2")

# --- edge cases that must work ---------------------------------------------------------------------
# A one-image training set (once, a one-element permutation became a 0-d tensor and crashed).
kiln_flag_test(cnn_one_image train_cnn 0 stdout "held-out [(]t10k[)] accuracy" --device cpu --epochs 1 --train-limit 1
               --test-limit 1 --batch-size 1 --out ${BAD}/out_one_image)
set_tests_properties(example_flags_cnn_one_image PROPERTIES FIXTURES_REQUIRED bad_runs ENVIRONMENT "KILN_NUM_THREADS=2")
# A temporary file left by a process killed mid-save (the fixture plants one) is removed at start.
kiln_flag_test(gpt_stale_temp_removed train_gpt 0 stdout "removed .*checkpoint.safetensors.tmp.4194303.0" ${gpt_tiny}
               --data ${BAD}/head.txt --out ${BAD}/out_stale)
set_tests_properties(example_flags_gpt_stale_temp_removed PROPERTIES FIXTURES_REQUIRED bad_runs
                     ENVIRONMENT "KILN_NUM_THREADS=2")
