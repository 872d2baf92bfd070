#!/usr/bin/env python3
"""CTest check of tools/kernel_resources.py's reading of ptxas' -v output (no compiler needed): on a
log in ptxas' own words, with a kernel that spills and names its stack, one whose line has no
barriers, an sm_90a kernel and a device function that is not a kernel, the records must hold each
entry's registers, spills, stack, barriers and static shared memory; and the kernel names must lose
their namespaces, return type and parameters. Exits 1 naming what differs.

  usage: kernel_resources_check.py --tool tools/kernel_resources.py
"""
import argparse
import importlib.util
import sys

LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN4kiln12attention_tc32attention_backward_dkv_tc_kernelI6__halfLi64ELb1EEEvPT_S4_PKS3_PKfS8_S6_S6_S6_NS0_8TcParamsE' for 'sm_90'
ptxas info    : Function properties for _ZN4kiln12attention_tc32attention_backward_dkv_tc_kernelI6__halfLi64ELb1EEEvPT_S4_PKS3_PKfS8_S6_S6_S6_NS0_8TcParamsE
    16 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16 bytes cumulative stack size, 64 bytes smem
ptxas info    : Compile time = 598.100 ms
ptxas info    : Function properties for _ZN4kiln6helperEv
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z6simplePf' for 'sm_80'
ptxas info    : Function properties for _Z6simplePf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN4kiln12attention_tc30attention_forward_wgmma_kernelI13__nv_bfloat16Li128ELb0ELNS_5wgmma5OrderE2EEEvPT_PfPKS4_S8_S8_14CUtensorMap_stS9_S9_NS0_8TcParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN4kiln12attention_tc30attention_forward_wgmma_kernelI13__nv_bfloat16Li128ELb0ELNS_5wgmma5OrderE2EEEvPT_PfPKS4_S8_S8_14CUtensorMap_stS9_S9_NS0_8TcParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 5 barriers, 1248 bytes cmem[0]
"""

WANT = [
    {"arch": "sm_90", "registers": 255, "barriers": 1, "smem": 64, "stack": 16, "spill_stores": 16, "spill_loads": 16},
    {"arch": "sm_80", "registers": 12, "barriers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0},
    {"arch": "sm_90a", "registers": 168, "barriers": 5, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0},
]
NAMES = {
    "void kiln::attention_tc::attention_forward_wgmma_kernel<__nv_bfloat16, 128, false, (kiln::wgmma::Order)2>"
    "(__nv_bfloat16*, float*, __nv_bfloat16 const*, CUtensorMap_st)":
        "attention_forward_wgmma_kernel<__nv_bfloat16, 128, false, Order 2>",
    "simple(float*)": "simple",
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", required=True)
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("kernel_resources", args.tool)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)

    problems = []
    got = tool.parse(LOG)
    if len(got) != len(WANT):
        problems.append(f"{len(got)} records, want {len(WANT)} (the device function is not a kernel): {got}")
    for g, w in zip(got, WANT):
        for key, value in w.items():
            if g.get(key) != value:
                problems.append(f"{g.get('mangled')}: {key} = {g.get(key)}, want {value}")
    for full, short in NAMES.items():
        if tool.short_name(full) != short:
            problems.append(f"short_name({full!r}) = {tool.short_name(full)!r}, want {short!r}")
    for line in problems:
        print("kernel_resources_check:", line)
    if problems:
        return 1
    print(f"kernel_resources_check: {len(got)} records and {len(NAMES)} names as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
