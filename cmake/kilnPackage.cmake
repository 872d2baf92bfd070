# kiln as a CMake package: kiln::<layer> names for projects that add_subdirectory(kiln), and install
# rules that put the headers, the libraries and a relocatable package config for find_package(kiln)
# under a prefix. Included by the top-level CMakeLists.txt once the libraries exist, so this one file
# says what kiln exports and the library folders keep only their sources and links.
include(CMakePackageConfigHelpers)

set(KILN_LAYERS kernels core nn data dist)
foreach(layer IN LISTS KILN_LAYERS)
  # The same name as an add_subdirectory alias and as an imported target: user code links kiln::nn
  # either way.
  add_library(kiln::${layer} ALIAS kiln_${layer})
  # Installed, the libraries sit in one folder and find each other through $ORIGIN; the link path
  # adds the CUDA toolkit's folders (the system's are implicit and left out).
  set_target_properties(kiln_${layer} PROPERTIES EXPORT_NAME ${layer}
                        INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
endforeach()
# kiln's headers are C++20: a consumer compiling them gets at least that, whatever it sets itself.
target_compile_features(kiln_kernels PUBLIC cxx_std_20)

# A parent project reads the same variable that find_package(kiln) sets.
if(NOT PROJECT_IS_TOP_LEVEL)
  set(kiln_WITH_CUDA ${KILN_WITH_CUDA} PARENT_SCOPE)
endif()

if(NOT KILN_INSTALL)
  return()
endif()

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(TARGETS kiln_kernels kiln_core kiln_nn kiln_data kiln_dist EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers keep their folders (includes read "core/tensor.h"); .cuh files are device code
# private to kernels/cuda. The folders are listed at install time, so a new header needs no edit here.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/nn
                  ${PROJECT_SOURCE_DIR}/data ${PROJECT_SOURCE_DIR}/dist
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# While kiln is 0.x a minor version may break its API: find_package(kiln 0.1) accepts 0.1.* only.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cmake/kilnConfigVersion.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})
