# CTest script for the MPI fault tests: runs JOB (mpiexec and its arguments), a job that is meant
# to end abnormally (a rank times out and kiln calls MPI_Abort at exit, or a rank exits early), and
# judges what the ranks printed: PASS must match, FAIL (when given) must not, and no rank may
# crash.
# Usage: cmake "-DJOB=<mpiexec;-n;2;...>" -DPASS=<re> [-DFAIL=<re>] -P fault_job.cmake
#
# The launcher's own end is not part of the test. Open MPI's mpiexec (4.1 with PMIx 4.2 on Debian
# 12) sometimes dies of a segmentation fault in its own shutdown (PMIx_server_finalize) after it
# has ended an aborted job, when every rank is already gone; run directly under CTest that signal
# failed the test whatever the ranks had printed. Here a launcher that dies of a signal is allowed
# only when the output says the job was aborted, and the script says so in a line of its own.
foreach(var JOB PASS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "fault_job: pass -D${var}=...")
  endif()
endforeach()
execute_process(COMMAND ${JOB} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
# Either a rank's kiln::Error said it would abort, or the launcher said it ended the job.
set(aborted "the job aborts when this process exits|MPI_ABORT was invoked|the job has been aborted|\
processes exited with non-zero status")
if(NOT rc MATCHES "^[0-9]+$")
  if(NOT out MATCHES "${aborted}")
    message(FATAL_ERROR "fault_job: the launcher ended with '${rc}' and its output does not say the job was aborted")
  endif()
  message("fault_job: the launcher itself ended with '${rc}' after the job was aborted; the ranks' output above "
          "is what this test judges")
endif()
if(NOT out MATCHES "${PASS}")
  message(FATAL_ERROR "fault_job: the output does not match '${PASS}' (launcher exit: ${rc})")
endif()
if(DEFINED FAIL AND out MATCHES "${FAIL}")
  message(FATAL_ERROR "fault_job: the output matches '${FAIL}' (launcher exit: ${rc})")
endif()
# A rank that crashed (the launcher names the signal) fails every fault test; the ranks it kills
# when the job aborts end on SIGTERM or SIGKILL, which are not in this list.
if(out MATCHES "exited on signal (4|6|7|8|11) ")
  message(FATAL_ERROR "fault_job: a rank crashed: '${CMAKE_MATCH_0}'")
endif()
message("fault_job: the output matches '${PASS}' (launcher exit: ${rc})")
