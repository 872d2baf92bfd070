# CMake script, run at every build: writes OUT, the C++ source of kiln::examples::build_commit(),
# from `git describe --always --dirty` of SRC. Rewrites OUT only when the value changed, so a build
# at an unchanged commit recompiles nothing; the value is the tree as it was at build time.
# Usage: cmake -DGIT=<git or empty> -DSRC=<source dir> -DOUT=<file.cpp> -P build_commit.cmake
set(commit "unknown")
if(GIT)
  execute_process(COMMAND "${GIT}" -C "${SRC}" describe --always --dirty --abbrev=10 OUTPUT_VARIABLE described
                  RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0 AND described MATCHES "^[0-9A-Za-z._-]+$")
    set(commit "${described}")
  endif()
endif()
set(text "// Written by examples/build_commit.cmake at build time.\n#include \"examples/run_record.h\"\n\nconst char* kiln::examples::build_commit() { return \"${commit}\"; }\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}.tmp" "${text}")
  file(RENAME "${OUT}.tmp" "${OUT}")
endif()
