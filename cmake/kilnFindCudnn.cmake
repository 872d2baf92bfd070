# Finds cuDNN and names it kiln::cudnn (needs find_package(CUDAToolkit) first), for kiln's own build:
# libkiln_kernels links it privately, so the installed package does not need it.
# cuDNN ships with the CUDA toolkit on kiln's machines (lib64/libcudnn.so); KILN_CUDNN_LIBRARY
# (a cache variable) points elsewhere.
if(NOT TARGET kiln::cudnn)
  find_library(KILN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(KILN_CUDNN_LIBRARY)
    add_library(kiln::cudnn UNKNOWN IMPORTED)
    set_target_properties(kiln::cudnn PROPERTIES IMPORTED_LOCATION "${KILN_CUDNN_LIBRARY}")
  endif()
endif()
