// The emulator's fibers' execution contexts (kernels/simt/simt.cpp): where a suspended fiber
// resumes, and the switch from the running context to another on the same host thread.
//
// On x86-64 a context is a stack pointer. The switch (context.cpp, 21 instructions) pushes the
// registers a function call must preserve (rbx, rbp, r12 to r15) and the SSE and x87 control words
// on the running stack, saves the stack pointer, loads the other context's and pops its registers:
// a function call that returns on another stack. It makes no system call, where ucontext's
// swapcontext also saves and restores the signal mask at every switch (perf showed that as about
// half of the emulator's time). Elsewhere, and where the shadow stack of Intel's control-flow
// enforcement is built in (its return checks reject a return into a new stack), contexts are
// ucontext's.
#pragma once

#include <cstddef>

#if defined(__x86_64__) && !(defined(__CET__) && (__CET__ & 2))
#define KILN_SIMT_STACK_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace kiln::simt::detail {

struct Context {
#if defined(KILN_SIMT_STACK_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
};

// Makes `c` start `entry` at the top of [stack, stack + bytes) when switched to. `entry` must never
// return: it ends by switching away for good.
void start_context(Context& c, char* stack, size_t bytes, void (*entry)());

// Saves the running context into `from` and resumes `to`; returns when something switches back to
// `from`.
void switch_context(Context& from, Context& to);

}  // namespace kiln::simt::detail
