# CLI tests of `pagedattn explain --assume-device` and of the `bench --config / --matrix` flags,
# and the unit tests of the bench's output check (tests/bench/)
# (issue 21 item 6), included from tests/CMakeLists.txt inside if(TARGET pagedattn_cli). They
# need no GPU: explain answers for the preset device in any build (a CPU-only one included),
# and bench's usage errors and --list come before any device is queried.

# The W1 decode (32/8 heads, head 128, bf16, block 16, 64 x 4096) on an assumed H200 takes the
# decode fast path, and the output says that the device is assumed.
string(REPEAT "4096," 63 PAGEDATTN_W1_LENS)
string(APPEND PAGEDATTN_W1_LENS "4096")
add_test(NAME cli_explain_assume_h200_w1_takes_the_decode_fast_path
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --block-size 16 --seq-lens $1 2>&1); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^device *cuda:0 assumed: NVIDIA H200 (assumed): 132 SMs, compute capability 9.0, 232448 bytes' &&
                 echo \"$out\" | grep -q '^kernel *cuda_decode_mma_splitkv$' &&
                 echo \"$out\" | grep -q 'reason *decode fast path' &&
                 echo \"$out\" | grep -q 'workspace *not computed' &&
                 ! echo \"$out\" | grep -q 'using the CPU'"
          $<TARGET_FILE:pagedattn_cli> ${PAGEDATTN_W1_LENS})
# The same in JSON: the decision, the preset, and no workspace.
add_test(NAME cli_explain_assume_h200_json
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens $1 --json); r=$?; echo \"$out\";
                 test $r -eq 0 &&
                 echo \"$out\" | grep -q '\"kernel\": \"cuda_decode_mma_splitkv\"' &&
                 echo \"$out\" | grep -q '\"preset\": \"h200\"' &&
                 echo \"$out\" | grep -q '\"sms\": 132' &&
                 echo \"$out\" | grep -q '\"workspace_bytes\": null'"
          $<TARGET_FILE:pagedattn_cli> ${PAGEDATTN_W1_LENS})
# An all-decode batch on the decode fast path: row_kernels names that kernel for the decode
# rows while decode_rows_fast_path (a mixed-batch plan's flag) is false, and explain --help says
# which key answers what runs the decode rows.
add_test(NAME cli_explain_json_says_which_kernel_runs_the_decode_rows
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens 4096,4096 --json); r=$?; echo \"$out\";
                 test $r -eq 0 &&
                 echo \"$out\" | grep -q '\"kernel\": \"cuda_decode_mma_splitkv\"' &&
                 echo \"$out\" | grep -q '\"decode\": \"cuda_decode_mma_splitkv\"' &&
                 echo \"$out\" | grep -q '\"decode_rows_fast_path\": false' &&
                 help=$(\"$0\" explain --help | tr -s ' \\n' '  '); r=$?; echo \"$help\";
                 test $r -eq 0 &&
                 echo \"$help\" | grep -q 'row_kernels. names the kernel that runs each kind of row' &&
                 echo \"$help\" | grep -q 'they are false when .kernel. is itself cuda_decode_mma_splitkv'"
          $<TARGET_FILE:pagedattn_cli>)
# A forced tile moves the same problem to the tiled kernel: the answer follows the flags.
add_test(NAME cli_explain_assume_h200_forced_tile_is_tiled
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens 4096,4096 --tile-tokens 32); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^kernel *cuda_tiled_online_softmax$'"
          $<TARGET_FILE:pagedattn_cli>)
# A mixed batch (decode rows + a prefill chunk) is planned on the tiled kernel, but its rows run
# on the decode fast path and the Hopper prefill kernel: the top line says what runs, the JSON
# keeps "kernel" (the plan's) and adds row_kernels / runs. A pure prefill batch names only its
# prefill rows.
add_test(NAME cli_explain_mixed_batch_top_line_says_what_runs
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens 4096,4096,2048 --query-lens 1,1,512); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^kernel *decode rows: cuda_decode_mma_splitkv; prefill rows: cuda_prefill_wgmma_ws (one call, planned as cuda_tiled_online_softmax' &&
                 echo \"$out\" | grep -q '^  decode rows *cuda_decode_mma_splitkv$' &&
                 out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens 4096,4096,2048 --query-lens 1,1,512 --json); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '\"kernel\": \"cuda_tiled_online_softmax\"' &&
                 echo \"$out\" | grep -q '\"decode\": \"cuda_decode_mma_splitkv\"' &&
                 echo \"$out\" | grep -q '\"prefill\": \"cuda_prefill_wgmma_ws\"' &&
                 echo \"$out\" | grep -q '\"runs\": \"decode rows: cuda_decode_mma_splitkv; prefill rows: cuda_prefill_wgmma_ws\"' &&
                 out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 128 --dtype bf16 --seq-lens 4096,2048 --query-lens 512,512); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^kernel *prefill rows: cuda_prefill_wgmma_ws (one call' &&
                 ! echo \"$out\" | grep -q '^kernel .*decode rows'"
          $<TARGET_FILE:pagedattn_cli>)
# A head without an instance of its own runs masked on the next larger one (head 96 on the
# head-128 instance of the Hopper prefill kernel), and explain says so.
add_test(NAME cli_explain_masked_prefill_head
  COMMAND sh -c "out=$(\"$0\" explain --assume-device h200 --num-heads 32 --num-kv-heads 8 --head-size 96 --dtype bf16 --seq-lens 4096,2048 --query-lens 512,512); r=$?;
                 echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^kernel *prefill rows: cuda_prefill_wgmma_ws (one call' &&
                 echo \"$out\" | grep -q 'the head-128 instance with head 96 masked on it'"
          $<TARGET_FILE:pagedattn_cli>)
# Usage errors: an unknown preset, a --device that contradicts the preset.
add_test(NAME cli_explain_assume_device_usage_errors
  COMMAND sh -c "err=$(\"$0\" explain --assume-device h300 2>&1); r=$?; echo \"$err\";
                 test $r -eq 2 && echo \"$err\" | grep -q -- \"--assume-device 'h300': expected one of h200, h100\" &&
                 err=$(\"$0\" explain --assume-device h200 --device cpu 2>&1); r=$?; echo \"$err\";
                 test $r -eq 2 && echo \"$err\" | grep -q -- '--device cpu contradicts it'"
          $<TARGET_FILE:pagedattn_cli>)

# bench: --list prints the rows without a GPU; the matrix has every axis value.
add_test(NAME cli_bench_matrix_list
  COMMAND sh -c "out=$(\"$0\" bench --matrix --list); r=$?; echo \"$out\" | head -5;
                 test $r -eq 0 && test $(echo \"$out\" | wc -l) -eq 240 &&
                 echo \"$out\" | grep -q '^bf16/h128/nhd/64x4096 ' &&
                 echo \"$out\" | grep -q '^fp16/h80/split/1x32768+63x512 ' &&
                 echo \"$out\" | grep -q '^fp8_e4m3/h96/nhd/256x1022 ' &&
                 echo \"$out\" | grep -q '^fp8_e5m2/h512/split/255x512+1x131072 ' &&
                 echo \"$out\" | grep -q '^fp8_e5m2/h64/nhd/64x1016 '"
          $<TARGET_FILE:pagedattn_cli>)
add_test(NAME cli_bench_matrix_filter_selects_rows
  COMMAND sh -c "out=$(\"$0\" bench --matrix --matrix-filter 'fp8_e4m3/,/split/' --list); r=$?;
                 echo \"$out\"; test $r -eq 0 && test $(echo \"$out\" | wc -l) -eq 30 &&
                 ! echo \"$out\" | grep -v -q '^fp8_e4m3/h[0-9]*/split/'"
          $<TARGET_FILE:pagedattn_cli>)
# --config takes verify's flags over the W1 shape, with COUNTxLENGTH lengths.
add_test(NAME cli_bench_config_list
  COMMAND sh -c "out=$(\"$0\" bench --config '--kv-dtype fp8_e4m3 --layout split --seq-lens 1x32768,63x512' --config '' --list); r=$?; echo \"$out\"; test $r -eq 0 &&
                 echo \"$out\" | grep -q '^config-1 *split_bs16_h128_q32kv8_bf16_fp8e4m3_.*s64_max32768' &&
                 echo \"$out\" | grep -q '^config-2 *nhd_bs16_h128_q32kv8_bf16_.*s64_max4096' &&
                 ! echo \"$out\" | grep -q '^W1 '"
          $<TARGET_FILE:pagedattn_cli>)
# --list --assume-device: select_kernel's decision for every row on the preset, without a GPU;
# the W1 row takes the decode fast path, and every row says a kernel or why not.
add_test(NAME cli_bench_list_assume_h200
  COMMAND sh -c "out=$(\"$0\" bench --matrix --list --assume-device h200); r=$?; echo \"$out\" | head -4;
                 test $r -eq 0 && echo \"$out\" | grep -q '^# select_kernel.s decision on NVIDIA H200 (assumed)' &&
                 echo \"$out\" | grep -E -q '^bf16/h128/nhd/64x4096 +[0-9]+  cuda_decode_mma_splitkv ' &&
                 test $(echo \"$out\" | grep -E -c ' cuda_[a-z_]+ | unsupported: ') -eq 240 &&
                 out=$(\"$0\" bench --workloads W1,T-conv-mixed --list --assume-device h100); r=$?;
                 echo \"$out\"; test $r -eq 0 && echo \"$out\" | grep -E -q '^W1 +[0-9]+  cuda_decode_mma_splitkv '"
          $<TARGET_FILE:pagedattn_cli>)
# Each usage error is exit status 2 with a message naming what is wrong.
add_test(NAME cli_bench_config_and_matrix_usage_errors
  COMMAND sh -c "bad() { want=$1; shift; err=$(\"$0\" bench \"$@\" 2>&1); r=$?; echo \"$*: $err\";
                         test $r -eq 2 && echo \"$err\" | grep -q -- \"$want\"; };
                 bad 'bogus' --config '--bogus 1' &&
                 bad '--device is a flag of bench itself' --config '--device cpu' &&
                 bad '--json is a flag of bench itself' --config '--json ' &&
                 bad \"'2x3x4': expected COUNTxLENGTH\" --config '--seq-lens 2x3x4' &&
                 bad \"'-1x5': expected LENGTH or COUNTxLENGTH\" --config '--seq-lens -1x5' &&
                 bad 'more than 2^24 sequences' --config '--seq-lens 20000000x1' &&
                 bad '--head-size -8: expected > 0' --config '--head-size -8' &&
                 bad 'contradicts bench' --config '--num-splits 3' --splits 2 &&
                 bad '--matrix-filter needs --matrix' --matrix-filter h128 &&
                 bad \"--matrix-filter 'nomatch' selects no row\" --matrix --matrix-filter nomatch &&
                 bad \"--check 'bogus': expected none, sampled, full or auto\" --check bogus &&
                 bad '--budget-ms -3: expected 0' --budget-ms -3 &&
                 bad '--assume-device needs --list' --matrix --assume-device h200 &&
                 bad \"--assume-device 'h1': expected one of\" --matrix --list --assume-device h1"
          $<TARGET_FILE:pagedattn_cli>)
set_tests_properties(cli_explain_assume_h200_w1_takes_the_decode_fast_path
  cli_explain_assume_h200_json cli_explain_json_says_which_kernel_runs_the_decode_rows
  cli_explain_assume_h200_forced_tile_is_tiled
  cli_explain_assume_device_usage_errors cli_bench_matrix_list
  cli_bench_matrix_filter_selects_rows cli_bench_config_list
  cli_bench_config_and_matrix_usage_errors cli_bench_list_assume_h200
  PROPERTIES LABELS "cli;cpu")

# The bench's output check (bench/check.h) on the host, against CPU-backend outputs: no GPU.
if(TARGET pagedattn_bench)
  pagedattn_add_test_executable(pagedattn_bench_tests unit
    ${CMAKE_CURRENT_SOURCE_DIR}/bench/test_bench_check.cpp)
  target_link_libraries(pagedattn_bench_tests PRIVATE pagedattn_bench)
  # The runner on a GPU (poison, check, time): label cuda, skipped without a GPU.
  if(PAGEDATTN_HAVE_CUDA)
    pagedattn_add_test_executable(pagedattn_bench_cuda_tests cuda
      ${CMAKE_CURRENT_SOURCE_DIR}/bench/test_bench_cuda.cpp)
    target_link_libraries(pagedattn_bench_cuda_tests PRIVATE pagedattn_bench)
  endif()
endif()
