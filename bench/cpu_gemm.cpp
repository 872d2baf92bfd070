// placeholder: CPU GEMM benchmark
int main() { return 0; }
