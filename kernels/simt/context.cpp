// The context switch of kernels/simt/context.h.
#include "kernels/simt/context.h"

#include <cstdint>
#include <cstdlib>

namespace kiln::simt::detail {

#if defined(KILN_SIMT_STACK_SWITCH)

// kiln_simt_switch(save_sp, load_sp), System V calling convention: save_sp in rdi, load_sp in rsi.
// A switched-out context's stack holds, from its saved stack pointer up: the MXCSR (4 bytes) and
// the x87 control word (2 bytes, in an 8-byte slot), r15, r14, r13, r12, rbx, rbp, and the address
// to return to.
extern "C" void kiln_simt_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text, "ax", @progbits
  .p2align 4
  .globl kiln_simt_switch
  .hidden kiln_simt_switch
  .type kiln_simt_switch, @function
kiln_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_simt_switch, .-kiln_simt_switch
  .popsection
)");

void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  // A switch to this context pops the saved words below and returns into `entry` with the stack
  // as a call leaves it: 16-byte aligned plus the (never used) return address's 8 bytes.
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                   // entry's return address: it never returns
  *--sp = reinterpret_cast<uint64_t>(entry);  // where the switch returns to
  for (int i = 0; i < 6; ++i) *--sp = 0;       // rbp, rbx, r12 to r15
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));  // the launching thread's rounding and exception modes
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  *--sp = uint64_t{mxcsr} | uint64_t{fpu_control} << 32;
  c.sp = sp;
}

void switch_context(Context& from, Context& to) { kiln_simt_switch(&from.sp, to.sp); }

#else

void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  if (getcontext(&c.uc) != 0) std::abort();
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;  // entry never returns
  makecontext(&c.uc, entry, 0);
}

void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

#endif

}  // namespace kiln::simt::detail
