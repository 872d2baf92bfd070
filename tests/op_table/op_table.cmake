# The op table as a library (kiln_op_table): the rows, their registry and helpers, without a test
# framework. Included by tests/ (the CPU runner, the CUDA parity runner) and bench/ (gpu_bench,
# bench_cases); whichever comes first defines it, so the rows compile once.
if(NOT TARGET kiln_op_table)
  # One rows file per op family, in the order of row_families() (op_table.cpp).
  set(kiln_op_table_rows
    ${PROJECT_SOURCE_DIR}/tests/op_table/elementwise_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/copy_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/math_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/reduce_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/scan_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/einsum_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/distance_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/topk_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/shape_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/index_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/search_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/triangle_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/view_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/random_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/factory_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/fold_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/matmul_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/conv_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/pool_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/softmax_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/activation_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/layer_norm_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/loss_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/margin_loss_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/norm_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/special_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/polynomial_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/interpolate_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/batch_norm_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/cross_entropy_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/ctc_loss_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/scatter_reduce_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/grid_sample_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/volume_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/other_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/join_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/scatter_into_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/blas_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/linalg_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/spectral_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/fft_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/pointwise_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/mse_loss_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/embedding_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/dropout_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/attention_rows.cpp
    ${PROJECT_SOURCE_DIR}/tests/op_table/foreach_rows.cpp)
  add_library(kiln_op_table STATIC ${PROJECT_SOURCE_DIR}/tests/op_table/op_table.cpp
              ${PROJECT_SOURCE_DIR}/tests/op_table/matrix_ref.cpp ${kiln_op_table_rows})
  # Most rows compile at -O0, as the tests' own sources do (tests/CMakeLists.txt): they build inputs
  # and name ops. op_table.cpp, whose checks and gradchecks do the work, keeps the build type's level,
  # and so do matrix_ref.cpp (the linear-algebra rows' shared loops) and the rows with heavy float64
  # reference loops of their own (products, convolutions, pooling, attention); the spectral rows'
  # Jacobi reference runs on matrices of at most 5 x 5. -fvisibility-inlines-hidden:
  # tests/CMakeLists.txt says why.
  set(kiln_op_table_rows_O0 ${kiln_op_table_rows})
  list(FILTER kiln_op_table_rows_O0 EXCLUDE REGEX "/(matmul|conv|pool|attention)_rows\\.cpp$")
  set_property(SOURCE ${kiln_op_table_rows_O0} APPEND PROPERTY COMPILE_OPTIONS -O0 -fvisibility-inlines-hidden)
  target_link_libraries(kiln_op_table PUBLIC kiln_core PRIVATE kiln_warnings)
  target_include_directories(kiln_op_table PUBLIC ${PROJECT_SOURCE_DIR})
endif()
