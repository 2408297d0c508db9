/* nbdiff's command line and files under hostile input (tool_input.h: arguments, two files, and
   FIFOs, directories, devices and missing paths as arguments). Checks on every run: exit 0, 1 or
   2 (as nbdiff --help documents), a message naming nbdiff on every error, no crash, sanitizer
   report or leak, no special file replaced; each seed (a valid comparison) runs.
   libFuzzer: any input. Otherwise a deterministic driver (gcc, also under ASan):
       fuzz_nbdiff [iterations]   mutations of the seeds
       fuzz_nbdiff --corpus FILE...   --write-seeds DIR */
#include "tool_input.h"
#define main tool_main
#include "../../examples/nbdiff.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    run_tool(data, size, "nbdiff", 2);
    return 0;
}

#ifndef NB_LIBFUZZER
int main(int argc, char** argv) {
    static const char* const words[] = {
        "@A", "@B", "@F", "@D", "@N", "@O", "@S", "--atol", "--rtol", "--prefix", "--scaled", "--all", "--help",
        "-h", "-", "", "1e-3", "0", "-1", "5%", "nan", "inf", "1e999", " 1", "0x10", "w", "v", "--bogus"};
    static const char* const names[2] = {"w", "v"};
    static const int shapes[2][3] = {{2, 3, 0}, {4, 0, 0}};
    static const float w[6] = {1, -2, 3.5f, 0, 1e-3f, -7}, v[4] = {0.5f, 0.25f, -1, 2};
    static const float w2[6] = {1, -2, 3.5f, 0, 1.1e-3f, -7}, v2[4] = {0.5f, 0.25f, -1, 2};
    const float* va[2] = {w, v};
    const float* vb[2] = {w2, v2};
    static tool_in seeds[4];
    static const char* const args[4][5] = {{"@A", "@B", "--atol", "1e-3"}, {"@A", "@A"},
                                           {"@A", "@B", "--scaled", "--atol", "0.1"}, {"@B", "@B", "--all", "--prefix", "v"}};
    static const int nargs[4] = {4, 2, 5, 5};
    int k, j;
    for (k = 0; k < 4; k++) {
        for (j = 0; j < nargs[k]; j++) seeds[k].args[j] = args[k][j];
        seeds[k].nargs = nargs[k];
        seeds[k].na = st_small(seeds[k].a, sizeof seeds[k].a, k == 3 ? "format=pt" : NULL, 2, names, shapes, va);
        seeds[k].nb = st_small(seeds[k].b, sizeof seeds[k].b, NULL, 2, names, shapes, vb);
    }
    return tool_driver(argc, argv, "nbdiff", seeds, 4, words, (int)(sizeof words / sizeof *words), 2);
}
#endif
